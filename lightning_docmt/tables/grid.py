"""Grid files: a paper table laid out as the paper prints it, one line per part table (docs/design.md
section 3).

Some papers print an ablation as a grid. Yamagishi & Komachi's Table 2 has one line per language
pair and direction and one column per configuration. Here each line is a table file of its own,
with its own corpus, baseline row, seeds and significance tests. A grid file lists those table
files, and `docmt table GRID.yaml` runs them and writes the grid:

    id: yamagishi.t2                      # the grid's results folder
    title: RNN with source/target/mix context (Yamagishi & Komachi 2019, Table 2)
    metrics: [test/bleu, cxmi]            # one grid per metric; every part must have it
    parts:                                # the grid's lines, in order
      - {name: de-en, table: t2_de_en.yaml}   # a table file, relative to this file
    notes: free text                      # optional

Every part has the same row names in the same order: they are the grid's columns. A cell holds the
part's mean ± sample sd over its finished seeds, with the part's significance mark for test BLEU
(↑/↓ against that part's baseline row in every seed, tables/row_significance.py). The line below each
part gives the paper's numbers, taken from the part's rows (`paper:`), so they are written once.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Callable, Mapping, Sequence

from lightning_docmt.atomic_files import write_csv_atomically, write_text_atomically
from lightning_docmt.config.yaml_file import YamlFile
from lightning_docmt.distributed import is_global_zero
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.tables.effects import metric_panel
from lightning_docmt.tables.figures import write_grid_chart
from lightning_docmt.tables.report import (
    context_columns_legend,
    decimals,
    marked_metric,
    number_cell,
    ours_cell,
    raw_cell,
    run_provenance,
)
from lightning_docmt.tables.row_significance import RowSignificance
from lightning_docmt.tables.runner import RunRow, TableOutcome, TableResults, run_table, table_results
from lightning_docmt.tables.spec import SAFE_NAME, Table, hint, load_table, read_spec_file
from lightning_docmt.tables.summaries import MetricSummary, RowSummary

GRID_KEYS = ("id", "title", "metrics", "parts", "notes")
PART_KEYS = ("name", "table")


@dataclass(frozen=True)
class GridPart:
    name: str
    table: Table


@dataclass(frozen=True)
class Grid:
    file: YamlFile
    id: str
    title: str
    metrics: tuple[str, ...]
    parts: tuple[GridPart, ...]
    notes: str

    @property
    def path(self) -> Path:
        return self.file.path

    @property
    def marked_metric(self) -> str:
        """The column that carries the significance marks (the parts report on one split)."""
        return marked_metric(self.parts[0].table)

    @property
    def columns(self) -> tuple[str, ...]:
        """The row names that every part shares, in table order."""
        return tuple(row.name for row in self.parts[0].table.rows)

    def select(self, names: str | Sequence[str] = "all") -> list[GridPart]:
        """`'all'`, a comma-separated string of part names, or a list of them (kept in grid order)."""
        if isinstance(names, str):
            if names == "all":
                return list(self.parts)
            names = [name.strip() for name in names.split(",") if name.strip()]
        known = [part.name for part in self.parts]
        for name in names:
            if name not in known:
                raise DocMTInputError(f"no part '{name}'{hint(name, known)}", path=self.path)
        return [part for part in self.parts if part.name in names]


@dataclass
class GridOutcome:
    """The outcome of every part table that ran, and the grid's report files (`md`, `csv`)."""

    grid: Grid
    parts: list[TableOutcome] = field(default_factory=list)
    outputs: dict[str, Path] = field(default_factory=dict)

    @property
    def commands(self) -> list[str]:
        return [command for outcome in self.parts for command in outcome.commands]


