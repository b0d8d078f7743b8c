"""`ProgressLine`: one line every N updates that reads well in a terminal and in a log file.

Lightning's progress bar redraws one line with carriage returns, which a log file (`log.txt`, a
cluster job's output, `make demo > log`) keeps as a single unreadable line, or not at all. This
callback prints, on global rank zero, every `every_steps` updates and after the last one:

    [docmt] stage 'doc' 200/1800 updates · loss 3.214 · lr 1.20e-03 · 5,432 tok/s · 3m10s · eta 25m20s

- loss: this rank's mean per-token training loss over the batches since the previous line;
- lr: group 0's lr of the first optimizer, as the next update applies it;
- tok/s: target tokens of every rank (`train/update_tokens`, all-reduced by the module) over the
  wall seconds of training since the previous line, validation left out;
- the elapsed wall time of the stage and the time left at the stage's pace so far (validation
  included, so the estimate is what the user will wait).
"""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl

from lightning_docmt.distributed import progress
from lightning_docmt.logs import clock

LOSS_KEY, UPDATE_TOKENS_KEY = "train/loss", "train/update_tokens"


class ProgressLine(pl.Callback):
    """Prints the stage's progress every `every_steps` updates (0: never) and at its last update."""

    def __init__(self, stage: str | None, every_steps: int) -> None:
        self.stage = stage
        self.every_steps = every_steps
        self._losses: list[float] = []
        self._tokens = 0.0
        self._reported_step = -1
        self._started = self._window_started = 0.0
        self._start_step = 0
        self._validation_seconds = 0.0
        self._validation_started: float | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._started = self._window_started = time.perf_counter()
        self._start_step = self._reported_step = trainer.global_step  # a resumed stage counts from here
        self._validation_seconds = 0.0  # the sanity check ran before

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._validation_started = time.perf_counter()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._validation_started is not None:
            self._validation_seconds += time.perf_counter() - self._validation_started
            self._validation_started = None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        metrics = trainer.callback_metrics
        if LOSS_KEY in metrics:
            self._losses.append(float(metrics[LOSS_KEY]))
        step = trainer.global_step
        if step == self._reported_step:  # an accumulation batch: no update yet
            return
        if UPDATE_TOKENS_KEY in metrics:
            self._tokens += float(metrics[UPDATE_TOKENS_KEY])
        last = trainer.max_steps > 0 and step >= trainer.max_steps
        if self.every_steps <= 0 or not (step % self.every_steps == 0 or last):
            self._reported_step = step
            return
        if trainer.is_global_zero:
            progress(self.line(trainer, step))
        self._reported_step = step
        self._losses, self._tokens = [], 0.0
        self._window_started, self._validation_seconds = time.perf_counter(), 0.0

    def line(self, trainer: pl.Trainer, step: int) -> str:
        now = time.perf_counter()
        total = trainer.max_steps if trainer.max_steps > 0 else None
        parts = [f"stage '{self.stage}' {step}/{total or '?'} updates"]
        if self._losses:
            parts.append(f"loss {sum(self._losses) / len(self._losses):.3f}")
        if trainer.optimizers:
            parts.append(f"lr {trainer.optimizers[0].param_groups[0]['lr']:.2e}")
        training_seconds = now - self._window_started - self._validation_seconds
        if self._tokens and training_seconds > 0:
            parts.append(f"{self._tokens / training_seconds:,.0f} tok/s")
        elapsed = now - self._started
        parts.append(clock(elapsed))
        done = step - self._start_step
        if total is not None and 0 < done and step < total:
            parts.append(f"eta {clock(elapsed / done * (total - step))}")
        return " · ".join(parts)
