"""Label-smoothed cross entropy (Szegedy et al. 2016), as used by every seed paper's Transformer.

The smoothed target puts `1 - eps` on the reference token and spreads `eps` uniformly over the
other `V - 1` tokens (fairseq's `label_smoothed_nll_loss`; THUMT's default eps = 0.1):

    loss_t = -(1 - eps) * log p(y_t) - eps / (V - 1) * sum_{v != y_t} log p(v)

Padding positions contribute nothing. The function returns the *sum* over target tokens of the
smoothed loss and of the plain NLL, plus the token count, so that callers can normalise per token
after gradient accumulation or across ranks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def label_smoothed_nll(logits: torch.Tensor, target: torch.Tensor, eps: float, pad_id: int
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """logits (B, T, V), target (B, T) -> (smoothed loss sum, nll sum, number of target tokens)."""
    lprobs = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    vocab = lprobs.size(-1)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (B, T)
    mask = target.ne(pad_id)
    nll = nll.masked_fill(~mask, 0.0)
    if eps > 0.0:
        others = -lprobs.sum(-1) - nll  # (B, T): -sum over v != y of log p(v)
        others = others.masked_fill(~mask, 0.0)
        loss = (1.0 - eps) * nll + eps / (vocab - 1) * others
    else:
        loss = nll
    return loss.sum(), nll.sum(), mask.sum()