def load_grid(path: str | Path) -> Grid:
    """Parse and validate a grid file and every part table it names."""
    spec = read_spec_file(path, "grid", GRID_KEYS, ("parts",))
    file, data, metrics, fail = spec.file, spec.data, spec.metrics, spec.fail
    if not (isinstance(data["parts"], list) and data["parts"]):
        raise fail("'parts' must be a non-empty list of {name, table}", "parts")
    parts: list[GridPart] = []
    for i, raw in enumerate(data["parts"]):
        if not (isinstance(raw, dict) and set(raw) == set(PART_KEYS)):
            raise fail(f"parts[{i}] must be a mapping with exactly 'name' and 'table'", "parts", i)
        name, table_path = raw["name"], raw["table"]
        if not (isinstance(name, str) and SAFE_NAME.match(name)):
            raise fail(f"parts[{i}]: 'name' must be a name of letters, digits and _.+- , got "
                       f"{name!r}", "parts", i, "name")
        if name in (part.name for part in parts):
            raise fail(f"part '{name}': duplicate part name", "parts", i, "name")
        if not (isinstance(table_path, str) and (file.path.parent / table_path).is_file()):
            raise fail(f"part '{name}': no table file {table_path!r} next to the grid file",
                       "parts", i, "table")
        table = load_table(file.path.parent / table_path)
        missing = [metric for metric in metrics if metric not in table.metrics]
        if missing:
            raise fail(f"part '{name}': metric '{missing[0]}' is not among the metrics of "
                       f"{table.path} ({', '.join(table.metrics)})", "metrics")
        columns = [row.name for row in table.rows]
        if parts and columns != [row.name for row in parts[0].table.rows]:
            raise fail(f"part '{name}': its rows ({', '.join(columns)}) differ from those of part "
                       f"'{parts[0].name}' ({', '.join(r.name for r in parts[0].table.rows)}); the "
                       "grid's columns are the rows every part shares, in one order",
                       "parts", i, "table")
        parts.append(GridPart(name=name, table=table))
    return Grid(file=file, id=data["id"], title=data["title"], metrics=tuple(metrics),
                parts=tuple(parts), notes=spec.notes)


def run_grid(grid_path: str | Path, parts: str | Sequence[str] = "all", rows: str | Sequence[str] = "all",
             seeds: Sequence[int] | None = None, profile: str | None = None,
             cli_overrides: Sequence[str] = (), row_runner: Callable[[Table], RunRow] | None = None,
             results_dir: str | Path = "results", dry_run: bool = False,
             device: str | None = None) -> GridOutcome:
    """Run the selected rows of the selected parts (`run_table`, each part into its own results
    folder), then write the grid of every part from the runs on disk (`write_grid`): parts run by
    earlier calls, or on other machines, fill the same grid. `row_runner(part table)` gives the
    `run_row` of a part (a selection table scores on valid); `device`: as `run_table`'s."""
    grid = load_grid(grid_path)
    outcome = GridOutcome(grid=grid)
    for part in grid.select(parts):
        run_row = row_runner(part.table) if row_runner is not None else None
        outcome.parts.append(run_table(part.table.path, rows=rows, seeds=seeds, profile=profile,
                                       cli_overrides=cli_overrides, run_row=run_row,
                                       results_dir=results_dir, dry_run=dry_run, device=device))
    if not dry_run and is_global_zero():
        outcome.outputs = write_grid(grid, results_dir, seeds, known={
            o.table.id: o.results for o in outcome.parts if o.results is not None})
    return outcome


@dataclass(frozen=True)
class _Line:
    """One part of the grid: its row summaries and, per row other than the baseline, its test
    BLEU tested against the part's baseline seed by seed (absent where untested)."""

    part: GridPart
    results: TableResults

    @cached_property
    def summaries(self) -> dict[str, RowSummary]:
        return {s.row.name: s for s in self.results.summaries}

    @property
    def tested(self) -> dict[str, RowSignificance]:
        return self.results.tested

    def mark(self, row: str) -> str:
        return self.tested[row].mark if row in self.tested else ""

    def paired_delta(self, row: str) -> str:
        """`Δ mean ± sd` of the row's BLEU minus its baseline's, seed by seed: each seed's context
        rows start from that seed's baseline stage, so seed-to-seed spread of the baseline itself
        (large when training is short) cancels here but not in the means."""
        if row not in self.tested:
            return ""
        deltas = MetricSummary(values=self.tested[row].deltas, paper=None)
        spread = f" ± {deltas.std:.2f}" if deltas.std is not None else ""
        return f"Δ {deltas.mean:+.2f}{spread}"


def write_grid(grid: Grid, results_dir: str | Path, seeds: Sequence[int] | None = None, *,
               known: Mapping[str, TableResults] | None = None) -> dict[str, Path]:
    """`results/<grid id>/table.{md,csv,png}` from the runs on disk of every part; trains nothing.
    A part's seeds are those its own report uses: `seeds`, else its table's `seeds:`, else every
    seed found. `known`: part results that `run_table` has just computed (by table id), so that
    their significance tests are not run again."""
    known = known or {}
    lines = [_Line(part=part, results=known.get(part.table.id) or table_results(
                 part.table, results_dir, seeds or part.table.seeds))
             for part in grid.parts]
    out_dir = Path(results_dir) / grid.id
    out_dir.mkdir(parents=True, exist_ok=True)
    return {"md": _write_markdown(grid, lines, out_dir), "csv": _write_csv(grid, lines, out_dir),
            "png": _write_chart(grid, lines, out_dir)}


