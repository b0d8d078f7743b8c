"""In-process fits of one stage at the tiny profile, for the callback tests.

`fit_stage` does what `train.run_stage` does around `trainer.fit` (data, module, initialisation,
the stage's Trainer from `build_trainer`), plus extra callbacks and `ckpt_path` for resuming.
`StepRecorder` records, before every optimizer step, the optimizer's groups (parameter names and
lr) and the trainable parameter names.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import DictConfig

from lightning_docmt.config import composition as config_lib
from lightning_docmt.data.datamodule import DocumentWindowDataModule
from lightning_docmt.training import run as train
from lightning_docmt.training import stages
from lightning_docmt.training.module import DocMTModule
from tests.helpers.run_env import single_process_run_env

CORPUS = "synthetic:tiny"


def tiny_config(root: Path, *overrides: str) -> DictConfig:
    """Tiny profile on the synthetic corpus, caches and runs under `root`, loss-only validation."""
    return config_lib.compose(None, [f"data.corpus={CORPUS}", f"data.cache_dir={root / 'cache'}",
                                     f"logging.runs_dir={root / 'runs'}", "eval.valid_bleu=false",
                                     *overrides], profile="tiny")


@dataclass
class StageFit:
    trainer: pl.Trainer
    module: DocMTModule
    datamodule: DocumentWindowDataModule
    warnings: list[str] = field(default_factory=list)  # the messages of the warnings it raised


def fit_stage(cfg: DictConfig, name: str, out_dir: Path, *, init_from: Path | None = None,
              ckpt_path: Path | None = None, callbacks: Sequence[pl.Callback] = ()) -> StageFit:
    scfg = stages.stage_config(cfg, name)
    pl.seed_everything(scfg.train.seed, workers=True)
    datamodule = DocumentWindowDataModule(scfg.data, scfg.vocab, scfg.context, seed=scfg.train.seed)
    datamodule.prepare_data()
    datamodule.setup("fit")
    module = train.build_module(scfg, datamodule)
    module.model.load_pretrained(datamodule.src_vocab)  # as run_stage: pretrained first, then init_from
    if init_from is not None:
        train.load_weights(module, init_from, init_from=f"train.stages.{name}.init_from")
    with warnings.catch_warnings(record=True) as raised:
        warnings.simplefilter("always")  # build_trainer's own filters go in front of this one
        trainer, _ = train.build_trainer(scfg, name, out_dir)
        trainer.callbacks.extend(callbacks)
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    return StageFit(trainer, module, datamodule, [str(w.message) for w in raised])


def fit_then_resume(cfg: DictConfig, root: Path, full: pl.Callback, resumed: pl.Callback,
                    resume_at: int) -> tuple[StageFit, StageFit]:
    """Stage "main" fitted in full (with `full`, a checkpoint after every update under
    `root/steps`), then fitted again from the checkpoint after update `resume_at` (with `resumed`)."""
    every_step = ModelCheckpoint(dirpath=str(root / "steps"), every_n_train_steps=1, save_top_k=-1,
                                 filename="{step}")
    with single_process_run_env():
        fit = fit_stage(cfg, "main", root / "full", callbacks=[full, every_step])
        resumed_fit = fit_stage(cfg, "main", root / "resumed", callbacks=[resumed],
                                ckpt_path=root / "steps" / f"step={resume_at}.ckpt")
    return fit, resumed_fit


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


class StepRecorder(pl.Callback):
    """`steps[global_step]`: {"groups": [(names, lr), ...], "trainable": [names]} before that update;
    `start`/`end`: the model's weights when training starts and ends."""

    def __init__(self) -> None:
        self.steps: dict[int, dict[str, Any]] = {}
        self.start: dict[str, torch.Tensor] = {}
        self.end: dict[str, torch.Tensor] = {}

    @staticmethod
    def snapshot(trainer: pl.Trainer, pl_module: DocMTModule) -> dict[str, Any]:
        names = {id(p): n for n, p in pl_module.model.named_parameters()}
        groups = [(sorted(names[id(p)] for p in g["params"]), g["lr"])
                  for g in trainer.optimizers[0].param_groups]
        trainable = sorted(n for n, p in pl_module.model.named_parameters() if p.requires_grad)
        return {"groups": groups, "trainable": trainable}

    def on_train_start(self, trainer: pl.Trainer, pl_module: DocMTModule) -> None:
        self.start = weights(pl_module.model)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: DocMTModule, batch: Any,
                             batch_idx: int) -> None:
        self.steps[trainer.global_step] = self.snapshot(trainer, pl_module)

    def on_train_end(self, trainer: pl.Trainer, pl_module: DocMTModule) -> None:
        self.end = weights(pl_module.model)
