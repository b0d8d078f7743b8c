"""Archive a table's finished runs and rebuild its report from the archive alone: `docmt archive`.

The archive (`experiments/measured/`, `runner.ARCHIVE_DIRNAME`) is a results directory committed
with the repository: the runs behind every number that `experiments/README.md` quotes. An archived
run is its results folder without what can be rebuilt or is too large to commit: checkpoints and
Lightning's `hparams.yaml` stay out, and the line files (`*.hyp.txt`, `*.ref.txt`) are gzip-compressed
(`line_files.py`; every reader takes either form). A run is copied into a temporary folder beside
its place and renamed into it, so an interrupted archive never leaves half a run where a reader
would trust it; re-archiving a run replaces it whole.

The report is then rebuilt from the archive with no training (`rebuild_report`): rows archived
with different seed sets (a sweep that ran some rows with more seeds) are rebuilt a seed set at a
time, the largest last, so the final report shows every row's finished runs among those seeds.
So is the report of every grid file beside the table file that lays it out (`tables/grid.py`).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from omegaconf import DictConfig

from lightning_docmt.config.yaml_file import YamlFile
from lightning_docmt.line_files import write_compressed
from lightning_docmt.tables.grid import Grid, load_grid, write_grid
from lightning_docmt.tables.runner import METRICS_FILE, TableOutcome, run_dir_for, run_table
from lightning_docmt.tables.spec import is_grid_file, load_table

COMPRESSED_SUFFIXES = (".hyp.txt", ".ref.txt")
LEFT_OUT_DIRS = ("checkpoints", "wandb")  # rebuildable or too large; wandb keeps its own copy
LEFT_OUT_FILES = ("hparams.yaml",)


@dataclass(frozen=True)
class ArchiveOutcome:
    table_id: str
    archived: list[Path]  # the archived runs' folders
    unfinished: list[Path]  # selected runs without metrics.json in the results folder: left out
    report: TableOutcome | None  # the rebuilt report (None when the archive holds no run of it)
    grids: list[Path]  # the rebuilt reports of the grids that lay the table out


def archive_table(table_path: str | Path, results_dir: str | Path, archive_dir: str | Path,
                  rows: str = "all", seeds: Sequence[int] | None = None) -> ArchiveOutcome:
    """Archive the finished runs of the selected rows and seeds (every seed found when None), then
    rebuild the table's report in the archive."""
    table = load_table(table_path)
    archived, unfinished = [], []
    for row in table.select(rows):
        row_dir = Path(results_dir) / table.id / row.name
        found = sorted(int(p.name[4:]) for p in row_dir.glob("seed*") if p.name[4:].isdigit())
        for seed in (found if seeds is None else seeds):
            run_dir = run_dir_for(results_dir, table.id, row.name, seed)
            if not (run_dir / METRICS_FILE).is_file():
                unfinished.append(run_dir)
                continue
            archived.append(archive_run(run_dir, run_dir_for(archive_dir, table.id, row.name, seed)))
    report = rebuild_report(table_path, archive_dir)
    grids = [write_grid(grid, archive_dir)["md"] for grid in grids_laying_out(table_path)]
    return ArchiveOutcome(table_id=table.id, archived=archived, unfinished=unfinished, report=report,
                          grids=grids)


def grids_laying_out(table_path: str | Path) -> list[Grid]:
    """The grid files in the table file's folder that have it as a part."""
    table_id = load_table(table_path).id
    grids = [load_grid(path) for path in sorted(Path(table_path).parent.glob("*.yaml"))
             if is_grid_file(YamlFile.load(path))]
    return [grid for grid in grids if any(part.table.id == table_id for part in grid.parts)]


def archive_run(run_dir: Path, target: Path) -> Path:
    """Copy one finished run into `target` (replaced whole), compressing its line files."""
    staging = target.with_name(f".{target.name}.archiving")
    shutil.rmtree(staging, ignore_errors=True)  # left by an interrupted archive
    for source in sorted(run_dir.rglob("*")):
        relative = source.relative_to(run_dir)
        if (not source.is_file() or source.name in LEFT_OUT_FILES or source.name.endswith(".tmp")
                or set(relative.parts) & set(LEFT_OUT_DIRS)):  # .tmp: a killed writer's (atomic_files.py)
            continue
        copy = staging / relative
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.name.endswith(COMPRESSED_SUFFIXES):
            write_compressed(source, copy.with_name(copy.name + ".gz"))
        else:
            shutil.copy2(source, copy)
    replaced = target.with_name(f".{target.name}.replaced")
    if target.exists():
        shutil.rmtree(replaced, ignore_errors=True)
        target.rename(replaced)
    staging.rename(target)
    shutil.rmtree(replaced, ignore_errors=True)
    return target


def rebuild_report(table_path: str | Path, archive_dir: str | Path) -> TableOutcome | None:
    """The table's report written from its archived runs, training nothing (a run that would need
    training is an error: the archive holds finished runs only) and logging nothing to wandb (the
    runs' own dashboards were made when they ran)."""
    table = load_table(table_path)
    seeds_of: dict[str, list[int]] = {}
    for run in sorted((Path(archive_dir) / table.id).glob("*/seed*")):
        if run.is_dir() and run.name[4:].isdigit():
            seeds_of.setdefault(run.parent.name, []).append(int(run.name[4:]))
    rows_by_seeds: dict[tuple[int, ...], list[str]] = {}
    for row, row_seeds in sorted(seeds_of.items()):
        rows_by_seeds.setdefault(tuple(sorted(row_seeds)), []).append(row)
    outcome = None
    groups = sorted(rows_by_seeds.items(), key=lambda item: len(item[0]))  # most seeds last
    for i, (seed_set, rows) in enumerate(groups):  # the report, once: with the last group's seeds
        outcome = run_table(table_path, rows=",".join(rows), seeds=list(seed_set),
                            run_row=_refuse_training, results_dir=archive_dir,
                            cli_overrides=["logging.wandb=false"], write_report=i == len(groups) - 1)
    return outcome


def _refuse_training(cfg: DictConfig, run_dir: Path) -> dict:
    raise RuntimeError(f"{run_dir} is not a finished archived run: rebuilding a report trains nothing")
