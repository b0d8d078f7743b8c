"""`StagedUnfreezing`: the freezing policy of one training stage (docs/design.md section 7).

Zhang et al. 2018's two-step training (Eq. 25, docs/papers/zhang2018.md section 4 and trap 4): step 2 trains theta_d
only, theta_s (embeddings, W_o, every original attention, FFN and LayerNorm) stays frozen. A stage
names what trains with `train.stages.<name>.trainable` (fnmatch globs over the names of
`module.model.named_parameters()`, e.g. `THETA_D_GLOBS` of `models/zhang_doc.py`); everything else
is frozen. Optional milestones (`train.stages.<name>.unfreeze`) make more parameters trainable at an
optimizer step or an epoch, with an explicit lr (schema.UnfreezeConfig).

Guarantees and the traps they avoid (docs/design.md section 12):

- A glob that matches nothing is a `DocMTInputError` naming `train.stages.<name>.trainable` (or the
  milestone's `unfreeze.<i>.globs`); `check` runs on the meta device before anything trains.
- Frozen means `requires_grad=False` and nothing else: the callback never calls `.eval()`, so
  dropout inside frozen modules stays active during training (reading Z10, Zhang's reference code).
  A module wrapped in `nn/frozen.Frozen` (a pretrained context encoder that never trains) is
  another thing: always in evaluation mode, and no glob or milestone makes its parameters trainable.
- The optimizer only holds trainable parameters (`DocMTModule.configure_optimizers`), and a
  milestone's parameters join it as a group of their own at the milestone's lr, with the LambdaLR
  extended by the group's multiplier (`DocMTModule.add_param_group`). Lightning's `BaseFinetuning`
  adds groups at lr/10 unless told otherwise; here `lr` is required.
- Resume: Lightning 2.6 (`Trainer._run`) calls `setup` hooks, then restores the module and the
  callbacks from the checkpoint (`load_state_dict`), then lets the strategy wrap the model and call
  `configure_optimizers`, then restores the optimizer and scheduler states. `load_state_dict`
  therefore re-applies the frozen set *and* the fired milestones (requires_grad and the module's
  extra optimizer groups, in firing order) before `configure_optimizers` runs, so the rebuilt
  optimizer has the groups, sizes and order of the saved one. This is what `BaseFinetuning` got wrong:
  groups added during training did not exist when the optimizer state was loaded
  (Lightning issue 6891, "loaded state dict has a different number of parameter groups"; 8502,
  callbacks restored before the optimizers existed), and a resumed run re-froze modules that had
  already been unfrozen (21901). The state also records the globs and milestones: resuming with a
  different freezing policy is an error, not a silent change.
- DDP: `DistributedDataParallel` registers only parameters with `requires_grad` when it wraps the
  model. Freezing happens in `setup`, which runs before the strategy wraps, so DDP never sees the
  frozen parameters: no unused-parameter error, and no `find_unused_parameters=True` (which would
  traverse the autograd graph every step and all-reduce zero gradients for all of theta_s) or
  `static_graph` needed (Lightning issue 17212: DDP crashes on unused parameters unless they are
  frozen before wrapping or the reducer is told to search for them; `trainer_factory.py` therefore
  keeps DDP's defaults). Parameters unfrozen by a milestone *after* the wrap are not registered with
  DDP's reducer; their gradients are all-reduced (averaged, as DDP does) here in
  `on_before_optimizer_step`, which Lightning calls after the backward passes of the accumulation
  window and before gradient clipping. After a resume, fired milestones are re-applied before the
  wrap, so DDP itself reduces them.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Iterable, Sequence

import lightning.pytorch as pl
import torch
from omegaconf import DictConfig

from lightning_docmt.distributed import progress
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.nn.frozen import frozen_parameter_names


def matches(name: str, globs: Iterable[str]) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in globs)


def check_globs(names: Sequence[str], globs: Sequence[str], key: str) -> None:
    """Every glob must match at least one parameter name."""
    for pattern in globs:
        if not any(fnmatchcase(n, pattern) for n in names):
            raise DocMTInputError(f"trainable glob '{pattern}' matches no parameter", key=key)


@dataclass(frozen=True)
class Milestone:
    """Unfreeze `globs` once the stage reaches optimizer step `at_step` or epoch `at_epoch`."""

    globs: tuple[str, ...]
    lr: float
    at_step: int | None = None
    at_epoch: int | None = None

    def due(self, step: int, epoch: int) -> bool:
        if self.at_step is not None:
            return step >= self.at_step
        return epoch >= self.at_epoch


class StagedUnfreezing(pl.Callback):
    """Freezes `module.model` outside `trainable` and unfreezes milestone by milestone."""

    def __init__(self, stage_name: str, trainable: Sequence[str],
                 milestones: Sequence[Milestone] = ()):
        self.stage_name = stage_name
        self.trainable = tuple(trainable)
        self.milestones = tuple(milestones)
        self.fired: list[int] = []  # milestone indices, in firing order
        self._module: pl.LightningModule | None = None
        self._reduced_by_ddp: set[int] = set()  # ids of the parameters DDP registered when wrapping

    @classmethod
    def from_stage(cls, stage_name: str, stage: DictConfig) -> "StagedUnfreezing":
        """From `train.stages.<stage_name>`; a milestone needs `globs`, `lr` and one of `at_step`/`at_epoch`."""
        milestones = []
        for i, m in enumerate(stage.unfreeze):
            key = f"train.stages.{stage_name}.unfreeze.{i}"
            if (m.at_step is None) == (m.at_epoch is None):
                raise DocMTInputError("set exactly one of at_step and at_epoch", key=key)
            if min(v for v in (m.at_step, m.at_epoch) if v is not None) < 0:
                raise DocMTInputError("at_step / at_epoch must be >= 0", key=key)
            if m.lr is None:
                raise DocMTInputError("lr is required (no implicit fraction of the stage's lr)",
                                      key=f"{key}.lr")
            if not m.globs:
                raise DocMTInputError("no parameter globs", key=f"{key}.globs")
            milestones.append(Milestone(tuple(m.globs), float(m.lr), m.at_step, m.at_epoch))
        return cls(stage_name, list(stage.trainable), milestones)

    # ------------------------------------------------------------------ policy
    def check(self, names: Sequence[str]) -> None:
        """Every glob of the stage and of its milestones matches a parameter name."""
        check_globs(names, self.trainable, f"train.stages.{self.stage_name}.trainable")
        for i, m in enumerate(self.milestones):
            check_globs(names, m.globs, f"train.stages.{self.stage_name}.unfreeze.{i}.globs")

    def apply(self, pl_module: pl.LightningModule) -> None:
        """Set requires_grad and the module's extra optimizer groups from `trainable` and `fired`."""
        names = [n for n, _ in pl_module.model.named_parameters()]
        self.check(names)
        frozen = frozen_parameter_names(pl_module.model)  # encoders that never train (`nn/frozen.py`)
        for n, p in pl_module.model.named_parameters():
            p.requires_grad_(matches(n, self.trainable) and n not in frozen)
        pl_module.extra_param_groups = []
        for index in self.fired:
            self._unfreeze(pl_module, index)

    def _unfreeze(self, pl_module: pl.LightningModule, index: int) -> list[str]:
        """Make the still-frozen parameters of milestone `index` trainable, as a new optimizer group."""
        m = self.milestones[index]
        frozen = frozen_parameter_names(pl_module.model)
        named = [(n, p) for n, p in pl_module.model.named_parameters()
                 if not p.requires_grad and n not in frozen and matches(n, m.globs)]
        if not named:
            raise DocMTInputError(f"milestone unfreezes nothing: {list(m.globs)} are already trainable",
                                  key=f"train.stages.{self.stage_name}.unfreeze.{index}.globs")
        for _, p in named:
            p.requires_grad_(True)
        pl_module.add_param_group([p for _, p in named], m.lr)
        return [n for n, _ in named]

    def _fire_due(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        for index, m in enumerate(self.milestones):
            if index not in self.fired and m.due(trainer.global_step, trainer.current_epoch):
                self.fired.append(index)
                names = self._unfreeze(pl_module, index)
                progress(f"stage '{self.stage_name}': step {trainer.global_step} epoch "
                      f"{trainer.current_epoch}: unfroze {len(names)} tensors at lr {m.lr}")

    # ------------------------------------------------------------------ hooks
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Freeze before the strategy wraps the model and before `configure_optimizers` (fit only)."""
        if stage != "fit":
            return
        self._module = pl_module
        self.fired = []
        self.apply(pl_module)
        self._fire_due(trainer, pl_module)  # milestones at step 0 / epoch 0

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """The strategy has wrapped the model: remember which parameters DDP reduces itself."""
        wrapped = isinstance(trainer.strategy.model, torch.nn.parallel.DistributedDataParallel)
        self._reduced_by_ddp = ({id(p) for p in pl_module.parameters() if p.requires_grad}
                                if wrapped else set())

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._fire_due(trainer, pl_module)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        """After an optimizer step: the next batch starts a new accumulation window."""
        self._fire_due(trainer, pl_module)

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        """Average the gradients of parameters unfrozen after DDP wrapped the model (see above)."""
        if not self._reduced_by_ddp:
            return
        late = [p for p in pl_module.parameters() if p.requires_grad and id(p) not in self._reduced_by_ddp]
        if not late:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in late]
        flat = torch.cat([g.reshape(-1) for g in grads])  # (sum of numels,)
        torch.distributed.all_reduce(flat)
        flat /= trainer.world_size
        offset = 0
        for p, g in zip(late, grads):
            p.grad = flat[offset:offset + g.numel()].view_as(p).to(g.dtype)
            offset += g.numel()

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        frozen = [] if self._module is None else sorted(
            n for n, p in self._module.model.named_parameters() if not p.requires_grad)
        return {"stage": self.stage_name, "trainable": list(self.trainable),
                "milestones": [repr(m) for m in self.milestones], "fired": list(self.fired),
                "frozen": frozen}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Called after `setup` and before `configure_optimizers` (see the module docstring)."""
        policy = {"trainable": list(self.trainable), "milestones": [repr(m) for m in self.milestones]}
        for key, value in policy.items():
            if state_dict[key] != value:
                raise DocMTInputError(f"the checkpoint was trained with {key} {state_dict[key]}, "
                                      f"not {value}", key=f"train.stages.{self.stage_name}")
        self.fired = list(state_dict["fired"])
        if self._module is not None:
            self.apply(self._module)
            restored = self.state_dict()["frozen"]
            if restored != state_dict["frozen"]:
                raise DocMTInputError("the checkpoint's frozen parameters differ from this model's",
                                      key=f"train.stages.{self.stage_name}.trainable")
