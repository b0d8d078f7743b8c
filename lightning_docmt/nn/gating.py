"""Context gating, the integration step after a context-attention sublayer (Zhang et al. 2018, Eqs. 21-22).

    Gating(H) = lambda * H + (1 - lambda) * U,    lambda = sigmoid(W_i H + W_s U)

with H the sublayer INPUT (the sentence stream) and U = SubLayer(H) its output (the context read).
lambda close to 1 keeps the sentence stream and suppresses the context.

NOT IN PAPER (reading Z2 in docs/papers/zhang2018.md, after the authors' reference code): lambda is a
D-dimensional gate per position, W_i and W_s are D x D matrices without bias, and no dropout is
applied to U inside the gated path. The gate is an `integrate` module for `ResidualBlock`, which
keeps the post-LayerNorm after it: `LN(Gating(H))`.

NOT IN PAPER (reading Z15): `hold` replaces Eq. 22 by a constant lambda, so that a warm-up stage can
train the context read while the gate cannot shut (a saturated sigmoid passes no gradient to open
it again); a later stage releases it. The gate weights are then unused and must stay frozen.

Every gate keeps the lambda of its last forward pass (`last_gate`, detached) for `gate_stats`: how
open the gates are is logged per update (`gate_mean`, `gate_shut`).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

SHUT_LAMBDA = 0.99  # lambda above this keeps the sentence stream; the sigmoid's slope there is < 0.01


class ContextGate(nn.Module):
    """`Integrate(H, U) = lambda * H + (1 - lambda) * U`, `lambda = sigmoid(W_i H + W_s U)` (Eqs. 21-22).

    Parameters: `input_proj.weight` (W_i) and `context_proj.weight` (W_s), each (D, D), Xavier-uniform.
    `hold`: a constant lambda in (0, 1) instead of Eq. 22 (reading Z15), None for the paper's gate.
    """

    def __init__(self, d_model: int, hold: Optional[float] = None):
        super().__init__()
        if hold is not None and not 0.0 < hold < 1.0:
            raise ValueError(f"a held gate needs a lambda strictly between 0 and 1, got {hold}")
        self.input_proj = nn.Linear(d_model, d_model, bias=False)  # W_i
        self.context_proj = nn.Linear(d_model, d_model, bias=False)  # W_s
        nn.init.xavier_uniform_(self.input_proj.weight)
        nn.init.xavier_uniform_(self.context_proj.weight)
        self.hold = hold
        self.last_gate: Optional[Tensor] = None  # (B, T, D), detached: lambda of the last forward

    def mix(self, h: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        """Eq. 21 and the lambda it used (1 keeps h, 0 takes u), both (B, T, D), from h, u (B, T, D)."""
        if self.hold is not None:
            gate = torch.full_like(h, self.hold)  # reading Z15: held open, nothing to shut
        else:
            gate = torch.sigmoid(self.input_proj(h) + self.context_proj(u))  # Eq. 22
        self.last_gate = gate.detach()
        return gate * h + (1.0 - gate) * u, gate

    def forward(self, h: Tensor, u: Tensor) -> Tensor:
        """h, u: (B, T, D) -> (B, T, D)."""
        return self.mix(h, u)[0]


def gate_stats(gates: list[tuple[Tensor, Tensor]]) -> dict[str, Tensor]:
    """How open gates are, over the real positions of each `(lambda (B, T, D), real (B, T) bool)`:
    `gate_mean`, the mean lambda (1 keeps the sentence stream alone), and `gate_shut`, the share of
    lambda entries above `SHUT_LAMBDA`, where the sigmoid passes almost no gradient."""
    total = opened = shut = None
    for gate, real in gates:
        gate = gate.float()  # under bf16 autocast a bf16 sum of lambdas can exceed 1
        mask = real.unsqueeze(-1).expand_as(gate)  # (B, T, D)
        entries, value, closed = mask.sum(), (gate * mask).sum(), (gate.gt(SHUT_LAMBDA) & mask).sum()
        total = entries if total is None else total + entries
        opened = value if opened is None else opened + value
        shut = closed if shut is None else shut + closed
    if total is None:
        return {}
    total = total.clamp(min=1)
    return {"gate_mean": opened / total, "gate_shut": shut / total}
