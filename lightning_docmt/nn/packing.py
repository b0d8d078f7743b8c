"""Packed positions: the position-wise work of an encoder over the real tokens of a padded batch only.

Batches are bucketed by the length of the current sentence, so the rows that hold anything else
(previous sentences for a context encoder, `[previous; current]` for a concatenation or Flat
encoder, the sentences of a co-attention context) are padded unevenly: on the Bible at the `cpu`
profile only about half their positions are tokens (benchmarks/RESULTS.md, context overhead).
Everything in an encoder layer but the attention itself works position by position: the Q/K/V and
output projections, the FFN, LayerNorm, dropout and the residual. `Packing` runs those over an
(N, D) tensor of the N real positions, and lays the rows out as (B, L, D) only for the attention
scores (`nn/attention.py`); the keys and values of a padded cross-attention memory are projected
from its real positions in the same way.

What packing leaves unchanged: every value at a real position is computed by the same operations
(a matrix product over fewer rows may sum in another order, a float rounding difference), and
dropout draws its random numbers over the padded shape, as `torch.nn.functional.dropout` does, then
keeps those of the real positions (`Packing.dropout`): a packed run draws the same dropout masks
as an unpacked one, so training sees the same noise. Padded positions hold zeros after `unpack`
(before, whatever the layers computed there); every reader masks them.

When it applies (`Packing.of_mask`): on a CPU, and when at least `MIN_PADDING_SHARE` of the
positions are padding; below that, the gathers cost more than the products they save (the
sentence rows themselves, bucketed, are nearly all tokens). On a GPU batches stay padded: finding
the real positions synchronises with the host, and its fused dropout kernel draws masks in another
order, so a packed run there would not draw the same masks (not measured here: no GPU).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional

from torch import Tensor, nn

MIN_PADDING_SHARE = 0.15
"""Pack only batches with at least this share of padded positions (`benchmarks/context_overhead.py` measures
what packing saves per architecture, `--padded`)."""


@contextmanager
def padded_batches() -> Iterator[None]:
    """Run with every batch padded, as without packing (e.g. to measure what packing saves)."""
    global MIN_PADDING_SHARE
    before, MIN_PADDING_SHARE = MIN_PADDING_SHARE, math.inf
    try:
        yield
    finally:
        MIN_PADDING_SHARE = before


@dataclass(frozen=True, eq=False)
class Packing:
    """Where the real positions of a padded (B, L) batch sit in a packed (N, ...) tensor.

    index: (N,) flat positions `b * L + l` of the real tokens, ascending (row by row).
    batch, length: B and L.
    """

    index: Tensor
    batch: int
    length: int

    @classmethod
    def of_mask(cls, mask: Optional[Tensor], like: Tensor) -> Optional[Packing]:
        """The packing of a key mask (B, 1, 1, L) bool (True = token, `attention.key_mask`), or None when
        the batch stays padded: no mask (or one of another shape), a tensor `like` off the CPU, or
        less than `MIN_PADDING_SHARE` of the positions padded."""
        if mask is None or mask.dim() != 4 or mask.shape[1:3] != (1, 1) or like.device.type != "cpu":
            return None
        real = mask[:, 0, 0, :].reshape(-1)  # (B * L,)
        count = int(real.sum())
        if real.numel() == 0 or real.numel() - count < MIN_PADDING_SHARE * real.numel():
            return None
        return cls(real.nonzero().squeeze(1), mask.size(0), mask.size(-1))

    def pack(self, x: Tensor) -> Tensor:
        """(B, L, *F) -> (N, *F): the real positions, row by row."""
        return x.flatten(0, 1).index_select(0, self.index)

    def unpack(self, x: Tensor) -> Tensor:
        """(N, *F) -> (B, L, *F), zeros at the padded positions."""
        padded = x.new_zeros(self.batch * self.length, *x.shape[1:])  # (B * L, *F)
        return padded.index_copy(0, self.index, x).view(self.batch, self.length, *x.shape[1:])

    def dropout(self, dropout: nn.Dropout, x: Tensor) -> Tensor:
        """`dropout` of a packed x (N, *F): the mask `torch.nn.functional.dropout` would draw over the
        padded (B, L, *F) tensor, at the real positions (the same random numbers, the same result
        at every real position; checked in tests/nn/test_packing.py)."""
        p = dropout.p
        if not dropout.training or p == 0.0 or x.numel() == 0:
            return x
        if p == 1.0:
            return x * 0.0
        keep = x.new_empty(self.batch, self.length, *x.shape[1:]).bernoulli_(1.0 - p).div_(1.0 - p)
        return x * self.pack(keep)


def dropout_of(dropout: nn.Dropout, x: Tensor, packing: Optional[Packing]) -> Tensor:
    """`dropout(x)`, over a packed `x` when `packing` is given."""
    return dropout(x) if packing is None else packing.dropout(dropout, x)