def _write_chart(grid: Grid, lines: Sequence[_Line], out_dir: Path) -> Path:
    """`table.png`: per metric, each part's rows as its own table's figure shows them (changes
    against the part's baseline for a score, tables/effects.py), the parts side by side."""
    parts = [(line.part.name, [metric_panel([s for s in line.results.summaries if s.ran],
                                            metric, line.part.table.baseline) for metric in grid.metrics])
             for line in lines]
    marks = {line.part.name: {row: t.mark for row, t in line.tested.items()} for line in lines}
    return write_grid_chart(grid.title, parts, grid.columns, grid.metrics, out_dir / "table.png", marks=marks,
                            marked_metric=grid.marked_metric)


def _write_markdown(grid: Grid, lines: Sequence[_Line], out_dir: Path) -> Path:
    columns = grid.columns
    text = [f"# {grid.title}", "",
            f"Grid `{grid.id}` (`{grid.path}`): one line per part table, one column per row. Ours: "
            "mean ± sample standard deviation over the part's finished seeds (n). ↑/↓: "
            f"{grid.marked_metric} significantly better/worse than the part's baseline row (paired "
            "bootstrap, p < 0.05) in every seed; Δ: the row's minus the baseline's, seed by seed "
            "(mean ± sd), which the spread of the baseline across seeds does not blur. The `paper` "
            "line under each part gives the paper's numbers."]
    for metric in grid.metrics:
        digits = decimals(metric)
        text += ["", f"## {metric}", "", "| Part | " + " | ".join(columns) + " |",
                 "|---|" + "---:|" * len(columns)]
        for line in lines:
            cells = []
            for column in columns:
                m = line.summaries[column].metrics[metric]
                extra = ([line.mark(column), line.paired_delta(column)]
                         if metric == grid.marked_metric else [])
                cells.append(" ".join([ours_cell(m, digits), *filter(None, extra)]))
            text.append(f"| {line.part.name} | " + " | ".join(cells) + " |")
            paper = [line.summaries[c].metrics[metric].paper for c in columns]
            if any(value is not None for value in paper):
                text.append("| paper | " + " | ".join(number_cell(v, digits) for v in paper) + " |")
    text += context_columns_legend(grid.metrics)
    text += ["", "Parts:", ""]
    for line in lines:
        table = line.part.table
        report = Path(os.path.relpath(out_dir.parent / table.id / "table.md", out_dir))
        statuses = Counter(s.status for s in line.summaries.values())
        baseline = f", baseline row `{table.baseline}`" if table.baseline else ""
        name = (f"[{table.id}]({report.as_posix()})" if (out_dir / report).is_file()
                else f"{table.id} (no report yet)")
        text.append(f"- `{line.part.name}`: {name} "
                    f"(`{table.path.name}`{baseline}; rows: "
                    + ", ".join(f"{n} {status}" for status, n in sorted(statuses.items())) + ")")
    provenance = run_provenance([replace(r, row=f"{line.part.name}/{r.row}") for line in lines
                                 for s in line.summaries.values() for r in s.records if r.succeeded])
    if provenance:
        text += ["", "Runs (numbers from different precisions or code are not bit-comparable):", ""]
        text += provenance
    if grid.notes:
        text += ["", "Notes:", "", grid.notes.strip()]
    path = out_dir / "table.md"
    write_text_atomically(path, "\n".join(text) + "\n")
    return path


def _write_csv(grid: Grid, lines: Sequence[_Line], out_dir: Path) -> Path:
    """One line per part, row and metric; on test BLEU lines, per seed (`;`-separated) the
    `p_values` and `deltas` against the part's baseline row, and the `mark`."""
    path = out_dir / "table.csv"
    rows: list[list] = [["part", "row", "metric", "n", "mean", "std", "paper", "status", "p_values",
                         "deltas", "mark"]]
    for line in lines:
        for column in grid.columns:
            summary = line.summaries[column]
            for metric in grid.metrics:
                m = summary.metrics[metric]
                tested = line.tested.get(column) if metric == grid.marked_metric else None
                rows.append([
                    line.part.name, column, metric, m.n, raw_cell(m.mean), raw_cell(m.std),
                    raw_cell(m.paper), summary.status,
                    ";".join(map(repr, tested.p_values)) if tested else "",
                    ";".join(map(repr, tested.deltas)) if tested else "",
                    tested.mark if tested else ""])
    write_csv_atomically(path, rows)
    return path
