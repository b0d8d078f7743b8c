"""Learning-rate schedules of the seed papers (docs/design.md section 7).

- `inverse_sqrt` (Vaswani et al. 2017, used by Zhang et al. 2018 Sec. 4.1 and Li & Feng):
  lr(t) = lr_scale * d_model^-0.5 * min(t^-0.5, t * warmup^-1.5)
- `linear_warmup_inverse_sqrt` (fairseq's `inverse_sqrt`, Ma et al. 2020's peak-lr recipe):
  lr(t) = peak * t / warmup for t < warmup, then peak * sqrt(warmup / t)
- `linear_warmup_linear_decay` (fairseq's `polynomial_decay` with power 1 and end lr 0; NOT IN ANY
  SEED PAPER): lr(t) = peak * t / warmup for t < warmup, then peak * (T - t) / (T - warmup), down to 0
  at the last update T. The inverse square root still trains at about half its peak when a short
  run ends; the `cpu` profile's comments compare the two (its test BLEU favoured the inverse sqrt).
- `constant`: lr(t) = lr

t counts optimizer updates from 1. `step_offset` continues a schedule from an earlier stage (Zhang's
step 2 starts at the last step of step 1, reading Z9 in docs/papers/zhang2018.md). T (`total_steps`) is the
offset plus the stage's own updates, so a stage that continues a decaying schedule decays to 0 at its
own last update, from the value the line from the peak at `warmup` to 0 at T has at its first update.
"""

from __future__ import annotations

import math
from typing import Callable

SCHEDULES = ("inverse_sqrt", "linear_warmup_inverse_sqrt", "linear_warmup_linear_decay", "constant")
NEEDS_TOTAL = ("linear_warmup_linear_decay",)  # schedules that need the last update T


def lr_at(step: int, *, schedule: str, lr: float, warmup: int, d_model: int,
          total_steps: int | None = None) -> float:
    """Learning rate at optimizer update `step` (1-based); `total_steps` (T) for the decaying schedules."""
    t = max(step, 1)
    w = max(warmup, 1)
    if schedule in NEEDS_TOTAL and (total_steps is None or total_steps <= w):
        raise ValueError(f"the '{schedule}' schedule needs a training length (max_steps) longer than "
                         f"its warmup ({warmup} updates), got {total_steps}")
    if schedule == "inverse_sqrt":
        return lr * d_model ** -0.5 * min(t ** -0.5, t * w ** -1.5)
    if schedule == "linear_warmup_inverse_sqrt":
        return lr * t / w if t < w else lr * math.sqrt(w / t)
    if schedule == "linear_warmup_linear_decay":
        return lr * t / w if t < w else lr * max(0.0, (total_steps - t) / (total_steps - w))
    if schedule == "constant":
        return lr
    raise ValueError(f"unknown lr schedule '{schedule}' (expected one of {SCHEDULES})")


def lr_lambda(*, schedule: str, lr: float, warmup: int, d_model: int, step_offset: int = 0,
              stage_steps: int | None = None) -> Callable[[int], float]:
    """A LambdaLR multiplier (the optimizer's base lr is set to 1.0); `stage_steps`: the stage's length."""
    total = step_offset + stage_steps if stage_steps is not None and stage_steps > 0 else None
    lr_at(1 + step_offset, schedule=schedule, lr=lr, warmup=warmup, d_model=d_model,
          total_steps=total)  # fail now, not at the first update: an unknown schedule or unusable length
    return lambda done: lr_at(done + 1 + step_offset, schedule=schedule, lr=lr, warmup=warmup,
                              d_model=d_model, total_steps=total)
