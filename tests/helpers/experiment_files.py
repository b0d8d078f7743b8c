"""The experiment YAMLs of experiments/: every one but the configs of the archived runs
(experiments/measured/, lightning_docmt/tables/runner.py); among them the table files and the grid
files that lay tables out (lightning_docmt/tables/grid.py)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from lightning_docmt.config.yaml_file import YamlFile
from lightning_docmt.tables.runner import ARCHIVE_DIRNAME
from lightning_docmt.tables.spec import is_grid_file, is_table_file, load_table
from tests.helpers.paths import EXPERIMENTS


def experiment_files() -> list[Path]:
    return sorted(p for p in EXPERIMENTS.rglob("*.yaml")
                  if ARCHIVE_DIRNAME not in p.relative_to(EXPERIMENTS).parts)


@cache
def table_files() -> dict[str, Path]:
    """Table id -> its YAML, for every table file among experiment_files()."""
    return {load_table(p).id: p for p in experiment_files() if is_table_file(YamlFile.load(p))}


@cache
def grid_files() -> dict[str, Path]:
    """Grid id -> its YAML, for every grid file among experiment_files()."""
    from lightning_docmt.tables.grid import load_grid

    return {load_grid(p).id: p for p in experiment_files() if is_grid_file(YamlFile.load(p))}
