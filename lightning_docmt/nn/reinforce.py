"""REINFORCE for a policy over discrete choices with S Monte-Carlo samples per example (Williams 1992).

Li & Feng 2019 train their hard selector theta_r to maximise J_r = E_{z ~ P_z}[R(z)] (Eq. 30), with
R(z) = P(y | X_<k, x; theta_s) the probability of the reference (Eq. 29). The estimator

    grad J_r ~ (1/S) sum_s A_s grad log P_z(z^(s))

uses an advantage A_s in place of R(z^(s)): the reward relative to the other samples of the same
example (reading L2, docs/papers/lifeng2019.md). `advantages` computes it from the samples'
log-probabilities of the reference, log R; the reward kinds (`rl.reward`):

- `seq_prob` (Eq. 29, the paper's): R = prod_j p(y_j) = exp(log R). A_s = R_s / mean(R) - 1,
  computed as exp(log R_s - logmeanexp(log R)) - 1, so that rewards far below the smallest float
  (a 40-token reference easily has P(y) < 1e-50) keep their ratios.
- `log_prob` (a deviation): R = log P(y); A_s = R_s - mean(R).
- `avg_token_log_prob` (a deviation): R = log P(y) / |y|; A_s = R_s - mean(R).

The mean is over an example's own samples (its baseline), so the advantages of one example sum to
zero: a sample better than its siblings gains probability, whatever the example's difficulty.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

REWARDS = ("seq_prob", "log_prob", "avg_token_log_prob")


def rewards(log_prob: Tensor, tokens: Tensor, kind: str) -> Tensor:
    """(N, S) rewards in the units of `kind` from the references' log-probabilities (N, S) and
    their lengths in tokens (N, S); `seq_prob` is returned as log R (it underflows otherwise)."""
    if kind == "avg_token_log_prob":
        return log_prob / tokens.clamp(min=1)
    if kind in ("seq_prob", "log_prob"):
        return log_prob
    raise ValueError(f"unknown reward {kind!r}; known: {', '.join(REWARDS)}")


def advantages(log_prob: Tensor, tokens: Tensor, kind: str) -> Tensor:
    """(N, S) advantages of the S samples of each of N examples (see the module docstring)."""
    reward = rewards(log_prob, tokens, kind)  # (N, S)
    if kind == "seq_prob":  # R_s / mean(R) - 1 with R = exp(reward)
        log_mean = torch.logsumexp(reward, dim=1, keepdim=True) - math.log(reward.size(1))  # (N, 1)
        return torch.exp(reward - log_mean) - 1.0
    return reward - reward.mean(dim=1, keepdim=True)


def policy_loss(log_prob_z: Tensor, advantage: Tensor) -> Tensor:
    """The summed surrogate loss -sum_n (1/S) sum_s A_s log P_z(z^(s)) whose gradient is minus the
    estimator above; log_prob_z (N, S) carries the gradient, the advantage (N, S) none."""
    return -(advantage.detach() * log_prob_z).mean(dim=1).sum()
