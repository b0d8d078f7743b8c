"""Summarise the runs of a table and write it: Markdown, CSV, bar chart, wandb (docs/design.md section 10).

For every row and metric: our mean and sample standard deviation over the finished seeds, the
paper's number, and delta = ours - paper. Failed runs are listed with their error and log file.
"""

from __future__ import annotations

import csv
import importlib
import logging
import math
import os
import statistics
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from lightning_docmt.evaluation.context_usage import METRIC_MEANINGS
from lightning_docmt.provenance import ENV_PREFIX
from lightning_docmt.tables import contrastive_columns
from lightning_docmt.tables.spec import Table, TableRow
from lightning_docmt.tables.values import is_finite_number

log = logging.getLogger(__name__)

DONE, FINISHED, FAILED, INCOMPLETE = "done", "finished", "failed", "incomplete"


@dataclass
class RunRecord:
    """One (row, seed) run. `status`: DONE (ran now), FINISHED (finished earlier, skipped),
    FAILED (raised; see `error` and `log_path`), INCOMPLETE (started, never finished)."""

    row: str
    seed: int
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

    @property
    def delta(self) -> float | None:
        return None if self.mean is None or self.paper is None else self.mean - self.paper


@dataclass(frozen=True)
class RowSummary:
    row: TableRow
    records: tuple[RunRecord, ...]
    metrics: dict[str, MetricSummary]

    @property
    def status(self) -> str:
        finished = sum(r.succeeded for r in self.records)
        if not self.records:
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
        metrics = {metric: MetricSummary(values=_finished_values(mine, metric),
                                         paper=row.paper.get(metric))
                   for metric in table.metrics}
        summaries.append(RowSummary(row=row, records=mine, metrics=metrics))
    return summaries


# Per row: (mark, p-values per seed) of its test BLEU against the table's baseline row
# (tables/row_significance.py); rows without a test are absent.
Significance = Mapping[str, tuple[str, Sequence[float]]]


def marked_metric(table: Table) -> str:
    """The column the significance marks go in: the BLEU of the split the table reports on."""
    return "valid/bleu" if table.evaluate == "valid_report" else "test/bleu"


