"""A table's changes between rows (`changes:`, tables/changes.py) measured on its runs, for its report.

Per change and metric: the change seed by seed (row - against of that seed, the mean over the
pairs for several; a seed counts when every row of the change finished it), mean ± sample sd beside
the paper's change. The metrics shown are the table's scores (BLEU, chrF, accuracies: what a change
between two models' outputs means) and any other metric a change gives a paper number for. A
change of one pair is tested as a row is against the baseline (paired bootstrap per seed on the
marked metric, tables/row_significance.py), marked only when significant in the same direction in
every seed; a mean over several pairs is not tested, nor is a selection table (`evaluate: valid`:
no hypotheses are kept). Written as a section of table.md and as changes.csv.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from lightning_docmt.atomic_files import write_csv_atomically
from lightning_docmt.tables.changes import Change
from lightning_docmt.tables.effects import Effect, is_score, seed_values
from lightning_docmt.tables.report import change_cell, decimals, marked_metric, number_cell, raw_cell
from lightning_docmt.tables.row_significance import RowSignificance, tested_against
from lightning_docmt.tables.spec import Table
from lightning_docmt.tables.summaries import RowSummary


@dataclass(frozen=True)
class ChangeResult:
    change: Change
    effects: dict[str, Effect]  # metric -> the change per seed (Effect.row: the change's name)
    tested: RowSignificance | None  # one pair, on the marked metric; None: not tested or no seed


def shown_metrics(table: Table) -> list[str]:
    """The table's scores, and the metrics a change gives the paper's number for."""
    return [m for m in table.metrics if is_score(m) or any(m in c.paper for c in table.changes)]


def change_values(change: Change, summaries: Sequence[RowSummary], metric: str) -> dict[int, float]:
    """seed -> the change in that seed, over the seeds every row of the change has a value in."""
    by_row = {s.row.name: seed_values(s, metric) for s in summaries if s.row.name in change.rows}
    seeds = set.intersection(*(set(by_row.get(row, {})) for row in change.rows))
    return {seed: statistics.fmean(by_row[row][seed] - by_row[against][seed] for row, against in change.pairs)
            for seed in sorted(seeds)}


def tested_change(change: Change, summaries: Sequence[RowSummary]) -> RowSignificance | None:
    """A one-pair change's paired bootstrap per seed both rows finished; None for several pairs."""
    if len(change.pairs) != 1:
        return None
    row, against = change.pairs[0]
    finished = {s.row.name: {r.seed: r for r in s.records if r.succeeded}
                for s in summaries if s.row.name in (row, against)}
    seeds = sorted(set(finished.get(row, {})) & set(finished.get(against, {})))
    if not seeds:
        return None
    tests = [tested_against(finished[against][seed], {row: finished[row][seed]})[row] for seed in seeds]
    p_values, deltas = zip(*tests)
    return RowSignificance(p_values=p_values, deltas=deltas, seeds=tuple(seeds))


def measure_changes(table: Table, summaries: Sequence[RowSummary]) -> list[ChangeResult]:
    """Every change of `table` on `summaries`, tested where it can be (the costly part)."""
    testable = table.evaluate != "valid" and marked_metric(table) in table.metrics
    return [ChangeResult(change=c,
                         effects={m: Effect(c.name, change_values(c, summaries, m), c.paper.get(m))
                                  for m in shown_metrics(table)},
                         tested=tested_change(c, summaries) if testable else None)
            for c in table.changes]


def markdown_lines(table: Table, results: Sequence[ChangeResult]) -> list[str]:
    """The report's section on the changes: a table of them, then their notes."""
    if not results:
        return []
    marked, metrics = marked_metric(table), shown_metrics(table)
    with_paper = [m for m in metrics if any(m in r.change.paper for r in results)]
    header = ["Change", "of"]
    for metric in metrics:
        header += [f"{metric} Δ"] + (["paper Δ"] if metric in with_paper else [])
    header.append(f"p ({marked})")
    lines = ["", f"Changes between rows (`changes:`): in a seed, row − against of that seed (the mean over "
             "the pairs for several), over the seeds in which every row of the change finished; mean ± sd "
             f"(n). ↑/↓: a one-pair change of {marked} significant in the same direction in every seed "
             "(paired bootstrap, p < 0.05); a mean over several pairs is not tested.", "",
             "| " + " | ".join(header) + " |", "|" + "|".join(["---", "---"] + ["---:"] * (len(header) - 2)) + "|"]
    for result in results:
        cells = [result.change.name, result.change.label()]
        for metric in metrics:
            effect, digits = result.effects[metric], decimals(metric)
            cell = change_cell(effect if effect.seeds else None, digits, baseline=False)
            mark = result.tested.mark if result.tested is not None and metric == marked else ""
            cells.append(cell + (f" (n={len(effect.seeds)})" if effect.seeds else "") + (f" {mark}" if mark else ""))
            if metric in with_paper:
                cells.append(number_cell(result.change.paper.get(metric), digits, signed=True))
        cells.append(", ".join(f"{p:.3f}" for p in result.tested.p_values) if result.tested else "—")
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- `{r.change.name}`: {r.change.notes}" for r in results if r.change.notes]
    return lines + (["", *notes] if notes else [])


def write_changes_csv(table: Table, results: Sequence[ChangeResult], path: Path) -> Path:
    """One line per change and metric: its pairs, n, mean, sd, the per-seed values (`seed:value`,
    `;`-separated), the paper's change, and on the marked metric's line the p-values and mark."""
    marked = marked_metric(table)
    rows: list[list] = [["change", "of", "metric", "n", "mean", "std", "values", "paper", "p_values", "mark"]]
    for result in results:
        for metric, effect in result.effects.items():
            tested = result.tested if metric == marked else None
            rows.append([result.change.name, result.change.label(), metric, len(effect.seeds),
                         raw_cell(effect.mean if effect.seeds else None), raw_cell(effect.sd),
                         ";".join(f"{seed}:{value!r}" for seed, value in effect.seeds.items()),
                         raw_cell(effect.paper), ";".join(repr(p) for p in tested.p_values) if tested else "",
                         tested.mark if tested else ""])
    write_csv_atomically(path, rows)
    return path
