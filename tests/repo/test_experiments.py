"""Every row of every experiments/**/*.yaml composes and validates with the real registry (no
training), at its own profile and at every profile (`docmt table --profile P`), and every stage's
trainable globs match parameters of its model (at its own profile and at `tiny`, the smallest
layer counts); plain run configs there compose too."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from lightning_docmt.config.composition import compose
from lightning_docmt.config.pretraining import is_pretraining_file, load_pretrain_config, output_dir
from lightning_docmt.config.registry import import_all_archs
from lightning_docmt.config.yaml_file import YamlFile
from lightning_docmt.tables.spec import Table, compose_row, is_grid_file, is_table_file, load_table
from lightning_docmt.training.stages import check_stages
from tests.helpers.experiment_files import EXPERIMENTS, experiment_files


def experiment_cases() -> list[tuple[Path, str | None]]:
    cases: list[tuple[Path, str | None]] = []
    for path in experiment_files():
        file = YamlFile.load(path)
        if is_grid_file(file) or is_pretraining_file(file):
            continue  # a grid's part tables are table files here too; pretraining files: below
        if is_table_file(file):
            cases += [(path, row.name) for row in table_of(path).rows]
        else:
            cases.append((path, None))
    return cases


@cache
def table_of(path: Path) -> Table:
    """The table file, loaded once for its rows x profiles (compose_row only reads it)."""
    return load_table(path)


def test_every_pretraining_file_loads_and_lands_in_its_own_directory():
    paths = [p for p in experiment_files() if is_pretraining_file(YamlFile.load(p))]
    configs = [load_pretrain_config(p) for p in paths]
    assert paths and len({output_dir(c) for c in configs}) == len(paths)


def test_there_are_experiment_files():
    assert (EXPERIMENTS / "demo.yaml").is_file() and experiment_cases()


@pytest.mark.parametrize("profile", [None, "tiny", "cpu", "paper"])
@pytest.mark.parametrize("path, row", experiment_cases(),
                         ids=lambda case: case.name if isinstance(case, Path) else str(case))
def test_experiment_composes(path, row, profile):
    import_all_archs()
    if row is None:
        cfg = compose(path, [], profile=profile)
    else:
        cfg = compose_row(table_of(path), row, profile)
        assert cfg.logging.name == row
    assert cfg.model.arch in import_all_archs()
    if profile in (None, "tiny"):  # parameter names do not depend on sizes beyond layer counts
        check_stages(cfg)  # a trainable glob matching no parameter fails here
    if profile is not None:
        assert cfg.profile == profile