def write_markdown(table: Table, summaries: Sequence[RowSummary], path: Path,
                   *, context: str = "", significance: Significance | None = None) -> Path:
    significance = significance or {}
    header = ["Row"]
    for metric in table.metrics:
        header += [metric, "paper", "Δ"]
    header.append("Status")
    marked = marked_metric(table)
    explained = (f" ↑/↓: {marked} significantly better/worse than the baseline row "
                 f"`{table.baseline}` (paired bootstrap, p < 0.05) in every seed; the p-values "
                 "are in table.csv." if table.baseline else "")
    lines = [f"# {table.title}", "",
             f"Table `{table.id}` (`{table.path}`). Ours: mean ± sample standard deviation over the "
             "finished seeds (n); Δ = ours − paper." + explained + (f" {context}" if context else ""),
             "", "| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(header) - 2) + ["---"]) + "|"]
    for summary in summaries:
        cells = [summary.row.name]
        for metric in table.metrics:
            m = summary.metrics[metric]
            mark = significance.get(summary.row.name, ("", ()))[0] if metric == marked else ""
            digits = decimals(metric)
            cells += [ours_cell(m, digits) + (f" {mark}" if mark else ""), number_cell(m.paper, digits),
                      number_cell(m.delta, digits, signed=True)]
        cells.append(summary.status)
        lines.append("| " + " | ".join(cells) + " |")
    failures = [r for s in summaries for r in s.records if r.status == FAILED]
    if failures:
        lines += ["", "Failed runs:", ""]
        lines += [f"- `{r.row}` seed {r.seed}: {r.error} (log: `{r.log_path}`)" for r in failures]
    signatures = sorted({f"{key}: {value}" for s in summaries for r in s.records
                         for key, value in r.metrics.items()
                         if isinstance(value, str) and key.endswith("signature")})
    if signatures:
        lines += ["", "Signatures:", ""] + [f"- `{s}`" for s in signatures]
    provenance = run_provenance([r for s in summaries for r in s.records if r.succeeded])
    if provenance:
        lines += ["", "Runs (numbers from different precisions or code are not bit-comparable):", ""]
        lines += provenance
    lines += context_columns_legend(table.metrics)
    rates = contrastive_columns.footnote(table.metrics, [r.metrics for s in summaries for r in s.records])
    if rates:
        lines += ["", "Contrastive suites (accuracies are fractions):", ""] + rates
    notes = [f"- `{s.row.name}`: {s.row.notes}" for s in summaries if s.row.notes]
    if table.notes or notes:
        lines += ["", "Notes:", ""] + ([table.notes.strip(), ""] if table.notes else []) + notes
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def context_columns_legend(metrics: Sequence[str]) -> list[str]:
    """A report's paragraph on what each context-usage column among `metrics` measures
    (evaluation/context_usage.py); none when no such column is shown."""
    meanings = [f"- `{m}`: {METRIC_MEANINGS[m]}" for m in metrics if m in METRIC_MEANINGS]
    return ["", "Context columns (on the test split):", "", *meanings] if meanings else []


# What a finished run records of where it ran (lightning_docmt/provenance.py) that can change its
# last digits: a table filled on several machines (e.g. from the archive, runner.py) says so.
PROVENANCE_KEYS = ("precision", "device", "torch", "code")


def run_provenance(records: Sequence[RunRecord]) -> list[str]:
    """One Markdown item per distinct setting of PROVENANCE_KEYS among `records` that recorded
    any, with its runs."""
    groups: dict[str, list[str]] = {}
    for r in records:
        if not any(key.startswith(ENV_PREFIX) for key in r.metrics):
            continue
        setting = ", ".join(f"{key} {r.metrics.get(ENV_PREFIX + key, '?')}" for key in PROVENANCE_KEYS)
        groups.setdefault(setting, []).append(f"{r.row}/seed{r.seed}")
    return [f"- {setting}: {len(runs)} run{'s' if len(runs) > 1 else ''} ({', '.join(runs)})"
            for setting, runs in sorted(groups.items())]


def write_csv(table: Table, summaries: Sequence[RowSummary], path: Path, *,
              significance: Significance | None = None) -> Path:
    """One line per row and metric; `p_values` (per seed, `;`-separated) and `mark` against the
    baseline row, on the test (or valid) BLEU lines of the rows that were tested."""
    significance = significance or {}
    marked = marked_metric(table)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["row", "metric", "n", "mean", "std", "paper", "delta", "status",
                         "p_values", "mark"])
        for summary in summaries:
            for metric in table.metrics:
                m = summary.metrics[metric]
                mark, p_values = (significance.get(summary.row.name, ("", ()))
                                  if metric == marked else ("", ()))
                writer.writerow([summary.row.name, metric, m.n, raw_cell(m.mean), raw_cell(m.std),
                                 raw_cell(m.paper), raw_cell(m.delta), summary.status,
                                 ";".join(repr(p) for p in p_values), mark])
    return path


