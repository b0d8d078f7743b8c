"""One DDP training step on 2 CPU ranks (gloo), recording each rank's batch and the synchronised gradients.

Usage: python tests/ddp_gradient_script.py OUT_DIR CACHE_DIR. It must run as a script: Lightning's
`ddp` strategy starts rank 1 by re-running `sys.argv`. Writes `initial.pt` (the weights before the
step, rank 0) and, per rank R, `rank<R>.pt`: `{"batch": the training batch, "grads": {name: grad}}`
with the gradients after DDP's all-reduce, before the optimizer step (`tests/test_ddp_loss.py`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import lightning.pytorch as pl
import torch

from lightning_docmt.config.composition import compose
from lightning_docmt.data.datamodule import DocumentWindowDataModule
from lightning_docmt.training.run import build_module

OVERRIDES = ["data.corpus=synthetic:tiny", "model.arch=transformer", "train.optim.clip_norm=0",
             "data.max_tokens=300", "model.dropout=0.0"]


class GradientRecorder(pl.Callback):
    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self.batch: dict[str, torch.Tensor] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batch = {k: v.clone() for k, v in batch.items()}

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        grads = {n: p.grad.clone() for n, p in pl_module.named_parameters() if p.grad is not None}
        torch.save({"batch": self.batch, "grads": grads}, self.out_dir / f"rank{trainer.global_rank}.pt")


def main(out_dir: Path, cache_dir: Path) -> None:
    cfg = compose(None, [*OVERRIDES, f"data.cache_dir={cache_dir}"], profile="tiny")
    pl.seed_everything(1)
    datamodule = DocumentWindowDataModule(cfg.data, cfg.vocab, cfg.context, seed=1)
    datamodule.prepare_data()
    datamodule.setup("fit")
    module = build_module(cfg, datamodule)
    if module.global_rank == 0 and not (out_dir / "initial.pt").exists():
        torch.save(module.state_dict(), out_dir / "initial.pt")  # every rank starts from rank 0's weights
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0,
                         limit_val_batches=0, use_distributed_sampler=False,
                         callbacks=[GradientRecorder(out_dir)])
    trainer.fit(module, datamodule=datamodule)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
