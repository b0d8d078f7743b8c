"""A sublayer with its residual connection and layer normalisation.

Post-LN (the papers'; Vaswani et al. 2017, Sec. 5.4; Zhang et al. 2018, Eqs. 11-18):
    y = LN(Integrate(x, F(x)))
Pre-LN (Wang et al. 2019, `model.pre_norm=true`):
    y = Integrate(x, F(LN(x)))
The default integration is the residual of Zhang et al. 2018, Eq. 20, with dropout on the sublayer
output: `Integrate(x, u) = x + dropout(u)`. The integration step is a module of its own so that an
architecture can replace it for one sublayer only (Zhang's context gate, Eqs. 21-22, replaces it
after the context-attention sublayers and keeps the post-LN).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Optional

from torch import Tensor, nn

from lightning_docmt.nn.packing import Packing, dropout_of

LAYER_NORM_EPS = 1e-6  # THUMT's value (a pretrained encoder's layers keep their own, BERT's 1e-12)


class Residual(nn.Module):
    """`Integrate(x, u) = x + dropout(u)` (Eq. 20)."""

    def __init__(self, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, u: Tensor, packing: Optional[Packing] = None) -> Tensor:
        """x, u: (B, T, D), or packed (N, D) with their `packing` (`nn/packing.py`)."""
        return x + dropout_of(self.dropout, u, packing)


class ResidualBlock(nn.Module):
    """`fn` wrapped with layer normalisation (`norm`) and an integration step (`integrate`).

    `fn(x, inputs, cache) -> u` returns a tensor shaped like `x` (B, T, D); `inputs` and `cache` are
    passed through untouched (see `layers.LayerInputs`); `integrate(x, u)` merges it into the stream.

    Parameter names: `fn.*` (the sublayer), `norm.*` (its LayerNorm), `integrate.*` (gate weights,
    if the integration has any).

    Packed positions (`nn/packing.py`): when `inputs.packing` is set, `x` is (N, D), the real
    positions of the batch. A block whose sublayer reads packed rows (`fn.packable`) and whose
    integration is the plain residual runs on them; any other block (a context gate, which keeps its
    lambda per position for `gate_stats`, or a sublayer that needs the rows laid out) gets the padded
    (B, T, D) layout and returns packed rows again.
    """

    def __init__(self, fn: nn.Module, d_model: int, dropout: float, pre_norm: bool,
                 integrate: Optional[nn.Module] = None, norm_eps: float = LAYER_NORM_EPS):
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(d_model, eps=norm_eps)
        self.integrate = integrate if integrate is not None else Residual(dropout)
        self.pre_norm = pre_norm
        self.packable = getattr(fn, "packable", False) and type(self.integrate) is Residual

    def forward(self, x: Tensor, inputs: Any = None, cache: Optional[Any] = None) -> Tensor:
        packing = getattr(inputs, "packing", None)
        if packing is not None and not self.packable:
            return packing.pack(self(packing.unpack(x), inputs.unpacked(), cache))  # (N, D) via (B, T, D)
        merge = self.integrate if packing is None else partial(self.integrate, packing=packing)
        if self.pre_norm:
            return merge(x, self.fn(self.norm(x), inputs, cache))
        return self.norm(merge(x, self.fn(x, inputs, cache)))
