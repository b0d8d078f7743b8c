"""A table's runs and their summary per row: what every report (Markdown, CSV, figures, grids) reads.

`RunRecord`: one (row, seed) run and its status; `RowSummary`: a row's runs and, per metric, the
finite values of its finished runs (`MetricSummary`: mean, sample sd, the paper's number).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from lightning_docmt.tables import contrastive_columns
from lightning_docmt.tables.spec import Table, TableRow
from lightning_docmt.tables.values import is_finite_number

DONE, FINISHED, FAILED, INCOMPLETE = "done", "finished", "failed", "incomplete"


@dataclass
class RunRecord:
    """One (row, seed) run. `status`: DONE (ran now), FINISHED (finished earlier, skipped),
    FAILED (raised; see `error` and `log_path`), INCOMPLETE (started, never finished). `seed` None:
    a row whose config does not compose (`runner.run_table`), FAILED for every seed, without a log."""

    row: str
    seed: int | None
    run_dir: Path
    status: str
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    log_path: Path | None = None

    @property
    def succeeded(self) -> bool:
        return self.status in (DONE, FINISHED)


@dataclass(frozen=True)
class MetricSummary:
    values: tuple[float, ...]
    paper: float | None

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def std(self) -> float | None:
        """Sample standard deviation (n - 1); None below two seeds."""
        return statistics.stdev(self.values) if len(self.values) >= 2 else None


@dataclass(frozen=True)
class RowSummary:
    row: TableRow
    records: tuple[RunRecord, ...]
    metrics: dict[str, MetricSummary]

    @property
    def ran(self) -> bool:
        """Whether the row has runs on disk (finished or not); a report names the others once."""
        return bool(self.records)

    @property
    def status(self) -> str:
        finished = sum(r.succeeded for r in self.records)
        if not self.ran:
            return "not run"
        if finished == len(self.records):
            return "ok"
        if finished == 0:
            return FAILED if any(r.status == FAILED for r in self.records) else INCOMPLETE
        return f"partial ({finished}/{len(self.records)} seeds)"


def summarize(table: Table, records: Sequence[RunRecord]) -> list[RowSummary]:
    """One summary per table row (table order); `records` may hold any subset of rows and seeds."""
    summaries = []
    for row in table.rows:
        mine = tuple(sorted((r for r in records if r.row == row.name), key=lambda r: r.seed))
        metrics = {metric: MetricSummary(values=tuple(values_by_seed(mine, metric).values()),
                                         paper=row.paper.get(metric))
                   for metric in table.metrics}
        summaries.append(RowSummary(row=row, records=mine, metrics=metrics))
    return summaries


def values_by_seed(records: Sequence[RunRecord], metric: str) -> dict[int, float]:
    """seed -> the finite value of `metric` in each finished run among `records`."""
    values = {r.seed: contrastive_columns.column_value(r.metrics, metric) for r in records if r.succeeded}
    return {seed: float(v) for seed, v in values.items() if is_finite_number(v)}
