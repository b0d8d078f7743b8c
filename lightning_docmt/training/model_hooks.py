"""The training side of a model's hooks (`nn/training_hooks.py`): optimizer phases and carried state.

`DocMTModule` uses these; `run.check_stages` calls `check_training_hooks` for every stage before
anything trains, so that a setting a model's hooks cannot work with fails first.

Optimizer phases (`PhaseCycle`, `phase_parameter_names`): one optimizer per phase, over the
trainable parameters matching the phase's globs. Freezing is by optimizer: every parameter of every
phase keeps `requires_grad`, so DDP registers all of them once, and a phase's update leaves the
other phases' parameters untouched because their optimizers do not step (their gradients are
discarded). Toggling `requires_grad` instead would change the set DDP reduces after it wrapped the
model (see `callbacks/staged_unfreezing.py`). Every trainable parameter must be in a phase.

Carried state (`CarriedState`): see its docstring.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch
from omegaconf import DictConfig
from torch import Tensor

from lightning_docmt.callbacks.staged_unfreezing import matches
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.nn.seq2seq import select_rows
from lightning_docmt.nn.training_hooks import OptimizerPhase
from lightning_docmt.registry import get_arch, model_config


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


def map_tensors(fn: Callable[..., Tensor], value: Any, *others: Any) -> Any:
    """`fn` applied to the tensors of `value` (tensors, dataclasses, dicts, lists, tuples), each with
    the tensors at the same place in `others`, which have `value`'s structure (a dataclass's place
    may also hold its `plain` form, a dict of its fields)."""
    if isinstance(value, Tensor):
        return fn(value, *others)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        def field_of(other: Any, name: str) -> Any:
            return other[name] if isinstance(other, dict) else getattr(other, name)

        return dataclasses.replace(value, **{
            f.name: map_tensors(fn, getattr(value, f.name), *(field_of(o, f.name) for o in others))
            for f in dataclasses.fields(value) if f.init})
    if isinstance(value, dict):
        return {k: map_tensors(fn, v, *(o[k] for o in others)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(map_tensors(fn, *items) for items in zip(value, *others))
    return value


def plain(value: Any) -> Any:
    """`value` with every dataclass replaced by a dict of its fields, recursively: what a checkpoint
    may hold (`checkpoints.py` loads plain containers and tensors only)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    return value


class CarriedState:
    """What a model with `carries_state` hands from each sentence to the next one of its document,
    across the batches of one loop (training, or evaluation).

    Document-order batches (`data/doc_sampler.py`) put a document's next sentence in the next
    batch, but not always in the same row. In training, a row reads documents one after another
    (a new document starts where the last one ended) and rows keep their places. In evaluation,
    batch j holds sentence j of every document of a group, so a document that ends drops out and
    the rows after it move up, and a new group brings other documents. The state is therefore
    keyed by `doc_index`, not by row: a row receives the state
    that the previous batch's row of the same document, one position earlier (`pos_in_doc` - 1),
    produced; every other row receives the model's `initial_carry`. That resets the first sentence
    of each document (`pos_in_doc == 0`), a sentence whose previous sentence was not trained on
    (over-long, see `cache.py`), and whatever follows a `clear`. A document's sentences never
    follow each other across an epoch boundary or a replay (they restart at its first sentence),
    so the training state needs no clearing there. The state is kept detached: no gradient flows
    from one batch into the previous one.
    """

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self._docs: Tensor | None = None  # (B',) doc_index of the previous batch's rows
        self._positions: Tensor | None = None  # (B',) their pos_in_doc
        self._value: Any = None  # the state they produced, batch-first (B', ...)

    def rows(self, batch: dict[str, Tensor], initial: Any) -> Any:
        """The state for every row of `batch`; `initial`: the model's `initial_carry(batch)`."""
        if self._value is None:
            return initial
        docs, positions = batch["doc_index"], batch["pos_in_doc"]  # (B,)
        prev_docs, prev_positions, prev_value = map_tensors(  # from a checkpoint: on the CPU
            lambda t: t.to(docs.device), (self._docs, self._positions, self._value))
        follows = (docs[:, None].eq(prev_docs[None])
                   & positions[:, None].eq(prev_positions[None] + 1))  # (B, B'): row i follows row k
        found = follows.any(dim=1)  # (B,)
        carried = select_rows(prev_value, follows.int().argmax(dim=1))  # (B, ...) where found

        def where_found(reset: Tensor, kept: Tensor) -> Tensor:
            return torch.where(found.view(-1, *[1] * (kept.dim() - 1)), kept, reset)  # (B, ...)

        return map_tensors(where_found, initial, carried)  # the model's structure (from a checkpoint: plain)

    def keep(self, batch: dict[str, Tensor], value: Any) -> None:
        """Remember the state `value` that the rows of `batch` hand to their next sentences."""
        self._docs, self._positions = batch["doc_index"], batch["pos_in_doc"]
        self._value = map_tensors(Tensor.detach, value)

    def state_dict(self) -> dict[str, Any]:
        """The state on the CPU, dataclasses as plain dicts (for checkpoints)."""
        return plain(map_tensors(Tensor.cpu, {"docs": self._docs, "positions": self._positions,
                                              "value": self._value}))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._docs, self._positions, self._value = state["docs"], state["positions"], state["value"]
