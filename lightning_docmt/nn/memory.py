"""Memories from encoders of another width: `MemoryProjection`.

A pretrained context encoder (BERT-like, PEGASUS) outputs states of its own width W_ext (384 for
MiniLM-L6, 768 for BERT-base), which differs from the model's `d_model` in general. "Diverse
Pretrained Context Encodings Improve Document Translation" (Donato et al. 2021) does not say how
the widths meet. Reading D4 (docs/papers/donato2021.md): one projection per external
stream to the model width, shared by the layers that read it, before their own key/value
projections; this block is that projection, and hands the result to the cross-attention
sublayers of `nn/layers.py` (or the stack of `nn/parallel_stack.py`) as an `AttentionMemory`:

    M = dropout(LN(H W_p + b_p)),   H: (B, E, W_ext) -> M: (B, E, D)

The LayerNorm (`layer_norm=True`) and the dropout are options of this block, not claims about the
paper. Padded positions of M are set to zero: besides the attention mask, which already gives
them no weight, this keeps whatever an external encoder leaves at padded positions (even NaN)
out of the attention product.
"""

from __future__ import annotations

from torch import Tensor, nn

from lightning_docmt.nn.attention import AttentionMemory
from lightning_docmt.nn.residual import LAYER_NORM_EPS


class MemoryProjection(nn.Module):
    """External states (B, E, `in_width`) + padding (B, E) -> `AttentionMemory` of width `d_model`.

    Parameters: `proj.weight` (D, W_ext) Xavier-uniform and `proj.bias` zero (the initialisation
    of the other projections in `nn/`), `norm.*` when `layer_norm`.
    """

    def __init__(self, in_width: int, d_model: int, *, layer_norm: bool = True,
                 dropout: float = 0.0):
        super().__init__()
        self.proj = nn.Linear(in_width, d_model)
        self.norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS) if layer_norm else nn.Identity()
        self.dropout = nn.Dropout(dropout)
        nn.init.xavier_uniform_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, states: Tensor, pad: Tensor) -> AttentionMemory:
        """states (B, E, W_ext), pad (B, E) bool (True = padding, e.g. `batch["ctx_ext_pad"]`)."""
        memory = self.dropout(self.norm(self.proj(states)))  # (B, E, D)
        memory = memory.masked_fill(pad[:, :, None], 0.0)
        return AttentionMemory.from_padding(memory, pad)
