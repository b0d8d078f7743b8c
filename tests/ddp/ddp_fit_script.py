"""`docmt fit` with a recording callback, for the DDP test (`tests/ddp/test_ddp.py`).

Usage: python tests/ddp/ddp_fit_script.py RECORD_DIR [docmt fit arguments ...]

It must run as a script: Lightning's `ddp` strategy starts the other ranks by re-running
`sys.argv`. Every training `Trainer` that `lightning_docmt.training.run` builds (one per stage) gets a
`FitRecorder`, and every rank writes into RECORD_DIR, per stage S:

- `rank<R>.<S>.json`: `{"rank", "world_size", "train": [{"epoch", "sent_index"}, ...] (one entry per
  training batch), "validations": [{"sent_index", "bleu"}, ...] (one entry per validation run
  outside the sanity check, with this rank's validation sentences and the logged `val/bleu`)}`
- `rank<R>.<S>.initial.pt`, `rank<R>.<S>.final.pt`: the model's state_dict when training starts and ends.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from lightning_docmt import cli
from lightning_docmt.training import run as train


class FitRecorder(pl.Callback):
    def __init__(self, record_dir: Path, stage: str):
        self.record_dir = record_dir
        self.stage = stage
        self.train: list[dict[str, Any]] = []
        self.validations: list[dict[str, Any]] = []
        self._val_sentences: list[int] = []

    def _path(self, trainer: pl.Trainer, suffix: str) -> Path:
        return self.record_dir / f"rank{trainer.global_rank}.{self.stage}.{suffix}"

    @staticmethod
    def _weights(pl_module: pl.LightningModule) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in pl_module.state_dict().items()}

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        torch.save(self._weights(pl_module), self._path(trainer, "initial.pt"))

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                             batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.train.append({"epoch": trainer.current_epoch,
                           "sent_index": batch["sent_index"].tolist()})

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._val_sentences = []

    def on_validation_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                  batch: dict[str, torch.Tensor], batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        self._val_sentences += batch["sent_index"].tolist()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        bleu = trainer.callback_metrics.get("val/bleu")
        self.validations.append({"sent_index": self._val_sentences,
                                 "bleu": None if bleu is None else float(bleu)})

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        torch.save(self._weights(pl_module), self._path(trainer, "final.pt"))
        record = {"rank": trainer.global_rank, "world_size": trainer.world_size,
                  "train": self.train, "validations": self.validations}
        self._path(trainer, "json").write_text(json.dumps(record) + "\n")


def main(argv: list[str]) -> int:
    record_dir = Path(argv[0])
    record_dir.mkdir(parents=True, exist_ok=True)
    build_trainer = train.build_trainer

    def build_recording_trainer(cfg: Any, stage_name: str | None, *args: Any, **kwargs: Any):
        trainer, checkpointer = build_trainer(cfg, stage_name, *args, **kwargs)
        if not kwargs.get("for_test", False):
            trainer.callbacks.append(FitRecorder(record_dir, stage_name))
        return trainer, checkpointer

    train.build_trainer = build_recording_trainer
    return cli.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
