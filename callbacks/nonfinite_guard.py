"""`NonFiniteGuard`: an update whose gradient is not finite changes nothing, and a run of them stops
the stage (docs/design.md section 7, "Non-finite updates").

A NaN or infinite loss (an overflow in bf16, a learning rate too high, a corrupt batch) gives a
non-finite gradient; one optimizer step with it would write NaN into every parameter and every
Adam moment, and every later checkpoint would carry them. The check runs once per update, after
the update's last backward pass and DDP's all-reduce, before the step (`on_before_optimizer_step`):
every rank holds the same averaged gradient, so every rank takes the same decision without a
collective of its own. A non-finite update is *skipped*: its gradients are dropped (`grad = None`:
Adam leaves a parameter without gradient and its moments as they are), the update's batches are
spent and the lr schedule advances, as the step counter does. It is counted
(`train/nonfinite_skipped`, the stage's `done.json`) and printed with its update number.
`train.nonfinite_stop_after` such updates in a row stop the stage instead, with one line naming the
update: the parameters are still those of the last finite update, and the newest `resume.ckpt`
(written before the run of bad updates began or during it, never with NaN weights) is what
`docmt fit --resume` continues from after a fix (a lower lr, say).
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch

from lightning_docmt.distributed import progress
from lightning_docmt.errors import TrainingStopped


class NonFiniteGuard(pl.Callback):
    """Skip non-finite updates; stop after `stop_after` in a row (1: at the first)."""

    def __init__(self, stage: str | None, stop_after: int) -> None:
        if stop_after < 1:
            raise ValueError("stop_after must be >= 1")
        self.stage, self.stop_after = stage, stop_after
        self.skipped = 0  # in the stage so far
        self.in_a_row = 0

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if not grads or bool(torch.isfinite(torch.stack(torch._foreach_norm(grads))).all()):
            self.in_a_row = 0
            return
        update = trainer.global_step + 1
        self.skipped += 1
        self.in_a_row += 1
        if self.in_a_row >= self.stop_after:
            raise TrainingStopped(
                f"stage '{self.stage}': update {update} is the {self.in_a_row}. in a row with a non-finite "
                f"gradient (train.nonfinite_stop_after={self.stop_after}); the weights are those of update "
                f"{update - self.in_a_row}, and `docmt fit --resume` continues from the newest resume.ckpt "
                f"(lower the lr or check the data first)")
        for group in optimizer.param_groups:
            for p in group["params"]:
                p.grad = None
        progress(f"stage '{self.stage}': update {update} skipped: non-finite gradient "
                 f"({self.skipped} skipped in this stage)")
        pl_module.log("train/nonfinite_skipped", float(self.skipped), batch_size=1)

    def state_dict(self) -> dict[str, Any]:
        return {"skipped": self.skipped, "in_a_row": self.in_a_row}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.skipped, self.in_a_row = state_dict["skipped"], state_dict["in_a_row"]
