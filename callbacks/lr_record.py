"""`LearningRateRecord`: the learning rate a stage actually trained at (docs/design.md section 7).

A null result says something only if the model could have learnt, so every stage's `done.json`
records, per optimizer (one, or one per optimizer phase), the lr of its first parameter group at
the first and at the last update, their sum over the stage's updates (`sum`, the "summed lr", in
the units of the lr itself: Adam moves a parameter by at most about that much in total) and the
number of updates. Trap K9 in docs/design.md section 12: a stage that continues a linear decay starts near 0,
and its summed lr shows it.

The lr is read right before each optimizer step, after accumulation (`on_before_optimizer_step`),
so it is the lr that step applies. The record is part of the callback state in a checkpoint: a
resumed stage continues it.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch


class LearningRateRecord(pl.Callback):
    """Per optimizer index: `{"first", "last", "sum", "updates"}` of its group 0's lr."""

    def __init__(self) -> None:
        self.records: list[dict[str, float]] = []

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        index = next((i for i, o in enumerate(trainer.optimizers) if o is optimizer), 0)
        while len(self.records) <= index:
            self.records.append({"first": 0.0, "last": 0.0, "sum": 0.0, "updates": 0})
        lr = float(optimizer.param_groups[0]["lr"])
        record = self.records[index]
        if record["updates"] == 0:
            record["first"] = lr
        record.update(last=lr, sum=record["sum"] + lr, updates=record["updates"] + 1)

    def state_dict(self) -> dict[str, Any]:
        return {"records": [dict(r) for r in self.records]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.records = [dict(r) for r in state_dict["records"]]
