"""Checkpoint averaging (docs/design.md section 7): a pure function, a callback, and `docmt average`.

"Diverse Pretrained Context Encodings Improve Document Translation" (docs/papers/donato2021.md
section 4, trap 21)
averages the 10 contiguous checkpoints with the best mean validation BLEU, once before a stage-1
Transformer bootstraps the document models and once before reporting. `CheckpointAveraging` applies
that rule (`rule: best_contiguous`) or the last N (`rule: last`) at the end of every stage
(`train.average`, schema.AverageConfig).

`average_state_dicts` averages floating tensors in float32 (float64 stays float64) and casts back to
each tensor's dtype; integer and bool buffers (step counters, masks) are copied from the newest
(last) state dict, and so is a tensor equal in every state dict (a frozen encoder, a frozen sentence
model), which a float sum and division could move by a rounding step. The traps it avoids
(docs/design.md section 12): fairseq floor-divides integer tensors, NeMo sums them, OpenNMT-py
accumulates in half precision (in bf16, 256 + 1 rounds back to 256, so a bf16 sum of many
checkpoints drifts).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import lightning.pytorch as pl
import torch
from lightning.pytorch.trainer.states import TrainerFn

from lightning_docmt.atomic_files import write_text_atomically
from lightning_docmt.checkpoints import read_checkpoint, save_atomically
from lightning_docmt.errors import DocMTInputError

RULES = ("best_contiguous", "last")


def average_state_dicts(state_dicts: Iterable[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of `state_dicts` (oldest first), read one at a time.

    Every state dict must have the keys and shapes of the first; a mismatch is a `DocMTInputError`
    naming the key. Floating tensors are summed in (at least) float32 and cast back to their dtype;
    other tensors, and tensors equal in every state dict (kept bit for bit), come from the last
    (newest) state dict.
    """
    sums: dict[str, torch.Tensor] = {}
    newest: Mapping[str, torch.Tensor] = {}
    varies: set[str] = set()  # floating tensors that differ between two consecutive state dicts
    count = 0
    for state in state_dicts:
        if count == 0:
            sums = {k: v.detach().to(torch.promote_types(v.dtype, torch.float32), copy=True)
                    for k, v in state.items() if v.is_floating_point()}
            first = {k: (v.shape, v.dtype) for k, v in state.items()}
        else:
            _check_same_layout(first, state)
            for k, total in sums.items():
                total += state[k].detach().to(total.dtype)
                if k not in varies and not torch.equal(state[k], newest[k]):
                    varies.add(k)
        newest = state
        count += 1
    if count == 0:
        raise DocMTInputError("nothing to average: no state dicts")
    return {k: (sums[k] / count).to(v.dtype) if k in varies else v.detach().clone()
            for k, v in newest.items()}


def _check_same_layout(first: Mapping[str, tuple[torch.Size, torch.dtype]],
                       state: Mapping[str, torch.Tensor]) -> None:
    for k in first:
        if k not in state:
            raise DocMTInputError("missing from a later state dict", key=k)
    for k, v in state.items():
        if k not in first:
            raise DocMTInputError("not in the first state dict", key=k)
        shape, dtype = first[k]
        if v.shape != shape or v.is_floating_point() != dtype.is_floating_point:
            raise DocMTInputError(f"{tuple(v.shape)} {v.dtype} differs from {tuple(shape)} {dtype} "
                                  f"of the first state dict", key=k)


def select_window(scores: Sequence[float], n: int, rule: str) -> range:
    """Indices of the checkpoints to average; higher scores are better.

    `last`: the last n. `best_contiguous`: the n contiguous checkpoints with the highest score sum
    (= mean), the later window on ties. Fewer than n checkpoints: all of them.
    """
    if rule not in RULES:
        raise ValueError(f"unknown averaging rule '{rule}'")
    if len(scores) <= n:  # NOT IN PAPER (5.4 averages 10): a stage with fewer validations averages all
        return range(len(scores))
    starts = range(len(scores) - n + 1)
    if rule == "last":
        start = starts[-1]
    else:
        start = max(starts, key=lambda i: (sum(scores[i:i + n]), i))
    return range(start, start + n)


