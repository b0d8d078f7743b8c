"""The context sentences of a batch one by one, for models that encode each of them alone.

`ctx_src` (B, C) holds the k previous source sentences joined into one row, oldest first, with the
distance of every token's sentence in `ctx_src_seg` (1 = the previous sentence, k = the oldest; the
batch contract, `batch.py`). Li & Feng 2019 encode every context sentence separately with the
sentence encoder (Eq. 15, reading L7), so each needs to look like a source sentence again: its own
tokens followed by `<eos>`, positions from 0. `split_sentences` cuts the joined row back into
sentences; `pack_left` then lays the encoded tokens of a row's sentences end to end again, with no
gap, in document order (Eq. 15's H^doc).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from lightning_docmt.batch import EOS_ID, PAD_ID, SEP_ID


class ContextSentences(NamedTuple):
    """tokens (B, K, M): sentence j of row b, oldest first (j = 0 is distance K), each ending in
    `<eos>` and right-padded; present (B, K): whether row b has that sentence (a document's first
    sentences have fewer than K before them; an absent sentence is the single token `<eos>`, so
    that every row the encoder reads is non-empty)."""

    tokens: Tensor
    present: Tensor


def split_sentences(ctx: Tensor, seg: Tensor, max_sentences: int) -> ContextSentences:
    """Cut `ctx` (B, C) with its segment ids `seg` (B, C) into K = `max_sentences` sentences.

    The joined row's final `<eos>` and any `<sep>` are dropped and every sentence gets an `<eos>`
    of its own, as the current sentence has. A truncated context (`context.max_tokens`) keeps the
    tail of its oldest sentence.
    """
    batch, _ = ctx.shape
    distance = torch.arange(max_sentences, 0, -1, device=ctx.device)  # (K,) oldest first
    is_body = ctx.ne(PAD_ID) & ctx.ne(SEP_ID)  # (B, C)
    is_body[torch.arange(batch, device=ctx.device), (ctx.ne(PAD_ID).sum(1) - 1).clamp(min=0)] = False  # the final <eos>
    member = is_body[:, None, :] & seg[:, None, :].eq(distance[None, :, None])  # (B, K, C)
    lengths = member.sum(-1)  # (B, K)
    width = int(lengths.max()) + 1 if lengths.numel() else 1  # + <eos>
    position = member.cumsum(-1) - 1  # (B, K, C): index of each member token inside its sentence
    tokens = torch.full((batch, max_sentences, width), PAD_ID, dtype=ctx.dtype, device=ctx.device)
    b, k, c = member.nonzero(as_tuple=True)
    tokens[b, k, position[b, k, c]] = ctx[b, c]
    tokens.scatter_(2, lengths[:, :, None], EOS_ID)  # (B, K, M): <eos> after the last token
    return ContextSentences(tokens, lengths.gt(0))


def pack_left(states: Tensor, keep: Tensor) -> tuple[Tensor, Tensor]:
    """The positions of `states` (B, N, D) where `keep` (B, N) is true, moved left in order.

    Returns (B, L, D) and its padding mask (B, L) (True = padding), L the largest kept count
    (at least 1, so that an all-empty batch still has a shape).
    """
    order = torch.argsort((~keep).int(), dim=1, stable=True)  # (B, N): kept positions first, in order
    count = keep.sum(1)  # (B,)
    width = max(int(count.max()) if count.numel() else 0, 1)
    order = order[:, :width]  # (B, L)
    packed = states.gather(1, order[:, :, None].expand(-1, -1, states.size(-1)))  # (B, L, D)
    pad = torch.arange(width, device=states.device)[None, :] >= count[:, None]  # (B, L)
    return packed.masked_fill(pad[:, :, None], 0.0), pad