def write_bar_chart(table: Table, summaries: Sequence[RowSummary], path: Path) -> Path:
    """One panel per metric: ours (mean, std error bar) next to the paper's number, per row."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = [s.row.name for s in summaries]
    x = np.arange(len(names))
    width = 0.38
    fig = Figure(figsize=(max(5.0, 1.1 * len(names) + 2.0), 3.2 * len(table.metrics)))
    FigureCanvasAgg(fig)
    for k, metric in enumerate(table.metrics):
        ax = fig.add_subplot(len(table.metrics), 1, k + 1)
        ms = [s.metrics[metric] for s in summaries]
        ours = [math.nan if m.mean is None else m.mean for m in ms]
        spread = [m.std or 0.0 for m in ms]
        paper = [math.nan if m.paper is None else m.paper for m in ms]
        ax.bar(x - width / 2, ours, width, yerr=spread, capsize=3, label="ours")
        ax.bar(x + width / 2, paper, width, hatch="//", alpha=0.6, label="paper")
        ax.set_xticks(x, labels=names, rotation=30 if len(names) > 4 else 0, ha="right"
                      if len(names) > 4 else "center")
        ax.set_ylabel(metric)
        ax.legend(loc="lower right")
    fig.suptitle("\n".join(textwrap.wrap(table.title, 80)))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def log_table_to_wandb(table: Table, summaries: Sequence[RowSummary], chart: Path | None, *,
                       project: str, out_dir: Path) -> bool:
    """Log a `wandb.Table`, one bar chart per metric and the PNG to a `table` run of the group.

    Mode: WANDB_MODE, offline when unset; "disabled" skips wandb. Every wandb call is guarded: a
    failure is logged as a warning and never raised. Returns whether everything was logged.
    """
    mode = os.environ.get("WANDB_MODE", "offline")
    if mode == "disabled":
        return False
    ok, wandb = _safely("import", lambda: importlib.import_module("wandb"))
    if not ok:
        return False
    ok, run = _safely("init", lambda: wandb.init(
        project=project, group=table.id, name=f"{table.id}/table", job_type="table",
        tags=[table.paper, table.id], mode=mode, dir=str(out_dir), reinit="create_new",
        config={"table": table.id, "title": table.title, "metrics": list(table.metrics)}))
    if not ok:
        return False

    def results_table():
        columns = ["row", "metric", "n", "ours", "std", "paper", "delta", "status"]
        data = [[s.row.name, metric, m.n, m.mean, m.std, m.paper, m.delta, s.status]
                for s in summaries for metric, m in s.metrics.items()]
        run.log({"table": wandb.Table(columns=columns, data=data)})

    def bar_chart(metric: str):
        bars = [[f"{s.row.name} ({who})", value] for s in summaries
                for who, value in (("ours", s.metrics[metric].mean),
                                   ("paper", s.metrics[metric].paper)) if value is not None]
        run.log({f"chart/{metric}": wandb.plot.bar(
            wandb.Table(columns=["bar", metric], data=bars), "bar", metric,
            title=f"{table.id}: {metric}")})

    steps: list[tuple[str, Callable[[], Any]]] = [("table", results_table)]
    steps += [(f"bar chart {metric}", lambda metric=metric: bar_chart(metric))
              for metric in table.metrics]
    if chart is not None:
        steps.append(("image", lambda: run.log({"chart": wandb.Image(str(chart))})))
    steps.append(("finish", run.finish))
    return all([_safely(what, call)[0] for what, call in steps])


def _safely(what: str, call: Callable[[], Any]) -> tuple[bool, Any]:
    """(True, call()) or, if it raised, (False, None) with a warning: wandb never stops a table."""
    try:
        return True, call()
    except Exception as err:  # wandb raises many types (network, usage, file errors)
        log.warning("wandb %s failed (%s: %s); continuing without it", what, type(err).__name__, err)
        return False, None


def _finished_values(records: Sequence[RunRecord], metric: str) -> tuple[float, ...]:
    """The finite numeric values of `metric` over the finished runs."""
    values = (contrastive_columns.column_value(r.metrics, metric) for r in records if r.succeeded)
    return tuple(float(v) for v in values if is_finite_number(v))


def decimals(metric: str) -> int:
    """Digits shown for `metric`: CXMI is in nats per token, typically 1e-4 to 1e-1 (a context-blind
    model's is exactly 0), so two decimals would print every small value as 0.00; scores get two."""
    return 4 if "cxmi" in metric else 2


def ours_cell(m: MetricSummary, digits: int) -> str:
    if m.mean is None:
        return "n/a"
    spread = f" ± {m.std:.{digits}f}" if m.std is not None else ""
    return f"{m.mean:.{digits}f}{spread} (n={m.n})"


def number_cell(value: float | None, digits: int, *, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def raw_cell(value: float | None) -> str:
    return "" if value is None else repr(value)
