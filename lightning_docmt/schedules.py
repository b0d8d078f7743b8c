"""Learning-rate schedules of the seed papers (DESIGN.md section 7).

- `inverse_sqrt` (Vaswani et al. 2017, used by Zhang et al. 2018 Sec. 4.1 and Li & Feng):
  lr(t) = lr_scale * d_model^-0.5 * min(t^-0.5, t * warmup^-1.5)
- `linear_warmup_inverse_sqrt` (fairseq's `inverse_sqrt`, Ma et al. 2020's peak-lr recipe):
  lr(t) = peak * t / warmup for t < warmup, then peak * sqrt(warmup / t)
- `constant`: lr(t) = lr

t counts optimizer updates from 1. `step_offset` continues a schedule from an earlier stage (Zhang's
step 2 starts at the last step of step 1, reading Z9 in ablations.md).
"""

from __future__ import annotations

import math
from typing import Callable

SCHEDULES = ("inverse_sqrt", "linear_warmup_inverse_sqrt", "constant")


def lr_at(step: int, *, schedule: str, lr: float, warmup: int, d_model: int) -> float:
    """Learning rate at optimizer update `step` (1-based)."""
    t = max(step, 1)
    w = max(warmup, 1)
    if schedule == "inverse_sqrt":
        return lr * d_model ** -0.5 * min(t ** -0.5, t * w ** -1.5)
    if schedule == "linear_warmup_inverse_sqrt":
        return lr * t / w if t < w else lr * math.sqrt(w / t)
    if schedule == "constant":
        return lr
    raise ValueError(f"unknown lr schedule '{schedule}' (expected one of {SCHEDULES})")


def lr_lambda(*, schedule: str, lr: float, warmup: int, d_model: int, step_offset: int = 0
              ) -> Callable[[int], float]:
    """A LambdaLR multiplier (the optimizer's base lr is set to 1.0)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown lr schedule '{schedule}' (expected one of {SCHEDULES})")
    return lambda done: lr_at(done + 1 + step_offset, schedule=schedule, lr=lr, warmup=warmup,
                              d_model=d_model)
