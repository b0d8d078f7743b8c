"""Luong et al. 2015's global attention with the "dot" score, and the attentional hidden state.

Yamagishi & Komachi 2019 (docs/papers/yamagishi.md section 1) use the same attention twice:

    (4-5) c_n       = sum_m alpha_{n,m} s_m,    alpha_{n,m} = softmax_m(s_m . h_n)   source sentence
    (8-9) c^{i-1}_n = sum_t beta_{n,t} z_t,     beta_{n,t}  = softmax_t(z_t . h_n)   context memory
    (3)   h~_n      = W_h [h_n; c_n; c^{i-1}_n]

`dot_attention` computes c from queries h and a `Memory`. A memory with no real position (every
position padding) gives c = 0: the c^0 = 0 of a document's first sentence. Padded positions get
weight exactly 0.

`AttentionalHidden` is Eq. 3 with W_h split by columns (reading Y14): `base` over [h; c] (H x 2H,
the sentence model's whole W_h) and `context` over c^{i-1} (H x H, only in context models), so
W_h [h; c; c^{i-1}] = base [h; c] + context c^{i-1} and a sentence model's checkpoint loads into a
context model with only `context.weight` missing. No bias (Eq. 3 has none); tanh only with
`tanh=True` (Luong's form, a deviation from Eq. 3: reading Y3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn


@dataclass
class Memory:
    """States `states` (B, S, H) with their padding `pad` (B, S) bool (True = padding), batch-first;
    real positions come first in every row (right padding)."""

    states: Tensor
    pad: Tensor

    @classmethod
    def empty(cls, batch: int, length: int, width: int, device: torch.device) -> Memory:
        """A memory with no real position: zero states (batch, length, width), all padding."""
        return cls(torch.zeros(batch, length, width, device=device),
                   torch.ones(batch, length, dtype=torch.bool, device=device))

    def last(self, length: int) -> Memory:
        """Exactly `length` positions per row: the row's last `length` real positions (all of them
        when it has fewer), first, then padding with zero states."""
        real = (~self.pad).sum(1)  # (B,)
        start = (real - length).clamp(min=0)  # (B,) the first position kept
        index = start[:, None] + torch.arange(length, device=real.device)  # (B, length)
        keep = index < real[:, None]  # (B, length)
        index = index.clamp(max=self.states.size(1) - 1)
        states = self.states.gather(1, index[..., None].expand(-1, -1, self.states.size(2)))  # (B, length, H)
        return Memory(states.masked_fill(~keep[..., None], 0.0), ~keep)


def dot_attention(query: Tensor, memory: Memory) -> Tensor:
    """The context vectors (B, T, H) of queries h (B, T, H) over `memory` (Eqs. 4-5, 8-9)."""
    scores = torch.bmm(query, memory.states.transpose(1, 2))  # (B, T, S)
    pad = memory.pad[:, None, :]  # (B, 1, S)
    weights = torch.softmax(scores.masked_fill(pad, torch.finfo(scores.dtype).min), dim=-1)
    weights = weights.masked_fill(pad, 0.0)  # a row without real positions: uniform -> all 0
    return torch.bmm(weights.to(memory.states.dtype), memory.states)  # (B, T, H)


class AttentionalHidden(nn.Module):
    """Eq. 3: h~ = W_h [h; c; c^{i-1}], W_h = [base | context] (see the module docstring)."""

    def __init__(self, hidden: int, context: bool, tanh: bool):
        super().__init__()
        self.base = nn.Linear(2 * hidden, hidden, bias=False)  # the columns over [h; c]
        self.context = nn.Linear(hidden, hidden, bias=False) if context else None  # over c^{i-1}
        self.tanh = tanh

    def forward(self, h: Tensor, c: Tensor, c_context: Optional[Tensor]) -> Tensor:
        """h, c, c^{i-1}: (B, T, H) -> h~ (B, T, H); `c_context` None only without `context`."""
        out = self.base(torch.cat([h, c], dim=-1))  # (B, T, H)
        if self.context is not None:
            out = out + self.context(c_context)
        return torch.tanh(out) if self.tanh else out
