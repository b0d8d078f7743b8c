"""The archive of measured runs, experiments/measured/ (lightning_docmt/tables/runner.py): every
archived run is complete, no checkpoint is committed, and every archived table rebuilds from its
runs alone with today's code and table files (no training: a config that no longer composes to the
archived one is an error here, as it is for `docmt table`)."""

from __future__ import annotations

import csv
import json
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest

from lightning_docmt.registry import import_all_archs
from lightning_docmt.tables.report import FINISHED
from lightning_docmt.tables.runner import ARCHIVE_DIRNAME, METRICS_FILE, run_table
from tests.experiment_files import EXPERIMENTS, table_files

REPO = EXPERIMENTS.parent
ARCHIVE = EXPERIMENTS / ARCHIVE_DIRNAME
RUN_FILES = ("config.yaml", METRICS_FILE, "test.hyp.txt", "test.ref.txt")


def archived_tables() -> list[Path]:
    return sorted(p for p in ARCHIVE.iterdir() if p.is_dir()) if ARCHIVE.is_dir() else []


def archived_runs(table_dir: Path) -> list[Path]:
    return sorted(p for p in table_dir.glob("*/seed*") if p.is_dir())


def test_the_archive_holds_runs():
    assert archived_tables() and all(archived_runs(t) for t in archived_tables())


@pytest.mark.parametrize("table_dir", archived_tables(), ids=lambda p: p.name)
def test_every_archived_run_is_complete(table_dir):
    assert table_dir.name in table_files(), f"{table_dir.name} is no table id of experiments/"
    for run in archived_runs(table_dir):
        for name in RUN_FILES:
            assert (run / name).is_file(), run / name
        hyps = (run / "test.hyp.txt").read_text(encoding="utf-8").split("\n")
        refs = (run / "test.ref.txt").read_text(encoding="utf-8").split("\n")
        assert len(hyps) == len(refs) > 100, run
        assert isinstance(json.loads((run / METRICS_FILE).read_text())["test/bleu"], float), run


def test_no_checkpoint_is_committed():
    tracked = subprocess.run(["git", "ls-files", str(ARCHIVE)], cwd=REPO, check=True,
                             capture_output=True, text=True).stdout.split()
    assert tracked and not [p for p in tracked if p.endswith(".ckpt") or "/checkpoints/" in p]


@pytest.mark.parametrize("table_dir", archived_tables(), ids=lambda p: p.name)
def test_an_archived_table_rebuilds_without_training(table_dir, tmp_path):
    """Rebuilding the table from a copy of its archive trains nothing, finds every archived run, and
    reports their mean and the significance of each row against the baseline."""
    import_all_archs()
    results = tmp_path / "results"
    shutil.copytree(table_dir, results / table_dir.name)
    seeds = sorted({int(run.name.removeprefix("seed")) for run in archived_runs(table_dir)})
    path = table_files()[table_dir.name]
    rows = sorted({run.parent.name for run in archived_runs(table_dir)})

    def no_training(cfg, run_dir):
        raise AssertionError(f"{run_dir} is not archived: it would be trained")

    outcome = run_table(path, rows=",".join(rows), seeds=seeds, run_row=no_training, results_dir=results)
    assert outcome.records and {r.status for r in outcome.records} == {FINISHED}
    with open(outcome.outputs["csv"], newline="") as f:
        cells = {(r["row"], r["metric"]): r for r in csv.DictReader(f)}
    for row in rows:
        bleus = [json.loads((run / METRICS_FILE).read_text())["test/bleu"]
                 for run in archived_runs(table_dir) if run.parent.name == row]
        assert float(cells[(row, "test/bleu")]["mean"]) == pytest.approx(statistics.mean(bleus))
    baseline = outcome.table.baseline
    if baseline in rows:  # every other archived row is tested against it, seed by seed
        tested = [row for row in rows if row != baseline]
        assert all(cells[(row, "test/bleu")].get("p_values") for row in tested), cells
