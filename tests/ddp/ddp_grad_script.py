"""One DDP update of `DocMTModule` on fixed batches of unequal sizes, for tests/ddp/test_ddp.py.

Usage: python tests/ddp/ddp_grad_script.py OUT_DIR ARCH

It must run as a script: Lightning's `ddp` strategy starts rank 1 by re-running `sys.argv`. Two
CPU ranks (gloo) make one update of the tiny-profile model of architecture ARCH (the Transformer,
or a stand-in of tests/helpers/hook_stand_ins.py, trained with its stage-frozen parameters frozen
here), rank r on `RANK_BATCHES[r]` (tests/helpers/grad_update.py); each writes OUT_DIR/rank<r>.pt =
{"initial": the weights when training starts, "grads": the gradients of that update (all-reduced by
DDP and normalised per token by the module, before the optimizer step)}.
"""

from __future__ import annotations

import sys
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset

from tests.helpers.grad_update import RANK_BATCHES, GradRecorder, build_module, recording_module
from tests.helpers.hook_stand_ins import ENTRIES, register


class RankBatch(Dataset):
    """The one batch of this process's rank."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return RANK_BATCHES[torch.distributed.get_rank()]


def main(out_dir: Path, arch: str) -> None:
    recorder = GradRecorder(out_dir)
    if arch in ENTRIES:
        register(arch)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, use_distributed_sampler=False,
                         limit_val_batches=0, callbacks=[recorder])
    trainer.fit(recording_module(build_module(arch), recorder),
                train_dataloaders=DataLoader(RankBatch(), batch_size=None))
    # Every rank tears the gloo group down at the same point, as `docmt` does
    # (distributed.agree_on_exit_status): left to interpreter exit, a rank whose peer has already
    # gone can abort ("terminate called without an active exception", status -6).
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