def check_average_config(checkpoints: int, rule: str) -> None:
    if checkpoints < 0:
        raise DocMTInputError(f"must be >= 0 (0 = off), got {checkpoints}",
                              key="train.average.checkpoints")
    if rule not in RULES:
        raise DocMTInputError(f"unknown rule '{rule}' (expected one of {', '.join(RULES)})",
                              key="train.average.rule")


@dataclass
class Snapshot:
    step: int
    score: float  # the monitored metric, sign-flipped when lower is better
    path: str | None  # None once pruned


class CheckpointAveraging(pl.Callback):
    """Keeps the trainable weights of every validation on disk; once `fit` has returned,
    `average_and_validate` averages N of them, validates the average and saves it as a Lightning
    checkpoint (`checkpoint_path`).

    Only the snapshots that can still be chosen stay on disk: the best window so far and the last
    n-1 (a later window may still include them); at most 2n-1 files. A snapshot holds the tensors
    that train at that moment: frozen ones cannot differ between snapshots, and the average takes
    them (and any tensor not trainable in every snapshot of the window, e.g. one unfrozen by a
    milestone inside it) from the final model. Snapshots are written by global rank zero and read
    by every rank, so the stage directory must be shared by the ranks. The window survives a resume
    (`state_dict`), and a resumed fit checks that its snapshot files are still there.

    A pruned snapshot's file outlives the prune until a checkpoint that no longer lists it is on
    disk: the newest checkpoint (the one `docmt fit --resume` takes) may still list it, and a kill
    between the prune and the next checkpoint would otherwise leave that checkpoint naming a deleted
    file. Files pruned before checkpoint k are deleted as checkpoint k+1 is built (by then k has been
    written whole); a checkpoint lists the files pruned but not yet deleted, and a fit resumed from
    it deletes them at its next checkpoint.
    """

    # NOT IN PAPER: with `eval.valid_bleu=false` the monitored score is the validation loss (mode min)
    # instead of the paper's validation BLEU (`trainer_factory.monitor_metric`).
    def __init__(self, checkpoints: int, rule: str, directory: Path, monitor: str, mode: str):
        check_average_config(checkpoints, rule)
        self.n = checkpoints
        self.rule = rule
        self.directory = Path(directory)
        self.monitor = monitor
        self.sign = 1.0 if mode == "max" else -1.0
        self.snapshots: list[Snapshot] = []
        self.pruned_since_save: list[str] = []  # the newest checkpoint on disk may still list these
        self.pruned_before_save: list[str] = []  # no checkpoint that a resume can take lists these
        self.result: dict[str, Any] | None = None  # set by average_and_validate: steps, scores, val metrics

    @property
    def checkpoint_path(self) -> Path:
        return self.directory / "averaged.ckpt"

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            raise RuntimeError(f"checkpoint averaging: '{self.monitor}' was not logged")
        if self.snapshots and self.snapshots[-1].step == trainer.global_step:
            self.snapshots.pop()  # validated twice at one step: keep the later weights
        path = self.directory / f"step{trainer.global_step:09d}.pt"
        if trainer.is_global_zero:
            self.directory.mkdir(parents=True, exist_ok=True)
            trainable = {n: p.detach().cpu().clone() for n, p in pl_module.named_parameters() if p.requires_grad}
            save_atomically(trainable, path)
        self.snapshots.append(Snapshot(trainer.global_step, self.sign * float(value), str(path)))
        self._prune(trainer)

    def _window(self) -> list[Snapshot]:
        return [self.snapshots[i] for i in select_window([s.score for s in self.snapshots], self.n, self.rule)]

    def _prune(self, trainer: pl.Trainer) -> None:
        keep = {id(s) for s in self._window()}
        keep |= {id(s) for s in self.snapshots[len(self.snapshots) - self.n + 1:]}  # last n-1
        for s in self.snapshots:
            if id(s) not in keep and s.path is not None:
                self.pruned_since_save.append(s.path)
                s.path = None

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        """A checkpoint is being built, so the previous one is on disk whole: the files pruned
        before it are listed by no checkpoint a resume can take any more."""
        self._unlink(trainer, self.pruned_before_save)
        self.pruned_before_save, self.pruned_since_save = self.pruned_since_save, []

    def delete_pruned(self, trainer: pl.Trainer) -> None:
        """Once the stage is published (its `done.json`), no resume reads its checkpoints: the
        pruned files go, and the averaging folder keeps the window and the last n-1 (at most 2n-1)."""
        self._unlink(trainer, self.pruned_before_save)
        self._unlink(trainer, self.pruned_since_save)

    def _unlink(self, trainer: pl.Trainer, paths: list[str]) -> None:
        if trainer.is_global_zero:
            for path in paths:
                Path(path).unlink(missing_ok=True)
        paths.clear()

    def average_and_validate(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        """After `trainer.fit` has returned: load the average of the chosen window into `pl_module`,
        validate it (a `trainer.validate` of its own, logged like any validation) and save it as a
        normal Lightning checkpoint. Returns `result` (window steps, scores, validation metrics)."""
        window = self._window()
        trainer.strategy.barrier("checkpoint averaging")  # rank zero has written every snapshot
        snapshots = [torch.load(s.path, map_location="cpu", weights_only=True) for s in window]
        shared = set.intersection(*(set(s) for s in snapshots))  # trainable in every snapshot
        averaged = average_state_dicts({k: s[k] for k in shared} for s in snapshots)
        pl_module.load_state_dict({**pl_module.state_dict(), **averaged})
        metrics = trainer.validate(pl_module, datamodule=trainer.datamodule, verbose=False)
        tmp = self.checkpoint_path.with_name(self.checkpoint_path.name + ".tmp")
        trainer.save_checkpoint(tmp, weights_only=True)
        self.result = {"rule": self.rule, "steps": [s.step for s in window],
                       "scores": [self.sign * s.score for s in window],
                       "validation": {k: float(v) for k, v in (metrics[0] if metrics else {}).items()}}
        if trainer.is_global_zero:
            os.replace(tmp, self.checkpoint_path)
            write_text_atomically(self.directory / "average.json", json.dumps(self.result, indent=1) + "\n")
        trainer.strategy.barrier("checkpoint averaging done")
        return self.result

    def state_dict(self) -> dict[str, Any]:
        return {"snapshots": [asdict(s) for s in self.snapshots],
                "unlisted": self.pruned_before_save + self.pruned_since_save}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the window on resume; every snapshot that can still be chosen must exist."""
        self.snapshots = [Snapshot(**s) for s in state_dict["snapshots"]]
        self.pruned_before_save, self.pruned_since_save = list(state_dict.get("unlisted", [])), []
        lost = [s.path for s in self.snapshots if s.path is not None and not Path(s.path).is_file()]
        if lost:
            raise DocMTInputError(f"cannot resume checkpoint averaging: {len(lost)} snapshot files are "
                                  f"gone (first: {lost[0]}); resume in the stage directory that wrote "
                                  f"them, or restart the stage", key="train.average")


# ---------------------------------------------------------------------- `docmt average`
def average_checkpoints(paths: Sequence[Path], out: Path) -> dict[str, Any]:
    """Average the `state_dict` of Lightning checkpoints into `out` (written atomically).

    The newest checkpoint (highest `global_step`, the later argument on ties) gives everything else:
    hyper-parameters, packed vocabularies, integer buffers. Checkpoints are read one at a time.
    """
    steps = [int(read_checkpoint(Path(p), mmap=True).get("global_step", 0)) for p in paths]
    ordered = [Path(p) for _, _, p in sorted(zip(steps, range(len(paths)), paths))]
    current: list[Path] = []

    def states() -> Iterator[dict[str, torch.Tensor]]:
        for path in ordered:
            current[:] = [path]
            yield read_checkpoint(path, mmap=True)["state_dict"]

    try:
        averaged = average_state_dicts(states())
    except DocMTInputError as err:
        raise DocMTInputError(str(err), path=current[0]) from None
    checkpoint = read_checkpoint(ordered[-1])
    checkpoint["state_dict"] = averaged
    checkpoint["averaged_from"] = [str(p) for p in ordered]
    out.parent.mkdir(parents=True, exist_ok=True)
    save_atomically(checkpoint, out)
    return {"out": str(out), "averaged": [str(p) for p in ordered], "newest": str(ordered[-1])}
