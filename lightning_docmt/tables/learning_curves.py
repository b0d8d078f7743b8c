"""The learning curves of a table's runs, read from the CSV log every stage writes (`metrics.csv`).

A run's stages are laid one after another on one axis of updates, in the order of its `run.json`
(the schedule's). A stage that a run reused from the stage cache (a shared sentence-level stage,
training/run.py) was trained, and logged, in another run's directory: its log is found there by the
stage key that each stage directory records (`stage.json`). Lightning logs a validation at the
0-based index of the last update, hence the + 1.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from lightning_docmt.tables.summaries import RunRecord
from lightning_docmt.tables.values import is_finite_number

STAGE_LOG, STAGE_MARKER = "metrics.csv", "stage.json"
VALID_METRICS = ("val/bleu", "val/loss")  # the first one a stage logged is drawn
TRAIN_METRIC = "train/loss"


@dataclass(frozen=True)
class StageCurve:
    key: str  # the stage key: rows that share a stage share its curve
    start: float  # the update at which the stage begins in its run
    valid: tuple[tuple[float, float], ...]  # (updates, value)
    train: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class RunCurve:
    row: str
    seed: int
    valid_metric: str
    stages: tuple[StageCurve, ...]


def stage_logs(run_dirs: Sequence[Path]) -> dict[str, Path]:
    """stage key -> the `metrics.csv` of the stage trained under that key, over `run_dirs`."""
    found = {}
    for run_dir in run_dirs:
        for marker in run_dir.glob(f"*/{STAGE_MARKER}"):
            log = marker.parent / STAGE_LOG
            if log.is_file():
                found[json.loads(marker.read_text())["key"]] = log
    return found


def _column(rows: list[dict[str, str]], name: str, offset: float) -> list[tuple[float, float]]:
    return [(offset + int(r["step"]) + 1, float(r[name])) for r in rows
            if r.get(name) not in (None, "") and is_finite_number(float(r[name]))]


def run_curve(record: RunRecord, logs: dict[str, Path]) -> RunCurve | None:
    """The run's curve, or None when it has no `run.json` or none of its stage logs is found."""
    try:
        stages = json.loads((record.run_dir / "run.json").read_text())["stages"]
    except (OSError, json.JSONDecodeError, KeyError):
        return None
    curves: list[StageCurve] = []
    offset, metric = 0.0, ""
    for info in stages.values():
        log = logs.get(info["key"])
        if log is None:
            offset += info["global_step"]
            continue
        with log.open(newline="") as f:
            rows = list(csv.DictReader(f))
        metric = metric or next((m for m in VALID_METRICS if rows and m in rows[0]), "")
        curves.append(StageCurve(info["key"], offset, tuple(_column(rows, metric, offset) if metric else ()),
                                 tuple(_column(rows, TRAIN_METRIC, offset))))
        offset += max((int(r["step"]) + 1 for r in rows), default=info["global_step"])
    if not curves:
        return None
    return RunCurve(record.row, record.seed, metric, tuple(curves))


def learning_curves(records: Sequence[RunRecord]) -> list[RunCurve]:
    """The curves of the finished runs among `records`, in their order."""
    finished = [r for r in records if r.succeeded]
    logs = stage_logs([r.run_dir for r in finished])
    curves = (run_curve(r, logs) for r in finished)
    return [c for c in curves if c is not None]
