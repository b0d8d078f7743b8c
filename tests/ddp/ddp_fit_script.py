"""`docmt fit` with a recording callback, for the DDP test (`tests/ddp/test_ddp.py`).

Usage: python tests/ddp/ddp_fit_script.py RECORD_DIR [docmt fit arguments ...]

It must run as a script: Lightning's `ddp` strategy starts the other ranks by re-running
`sys.argv`. Every training `Trainer` that `lightning_docmt.training.run` builds (one per stage) gets a
`FitRecorder`, and every rank writes into RECORD_DIR, per stage S:

- `rank<R>.<S>.json`: `{"rank", "world_size", "train": [{"epoch", "sent_index", "tokens"}, ...] (one
  entry per training batch, with its target tokens), "validations": [{"sent_index", "bleu", "loss",
  "nll", "batches"}, ...] (one entry per validation run outside the sanity check, with this rank's
  validation sentences, the logged `val/bleu`, `val/loss` and `val/nll`, and per batch of this
  rank its `loss_sum`, `nll_sum` and `tokens`, scored here by the model itself)}`
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
from lightning_docmt.batch import PAD_ID
from lightning_docmt.training import run as train


class FitRecorder(pl.Callback):
    def __init__(self, record_dir: Path, stage: str):
        self.record_dir = record_dir
        self.stage = stage
        self.train: list[dict[str, Any]] = []
        self.validations: list[dict[str, Any]] = []
        self._val_sentences: list[int] = []
        self._val_batches: list[dict[str, float]] = []

    def _path(self, trainer: pl.Trainer, suffix: str) -> Path:
        return self.record_dir / f"rank{trainer.global_rank}.{self.stage}.{suffix}"

    @staticmethod
    def _weights(pl_module: pl.LightningModule) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in pl_module.state_dict().items()}

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        torch.save(self._weights(pl_module), self._path(trainer, "initial.pt"))

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                             batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.train.append({"epoch": trainer.current_epoch, "sent_index": batch["sent_index"].tolist(),
                           "tokens": int(batch["tgt_out"].ne(PAD_ID).sum())})

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._val_sentences = []
        self._val_batches = []

    def on_validation_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                  batch: dict[str, torch.Tensor], batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        self._val_sentences += batch["sent_index"].tolist()

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                                batch: dict[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        terms = pl_module.model.loss_terms(batch, pl_module.output_loss)
        self._val_batches.append({"loss_sum": float(terms.loss_sum), "nll_sum": float(terms.nll_sum),
                                  "tokens": int(terms.tokens)})

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        logged = {name: trainer.callback_metrics.get(f"val/{name}") for name in ("bleu", "loss", "nll")}
        self.validations.append({"sent_index": self._val_sentences, "batches": self._val_batches,
                                 **{k: None if v is None else float(v) for k, v in logged.items()}})

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
