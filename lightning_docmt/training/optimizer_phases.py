"""The training side of a model's hooks (`nn/model_hooks.py`): optimizer phases.

`DocMTModule` uses these; `stages.check_stages` calls `check_training_hooks` for every stage before
anything trains, so that a setting a model's hooks cannot work with fails first.

Optimizer phases (`PhaseCycle`, `phase_parameter_names`): one optimizer per phase, over the
trainable parameters matching the phase's globs. Freezing is by optimizer: every parameter of every
phase keeps `requires_grad`, so DDP registers all of them once, and a phase's update leaves the
other phases' parameters untouched because their optimizers do not step (their gradients are
discarded). Toggling `requires_grad` instead would change the set DDP reduces after it wrapped the
model (see `callbacks/staged_unfreezing.py`). Every trainable parameter must be in a phase.

The carried state a model hands from sentence to sentence is kept by `nn/carried_state.CarriedState`
(the same in training, evaluation and inference).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from omegaconf import DictConfig

from lightning_docmt.callbacks.staged_unfreezing import matches
from lightning_docmt.config.registry import get_arch, model_config
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.nn.model_hooks import OptimizerPhase


def model_phases(model_cfg: DictConfig) -> list[OptimizerPhase]:
    """The optimizer phases of the model that `model_cfg` (`model.*`) builds; empty: none."""
    return get_arch(model_cfg.arch).model_class.optimizer_phases(model_config(model_cfg))


def check_training_hooks(model_class: type, phases: Sequence[OptimizerPhase], cfg: DictConfig,
                         stage_name: str | None = None, names: Sequence[str] = ()) -> None:
    """The settings of run config `cfg` that the model's hooks need. With `stage_name` and the
    model's parameter `names`, also the stage's freezing policy against the phases."""
    arch = cfg.model.arch
    if model_class.carries_state and not cfg.data.document_order:
        raise DocMTInputError(f"model.arch '{arch}' carries a state from each sentence to the next "
                              f"one of its document: set data.document_order=true",
                              key="data.document_order")
    if not phases:
        return
    PhaseCycle(phases)  # a malformed declaration (one phase, repeated names, no steps) fails here
    for key, plain in (("accumulate", 1), ("tokens_per_update", None)):
        if cfg.train[key] != plain:
            raise DocMTInputError(f"model.arch '{arch}' trains in optimizer phases (manual "
                                  f"optimisation), without gradient accumulation: set "
                                  f"train.{key}={'null' if plain is None else plain}",
                                  key=f"train.{key}")
    if stage_name is None:
        return
    stage = cfg.train.stages[stage_name]
    if stage.unfreeze:
        raise DocMTInputError(f"unfreezing milestones do not combine with the optimizer phases of "
                              f"model.arch '{arch}'", key=f"train.stages.{stage_name}.unfreeze")
    phase_parameter_names(phases, [n for n in names if matches(n, stage.trainable)],
                          key=f"train.stages.{stage_name}.trainable")


def phase_parameter_names(phases: Sequence[OptimizerPhase], trainable: Sequence[str], key: str
                          ) -> list[list[str]]:
    """Per phase, the names in `trainable` that its globs match (in `trainable`'s order).

    A glob that matches no trainable parameter, and a trainable parameter in no phase, are
    `DocMTInputError`s naming `key` (what decides the trainable set).
    """
    for phase in phases:
        for pattern in phase.param_globs:
            if not any(matches(n, [pattern]) for n in trainable):
                raise DocMTInputError(f"optimizer phase '{phase.name}': glob '{pattern}' matches no "
                                      f"trainable parameter", key=key)
    per_phase = [[n for n in trainable if matches(n, phase.param_globs)] for phase in phases]
    in_a_phase = {n for names in per_phase for n in names}
    idle = [n for n in trainable if n not in in_a_phase]
    if idle:
        raise DocMTInputError(f"{len(idle)} trainable parameters are in no optimizer phase (e.g. "
                              f"'{idle[0]}'): freeze them or add them to a phase", key=key)
    return per_phase


class PhaseCycle:
    """Which phase makes the next update: the first phase for its `steps` updates, then the next
    one, and after the last the first again. Its state (`state_dict`) travels in checkpoints."""

    def __init__(self, phases: Sequence[OptimizerPhase]):
        names = [p.name for p in phases]
        if len(phases) < 2 or len(set(names)) != len(names):
            raise ValueError(f"optimizer phases need two or more distinct names, got {names}")
        if any(p.steps < 1 or not p.param_globs for p in phases):
            raise ValueError(f"every optimizer phase needs steps >= 1 and globs: {list(phases)}")
        self.phases = tuple(phases)
        self.index = 0  # the current phase
        self.done = 0  # updates made in the current turn of the current phase

    @property
    def current(self) -> OptimizerPhase:
        return self.phases[self.index]

    def advance(self) -> None:
        """After an update of the current phase."""
        self.done += 1
        if self.done == self.current.steps:
            self.index, self.done = (self.index + 1) % len(self.phases), 0

    def updates_within(self, index: int, total: int) -> int:
        """How many of the first `total` updates phase `index` makes (`total` <= 0, no limit: `total`)."""
        if total <= 0:
            return total
        cycle = sum(p.steps for p in self.phases)
        before = sum(p.steps for p in self.phases[:index])  # the phase's first update in a cycle
        rest = total % cycle
        return total // cycle * self.phases[index].steps + min(max(rest - before, 0),
                                                                self.phases[index].steps)

    def state_dict(self) -> dict[str, Any]:
        return {"phases": [dataclasses.asdict(p) for p in self.phases], "index": self.index,
                "done": self.done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A checkpoint's state; it must come from the same phases."""
        own = self.state_dict()["phases"]
        if state["phases"] != own:
            raise DocMTInputError(f"the checkpoint was trained with optimizer phases "
                                  f"{state['phases']}, not {own}", key="model.arch")
        self.index, self.done = state["index"], state["done"]
