"""Context gating, the integration step after a context-attention sublayer (Zhang et al. 2018, Eqs. 21-22).

    Gating(H) = lambda * H + (1 - lambda) * U,    lambda = sigmoid(W_i H + W_s U)

with H the sublayer INPUT (the sentence stream) and U = SubLayer(H) its output (the context read).
lambda close to 1 keeps the sentence stream and suppresses the context.

NOT IN PAPER (reading Z2 in docs/papers/zhang2018.md, after the authors' reference code): lambda is a
D-dimensional gate per position, W_i and W_s are D x D matrices without bias, and no dropout is
applied to U inside the gated path. The gate is an `integrate` module for `ResidualBlock`, which
keeps the post-LayerNorm after it: `LN(Gating(H))`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class ContextGate(nn.Module):
    """`Integrate(H, U) = lambda * H + (1 - lambda) * U`, `lambda = sigmoid(W_i H + W_s U)` (Eqs. 21-22).

    Parameters: `input_proj.weight` (W_i) and `context_proj.weight` (W_s), each (D, D), Xavier-uniform.
    """

    def __init__(self, d_model: int):
        super().__init__()
        self.input_proj = nn.Linear(d_model, d_model, bias=False)  # W_i
        self.context_proj = nn.Linear(d_model, d_model, bias=False)  # W_s
        nn.init.xavier_uniform_(self.input_proj.weight)
        nn.init.xavier_uniform_(self.context_proj.weight)

    def mix(self, h: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        """Eq. 21 and the lambda it used (1 keeps h, 0 takes u), both (B, T, D), from h, u (B, T, D)."""
        gate = torch.sigmoid(self.input_proj(h) + self.context_proj(u))  # Eq. 22
        return gate * h + (1.0 - gate) * u, gate

    def forward(self, h: Tensor, u: Tensor) -> Tensor:
        """h, u: (B, T, D) -> (B, T, D)."""
        return self.mix(h, u)[0]
