"""Build a `lightning.pytorch.Trainer` for one stage from the resolved run config.

`trainer:` in the config is a free dict passed through to the Trainer (devices, strategy, num_nodes,
accelerator, ...); the keys the suite owns (limits, precision, accumulation, clipping, loggers,
callbacks) come from `train.*` and `logging.*`; the accumulation and the validation interval in
batches are set on the built Trainer, which knows the world size (`update_size.py`). A model with
optimizer phases trains with manual optimisation, where Lightning refuses `gradient_clip_val`:
`DocMTModule` then clips by `train.optim.clip_norm` itself, with the same semantics (the 2-norm
over the parameters that the update steps).

A training trainer logs to a CSVLogger in its stage's directory and, given the run's wandb run
(`training/dashboard.py`), to that run under the stage's name; a test trainer logs nothing (the
run's scores reach wandb as its summary). It gets a `LearningRateRecord` (the lr each update
applied, for the stage's `done.json`), the stage's `StagedUnfreezing` (its freezing policy) and,
with `train.average.checkpoints` > 0, a `CheckpointAveraging` writing `<stage dir>/averaging/`. DDP keeps
its defaults (`find_unused_parameters=False`, no `static_graph`): frozen parameters are frozen
before the model is wrapped (see `callbacks/staged_unfreezing.py`). The exception is a model with
optimizer phases, whose phase losses need not reach every parameter: `ddp` becomes
`ddp_find_unused_parameters_true` for it.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, Logger
from omegaconf import DictConfig, OmegaConf

from lightning_docmt.callbacks.checkpoint_averaging import CheckpointAveraging
from lightning_docmt.callbacks.lr_record import LearningRateRecord
from lightning_docmt.callbacks.nonfinite_guard import NonFiniteGuard
from lightning_docmt.callbacks.progress_line import ProgressLine
from lightning_docmt.callbacks.staged_unfreezing import StagedUnfreezing
from lightning_docmt.cpu import cpu_has_native_bf16
from lightning_docmt.distributed import progress
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.logs import apply_output_policy, is_verbose
from lightning_docmt.training.checkpoint_io import AtomicCheckpointIO
from lightning_docmt.training.dashboard import StageWandbLogger
from lightning_docmt.training.optimizer_phases import model_phases
from lightning_docmt.training.update_size import apply_update_size
from lightning_docmt.wandb_runs import GuardedRun

# Lightning calls a mid-epoch resume unreliable unless the DataLoader object itself has a
# `state_dict`. Ours resumes exactly through the DataModule's sampler state (data/datamodule.py,
# tests/training/test_carried_state.py), which that check does not look at, so the warning is silenced.
MID_EPOCH_RESUME_WARNING = "You're resuming from a checkpoint that ended before the epoch ended"
RESUME_NAME = "resume"  # <stage dir>/checkpoints/resume.ckpt, rewritten every train.checkpoint_every_steps
OWNED_KEYS = ("max_steps", "max_epochs", "max_time", "precision", "accumulate_grad_batches",
              "gradient_clip_val", "logger", "callbacks", "default_root_dir",
              "use_distributed_sampler", "val_check_interval")


def resolve_precision(setting: str, accelerator: str = "auto") -> str:
    """`auto`: bf16 autocast where the GPU supports it, else full precision.
    `fast`: as `auto`, and also bf16 autocast on a CPU with native bf16 arithmetic (about 1.4x the
    float32 training throughput of the `cpu` profile's model on 2 AVX512-BF16 cores)."""
    if setting not in ("auto", "fast"):
        return setting
    if accelerator != "cpu" and torch.cuda.is_available():
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "32-true"
    return "bf16-mixed" if setting == "fast" and cpu_has_native_bf16() else "32-true"


def monitor_metric(cfg: DictConfig) -> tuple[str, str]:
    return ("val/bleu", "max") if cfg.eval.valid_bleu else ("val/loss", "min")


def build_loggers(out_dir: Path, stage_name: str | None, dashboard: GuardedRun) -> list[Logger]:
    """A CSVLogger in `out_dir`, and the stage's logger on the run's wandb run while that is on."""
    loggers: list[Logger] = [CSVLogger(save_dir=str(out_dir), name="", version="")]
    if dashboard.alive:
        loggers.append(StageWandbLogger(dashboard, stage_name or ""))
    return loggers


def stage_steps(cfg: DictConfig, name: str | None) -> int:
    """The updates stage `name` is set to train: its `max_steps`, else `train.max_steps` (also
    for no stage)."""
    own = cfg.train.stages[name].max_steps if name is not None else -1
    return int(own if own > 0 else cfg.train.max_steps)


def build_trainer(cfg: DictConfig, stage_name: str | None, out_dir: Path, for_test: bool = False,
                  dashboard: GuardedRun | None = None) -> tuple[pl.Trainer, ModelCheckpoint]:
    """The Trainer of stage `stage_name` of `train.stages` (None: no stage, e.g. for testing);
    `dashboard`: the run's wandb run, which a training Trainer logs to (`training/dashboard.py`)."""
    warnings.filterwarnings("ignore", message=MID_EPOCH_RESUME_WARNING)
    apply_output_policy()
    stage = cfg.train.stages[stage_name] if stage_name is not None else None
    user: dict[str, Any] = OmegaConf.to_container(cfg.trainer, resolve=True)
    clash = sorted(set(user) & set(OWNED_KEYS))
    if clash:
        raise DocMTInputError(f"set {clash[0]} through train.* / logging.*, not trainer.*",
                              key=f"trainer.{clash[0]}")
    out_dir.mkdir(parents=True, exist_ok=True)
    monitor, mode = monitor_metric(cfg)
    checkpointer = ModelCheckpoint(dirpath=str(out_dir / "checkpoints"), monitor=monitor, mode=mode,
                                   save_top_k=1, save_last=True, filename="best")
    callbacks: list[pl.Callback] = [] if for_test else [checkpointer]
    train = cfg.train
    # No progress bar (`ProgressLine` prints lines a log file keeps) and, unless `docmt --verbose`,
    # no model summary; `trainer.*` may turn either back on.
    kwargs: dict[str, Any] = dict(default_root_dir=str(out_dir), enable_progress_bar=False,
                                  enable_model_summary=is_verbose(),
                                  precision=resolve_precision(train.precision, user.get("accelerator", "auto")),
                                  use_distributed_sampler=False,  # our batch samplers shard by rank
                                  plugins=[AtomicCheckpointIO()])  # checkpoint_io.py
    if for_test:
        kwargs.update(logger=False, enable_checkpointing=False)
    else:
        max_steps = stage_steps(cfg, stage_name)
        max_epochs = stage.max_epochs if stage is not None and stage.max_epochs else train.max_epochs
        if max_steps <= 0 and max_epochs is None and train.max_time_minutes is None:
            raise DocMTInputError("no training limit: set train.max_steps, train.max_epochs or "
                                  "train.max_time_minutes", key="train.max_steps")
        kwargs.update(max_steps=max_steps, max_epochs=max_epochs if max_epochs is not None else -1,
                      logger=build_loggers(out_dir, stage_name, dashboard or GuardedRun()))
        # the accumulation: apply_update_size below
        if train.max_time_minutes is not None:
            kwargs["max_time"] = {"minutes": train.max_time_minutes}
        if train.optim.clip_norm > 0 and not model_phases(cfg.model):  # with phases the module
            kwargs["gradient_clip_val"] = train.optim.clip_norm  # clips (manual optimisation)
        if train.val_every_steps:  # the interval in batches: apply_update_size below
            kwargs.update(val_check_interval=train.val_every_steps, check_val_every_n_epoch=None)
        if train.checkpoint_every_steps > 0:  # `docmt fit --resume` continues from the newest
            callbacks.append(ModelCheckpoint(dirpath=str(out_dir / "checkpoints"), filename=RESUME_NAME,
                                             every_n_train_steps=train.checkpoint_every_steps,
                                             save_top_k=1, enable_version_counter=False))
        callbacks += [LearningRateMonitor(logging_interval="step"), LearningRateRecord(),
                      ProgressLine(stage_name, cfg.logging.progress_every_steps)]
        if stage is not None:
            callbacks.append(StagedUnfreezing.from_stage(stage_name, stage))
        # after StagedUnfreezing, whose all-reduce makes every rank's gradient the same
        callbacks.append(NonFiniteGuard(stage_name, train.nonfinite_stop_after))
        if train.average.checkpoints > 0:
            callbacks.append(CheckpointAveraging(train.average.checkpoints, train.average.rule,
                                                 out_dir / "averaging", monitor=monitor, mode=mode))
        if train.early_stop_patience > 0:
            callbacks.append(EarlyStopping(monitor=monitor, mode=mode,
                                           patience=train.early_stop_patience))
    kwargs["callbacks"] = callbacks
    kwargs.update(user)
    if kwargs.get("strategy") == "ddp" and model_phases(cfg.model):
        # A phase's loss may leave the other phases' parameters out of the graph (Li & Feng's
        # selector phase runs the translator without gradient), which plain DDP reports as an error.
        kwargs["strategy"] = "ddp_find_unused_parameters_true"
    trainer = pl.Trainer(**kwargs)
    if not for_test:
        size = apply_update_size(trainer, cfg)
        progress(f"stage '{stage_name}': {size.describe()}")
    return trainer, checkpointer
