"""Joining right-padded token rows into one input sequence per row (the uni-encoder models' input).

`join_rows(parts, lengths)` puts, for every batch row b, the first `lengths[k][b]` tokens of each
`parts[k]` one after the other, with no gap, and right-pads the result with `<pad>`. It also says
where each position came from (`origin`, the part index; -1 at padding) and where each part starts
(`starts`), so that a model can give the parts segment ids (Ma et al. 2020, Eq. 3) or cut one part
out again after some layers (Eq. 5). Users: `models/concat.py` ([previous; current], Tiedemann &
Scherrer 2017) and `models/flat.py` ([previous; current; next], Ma et al. 2020).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch
from torch import Tensor

from lightning_docmt.batch import PAD_ID


class JoinedRows(NamedTuple):
    """tokens (B, L) right-padded; origin (B, L) index of the part of every position, -1 at padding;
    starts (B, K) position where part k begins in each row (its length is the `lengths` given)."""

    tokens: Tensor
    origin: Tensor
    starts: Tensor


def join_rows(parts: Sequence[Tensor], lengths: Sequence[Tensor]) -> JoinedRows:
    """Per row b: parts[0][b, :lengths[0][b]] ++ parts[1][b, :lengths[1][b]] ++ ..., right-padded.

    parts: K tensors (B, L_k) of token ids; lengths: K tensors (B,), each <= L_k (0 drops the part
    from that row). L = the longest joined row.
    """
    if len(parts) != len(lengths) or not parts:
        raise ValueError(f"join_rows needs one length per part, got {len(parts)} parts and {len(lengths)} lengths")
    size = torch.stack(list(lengths), dim=1)  # (B, K)
    ends = size.cumsum(dim=1)  # (B, K)
    starts = ends - size  # (B, K)
    total = ends[:, -1]  # (B,)
    device = parts[0].device
    width = int(total.max()) if total.numel() else 0
    pos = torch.arange(width, device=device)[None, :]  # (1, L)
    tokens = torch.full((size.size(0), width), PAD_ID, dtype=parts[0].dtype, device=device)  # (B, L)
    origin = torch.full_like(tokens, -1)  # (B, L)
    for k, part in enumerate(parts):
        if part.size(1) == 0:
            continue
        begin, end = starts[:, k:k + 1], ends[:, k:k + 1]  # (B, 1) each
        inside = (pos >= begin) & (pos < end)  # (B, L)
        local = (pos - begin).clamp(0, part.size(1) - 1)  # (B, L) index into part k's row
        tokens = torch.where(inside, part.gather(1, local), tokens)  # (B, L)
        origin = origin.masked_fill(inside, k)
    return JoinedRows(tokens, origin, starts)
