"""Learning-rate schedules of the seed papers (docs/design.md section 7): the training stages'
(`training/module.py`) and the pretraining runs' (`pretraining/run.py`), one definition for both
(a root module, importing nothing of the package's, so that every floor may read it).

- `inverse_sqrt` (Vaswani et al. 2017, used by Zhang et al. 2018 Sec. 4.1 and Li & Feng):
  lr(t) = lr_scale * d_model^-0.5 * min(t^-0.5, t * warmup^-1.5)
- `linear_warmup_inverse_sqrt` (fairseq's `inverse_sqrt`, Ma et al. 2020's peak-lr recipe):
  lr(t) = peak * t / warmup for t < warmup, then peak * sqrt(warmup / t)
- `linear_warmup_linear_decay` (fairseq's `polynomial_decay` with power 1 and end lr 0; NOT IN ANY
  SEED PAPER): lr(t) = peak * t / warmup for t < warmup, then peak * (T - t) / (T - warmup), down to 0
  at the last update T. The inverse square root still trains at about half its peak when a short
  run ends; the `cpu` profile's comments compare the two (its test BLEU favoured the inverse sqrt).
- `constant`: lr(t) = lr

t counts optimizer updates from 1. `step_offset` continues a schedule from an earlier stage (reading Z9
in docs/papers/zhang2018.md). T (`total_steps`) is the offset plus the stage's own updates, so a stage
that continues a decaying schedule decays to 0 at its own last update, from the value the line from
the peak at `warmup` to 0 at T has at its first update.

A stage that continues a schedule trains at what is left of it (trap K9 in docs/design.md section 12): 300
updates after the `cpu` profile's 1,800 start at 0.19 of the linear decay's peak and average 0.09 of
it. `training/stages.check_stages` refuses a stage that trains new parameters and continues a schedule
that decays to 0 (`NEEDS_TOTAL`) from below `CONTINUATION_FLOOR` of its peak, and prints the numbers
of every other continuation (the inverse square root of the papers' recipes, reading Z9, never
reaches 0).
"""

from __future__ import annotations

import math
from typing import Callable

SCHEDULES = ("inverse_sqrt", "linear_warmup_inverse_sqrt", "linear_warmup_linear_decay", "constant")
"""The schedules `train.optim.schedule` may name."""
NEEDS_TOTAL = ("linear_warmup_linear_decay",)  # schedules that need the last update T
CONTINUATION_FLOOR = 0.5  # the least first-update lr, as a share of the peak, at which a stage that
# trains new parameters may continue a schedule that decays to 0 (it then averages a quarter of the peak)


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


def peak_lr(*, schedule: str, lr: float, warmup: int, d_model: int) -> float:
    """The largest lr of a schedule (at the end of its warm-up)."""
    if schedule == "inverse_sqrt":
        return lr * d_model ** -0.5 * max(warmup, 1) ** -0.5
    return lr


def stage_lrs(*, schedule: str, lr: float, warmup: int, d_model: int, step_offset: int,
              stage_steps: int) -> list[float]:
    """The lr of each of a stage's `stage_steps` updates, continuing from `step_offset`."""
    total = step_offset + stage_steps
    return [lr_at(step_offset + t, schedule=schedule, lr=lr, warmup=warmup, d_model=d_model,
                  total_steps=total) for t in range(1, stage_steps + 1)]


def continuation_summary(*, schedule: str, lr: float, warmup: int, d_model: int, step_offset: int,
                         stage_steps: int) -> dict[str, float]:
    """A continued stage's lr at its first and last update, its summed lr and the schedule's peak."""
    lrs = stage_lrs(schedule=schedule, lr=lr, warmup=warmup, d_model=d_model, step_offset=step_offset,
                    stage_steps=stage_steps)
    return {"first": lrs[0], "last": lrs[-1], "sum": sum(lrs),
            "peak": peak_lr(schedule=schedule, lr=lr, warmup=warmup, d_model=d_model)}
