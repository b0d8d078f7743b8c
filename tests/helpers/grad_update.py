"""One update of `DocMTModule` on fixed batches of unequal sizes: the batches (`RANK_BATCHES`, one
per rank), the module (`build_module`) and a recorder of its gradients (`GradRecorder`).

tests/ddp/ddp_grad_script.py makes the update with two DDP ranks, rank r on `RANK_BATCHES[r]`;
tests/training/test_update_size.py accumulates the same batches in one process. Either way the
gradient must be the single-process gradient of their union (`union_batch`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from omegaconf import OmegaConf

from lightning_docmt.batch import PAD_ID
from lightning_docmt.callbacks.staged_unfreezing import matches
from lightning_docmt.config import composition as config_lib
from lightning_docmt.training.module import DocMTModule
from tests.helpers.hook_stand_ins import PHASE_GLOBS
from tests.helpers.model_inputs import VOCAB, random_batch
from tests.helpers.stage_fits import weights

# (source lengths, target lengths) per rank: with <eos>, 9 target tokens on rank 0, 26 on rank 1
RANK_SHAPES = [([4, 6], [2, 5]), ([9, 3, 7, 5], [8, 6, 3, 5])]
RANK_BATCHES = [random_batch(src, tgt, seed=rank) for rank, (src, tgt) in enumerate(RANK_SHAPES)]


def module_config(arch: str) -> dict[str, Any]:
    """The tiny profile without dropout (one update must be deterministic)."""
    cfg = config_lib.compose(None, [f"model.arch={arch}", "model.dropout=0.0", "model.attn_dropout=0.0",
                                    "model.relu_dropout=0.0"], profile="tiny")
    return OmegaConf.to_container(cfg, resolve=True)


def build_module(arch: str) -> DocMTModule:
    """The module of `arch`; a phased stand-in gets the parameters outside its phases frozen, as
    its stage's `trainable` globs would (every trainable parameter must be in a phase)."""
    pl.seed_everything(1)
    module = DocMTModule(module_config(arch), VOCAB, VOCAB)
    if module.phases is not None:
        globs = [g for phase_globs in PHASE_GLOBS.values() for g in phase_globs]
        for name, p in module.model.named_parameters():
            p.requires_grad_(matches(name, globs))
    return module


class GradRecorder(pl.Callback):
    """Records the initial weights, and the gradients of every update in the module's own
    `on_before_optimizer_step` (`recording_module`): the callbacks' hooks run before the module's,
    which normalises the gradients per token."""

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self.initial: dict[str, torch.Tensor] = {}

    def on_train_start(self, trainer: pl.Trainer, pl_module: DocMTModule) -> None:
        self.initial = weights(pl_module.model)

    def record(self, trainer: pl.Trainer, pl_module: DocMTModule) -> None:
        grads = {n: p.grad.clone() for n, p in pl_module.model.named_parameters() if p.grad is not None}
        torch.save({"initial": self.initial, "grads": grads},
                   self.out_dir / f"rank{trainer.global_rank}.pt")


def recording_module(module: DocMTModule, recorder: GradRecorder) -> DocMTModule:
    """`module`, whose `on_before_optimizer_step` hands the normalised gradients to `recorder`."""
    hook = module.on_before_optimizer_step

    def on_before_optimizer_step(optimizer: torch.optim.Optimizer) -> None:
        hook(optimizer)
        recorder.record(module.trainer, module)

    module.on_before_optimizer_step = on_before_optimizer_step
    return module


def union_batch(batches: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The rows of every batch in one batch, right-padded to the longest row of each key."""
    def pad(x: torch.Tensor, width: int) -> torch.Tensor:
        return torch.nn.functional.pad(x, (0, width - x.size(1)), value=PAD_ID)  # (B, width)

    return {key: torch.cat([pad(b[key], max(b[key].size(1) for b in batches)) for b in batches])
            for key in batches[0]}
