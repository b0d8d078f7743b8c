"""The archive of measured runs, experiments/measured/ (lightning_docmt/tables/runner.py,
tables/archive.py): every archived run is complete, its line files are compressed, no checkpoint is
committed, and every archived table rebuilds from its runs alone with today's code and table files
(no training: a config that no longer composes to the archived one is an error here, as it is for
`docmt table`)."""

from __future__ import annotations

import csv
import json
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest

from lightning_docmt.config.pretraining import (
    ARCHIVED_ENCODERS,
    DONE_FILE,
    archived_dir,
    is_pretraining_file,
    load_pretrain_config,
    pretrain_key,
)
from lightning_docmt.config.registry import import_all_archs
from lightning_docmt.config.yaml_file import YamlFile
from lightning_docmt.line_files import read_lines
from lightning_docmt.tables.archive import COMPRESSED_SUFFIXES, rebuild_report
from lightning_docmt.tables.contrastive_columns import column_value
from lightning_docmt.tables.grid import load_grid, write_grid
from lightning_docmt.tables.report import marked_metric
from lightning_docmt.tables.runner import ARCHIVE_DIRNAME, METRICS_FILE
from lightning_docmt.tables.spec import load_table
from lightning_docmt.tables.summaries import FINISHED
from tests.helpers.experiment_files import EXPERIMENTS, experiment_files, grid_files, table_files

REPO = EXPERIMENTS.parent
ARCHIVE = EXPERIMENTS / ARCHIVE_DIRNAME
SELECTION_RUN_FILES = ("config.yaml", METRICS_FILE)  # `evaluate: valid`: the test split never decoded


def evaluated_split(table_dir: Path) -> str:
    """`test`, `valid` (a selection table) or `valid_report` (the valid split decoded as a test split is)."""
    return load_table(table_files()[table_dir.name]).evaluate


def is_selection_table(table_dir: Path) -> bool:
    return evaluated_split(table_dir) == "valid"


SUPERSEDED = ARCHIVE / "superseded"  # tables measured with a replaced recipe or controls, kept as measured
PRETRAINED = ARCHIVE / ARCHIVED_ENCODERS.name  # encoders pretrained in the project (`docmt archive PRETRAINING.yaml`)


def archived_tables() -> list[Path]:
    """The archived tables' folders; the grids' reports (tables/grid.py) are in folders of their own,
    superseded tables in `superseded/` and pretrained encoders in `pretrained/`."""
    if not ARCHIVE.is_dir():
        return []
    return sorted(p for p in ARCHIVE.iterdir()
                  if p.is_dir() and p.name not in grid_files() and p not in (SUPERSEDED, PRETRAINED))


def archived_encoders() -> list[Path]:
    return sorted(p for p in PRETRAINED.iterdir() if p.is_dir()) if PRETRAINED.is_dir() else []


def archived_grids() -> list[Path]:
    return sorted(ARCHIVE / grid_id for grid_id in grid_files() if (ARCHIVE / grid_id).is_dir())


def archived_runs(table_dir: Path) -> list[Path]:
    return sorted(p for p in table_dir.glob("*/seed*") if p.is_dir())


def test_the_archive_holds_runs():
    assert archived_tables() and all(archived_runs(t) for t in archived_tables())


@pytest.mark.parametrize("table_dir", archived_tables(), ids=lambda p: p.name)
def test_every_archived_run_is_complete(table_dir):
    """A test row has its outputs and test BLEU; a selection row (`evaluate: valid`) its valid
    scores and nothing of the test split; a `valid_report` row the outputs and BLEU of the valid
    split and nothing of the test split."""
    assert table_dir.name in table_files(), f"{table_dir.name} is no table id of experiments/"
    split = evaluated_split(table_dir)
    for run in archived_runs(table_dir):
        metrics = json.loads((run / METRICS_FILE).read_text())
        if split == "valid":
            assert all((run / name).is_file() for name in SELECTION_RUN_FILES), run
            assert any(k.startswith("val/") for k in metrics), run
            assert not [k for k in metrics if k.startswith("test/")] and not list(run.glob("test*")), run
            continue
        decoded = "valid" if split == "valid_report" else "test"
        for name in ("config.yaml", METRICS_FILE, f"{decoded}.hyp.txt.gz", f"{decoded}.ref.txt.gz"):
            assert (run / name).is_file(), run / name
        hyps, refs = read_lines(run / f"{decoded}.hyp.txt"), read_lines(run / f"{decoded}.ref.txt")
        assert len(hyps) == len(refs) > 100, run
        assert isinstance(metrics[f"{decoded}/bleu"], float), run
        if split == "valid_report":
            assert not [k for k in metrics if k.startswith("test/")] and not list(run.glob("test*")), run


def test_superseded_tables_are_explained_and_never_mixed_into_their_successors():
    """Every superseded table is named in `superseded/README.md` with the commit that made it and
    holds its runs. Its successor (the namesake under `measured/<id>/`, re-measured from scratch)
    shares none of its runs: every run of the successor was composed from a different config than
    the superseded run of the same row and seed (the recipe that replaced it)."""
    readme = (SUPERSEDED / "README.md").read_text()
    superseded = sorted(p for p in SUPERSEDED.iterdir() if p.is_dir())
    assert superseded
    for table_dir in superseded:
        short = table_dir.name.split(".")[-1]
        assert f"`{table_dir.name}`" in readme or f"`_{short.removeprefix('t2_')}`" in readme, table_dir.name
        assert archived_runs(table_dir) or table_dir.name in grid_files(), table_dir
        successor = ARCHIVE / table_dir.name
        for old_run in archived_runs(table_dir):
            new_run = successor / old_run.relative_to(table_dir)
            if new_run.is_dir():
                assert (new_run / "config.yaml").read_text() != (old_run / "config.yaml").read_text(), new_run


@pytest.mark.parametrize("encoder", archived_encoders(), ids=lambda p: p.name)
def test_every_archived_encoder_is_found_by_its_pretraining_file(encoder):
    """An archived encoder is found by a pretraining file whose settings are the ones it was
    pretrained under (config/pretraining.finished_output): a file changed since would leave it
    unread, and this test names it. Complete: it holds what `docmt pretrain` writes."""
    files = {archived_dir(cfg).name: cfg for cfg in (load_pretrain_config(p) for p in experiment_files()
                                                     if is_pretraining_file(YamlFile.load(p)))}
    assert encoder.name in files, f"no pretraining file names {encoder.name} (settings changed since?)"
    record = json.loads((encoder / DONE_FILE).read_text())
    assert record["key"] == pretrain_key(files[encoder.name])
    assert {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt"} <= {p.name for p in encoder.iterdir()}


@pytest.mark.subprocess
def test_no_checkpoint_and_no_uncompressed_line_file_is_committed():
    """Archived as `docmt archive` archives (tables/archive.py): what would make a clone heavy
    (checkpoints, one plain copy of the references per run) stays out."""
    tracked = subprocess.run(["git", "ls-files", str(ARCHIVE)], cwd=REPO, check=True,
                             capture_output=True, text=True).stdout.split()
    assert tracked and not [p for p in tracked if p.endswith(".ckpt") or "/checkpoints/" in p]
    assert not [p for p in tracked if p.endswith(COMPRESSED_SUFFIXES)]


@pytest.mark.parametrize("table_dir", archived_tables(), ids=lambda p: p.name)
def test_an_archived_table_rebuilds_without_training(table_dir, tmp_path):
    """Rebuilding the table from a copy of its archive (`tables/archive.rebuild_report`, as
    `docmt archive` does) trains nothing, finds every archived run, and reports their mean and the
    significance of each row against the baseline."""
    import_all_archs()
    results = tmp_path / "results"
    shutil.copytree(table_dir, results / table_dir.name)
    seeds_of: dict[str, list[int]] = {}
    for run in archived_runs(table_dir):
        seeds_of.setdefault(run.parent.name, []).append(int(run.name.removeprefix("seed")))
    outcome = rebuild_report(table_files()[table_dir.name], results)
    assert outcome.records and {r.status for r in outcome.records} == {FINISHED}
    assert {(r.row, r.seed) for r in outcome.records} <= {(row, s) for row, ss in seeds_of.items() for s in ss}
    with open(outcome.outputs["csv"], newline="") as f:
        cells = {(r["row"], r["metric"]): r for r in csv.DictReader(f)}
    first_column = outcome.table.metrics[0]
    for row in seeds_of:
        values = [column_value(json.loads((run / METRICS_FILE).read_text()), first_column)
                  for run in archived_runs(table_dir) if run.parent.name == row]
        assert float(cells[(row, first_column)]["mean"]) == pytest.approx(statistics.mean(values))
    baseline = outcome.table.baseline
    if baseline in seeds_of:  # every other archived row is tested against it, seed by seed, on the
        tested = [row for row in seeds_of if row != baseline]  # BLEU of the split the table reports
        assert all(cells[(row, marked_metric(outcome.table))].get("p_values") for row in tested), cells
    changes = outcome.table.changes  # a stated change between two archived rows is measured and tested
    if changes:
        with open(outcome.outputs["changes_csv"], newline="") as f:
            measured = {(r["change"], r["metric"]): r for r in csv.DictReader(f)}
        for change in changes:
            line = measured[(change.name, marked_metric(outcome.table))]
            both = len(change.pairs) == 1 and all(
                set(seeds_of.get(row, ())) & set(seeds_of.get(against, ())) for row, against in change.pairs)
            assert bool(line["p_values"]) == both, (change.name, line)


@pytest.mark.parametrize("grid_id", sorted(grid_files()))
def test_an_archived_grid_is_what_its_archived_runs_give(grid_id, tmp_path):
    """A grid is archived once any of its part tables is, and the committed grid report equals the
    one written now from the archived runs of its parts (every seed found): a part table archived
    later must be followed by a rebuilt grid."""
    grid = load_grid(grid_files()[grid_id])
    parts = [part.table.id for part in grid.parts if (ARCHIVE / part.table.id).is_dir()]
    grid_dir = ARCHIVE / grid_id
    assert grid_dir.is_dir() == bool(parts), (grid_id, parts)
    if not parts:
        return  # nothing of it measured with today's recipe yet (a superseded grid: superseded/)
    results = tmp_path / "results"
    for part in parts:
        shutil.copytree(ARCHIVE / part, results / part)
    rebuilt = write_grid(grid, results)
    with open(rebuilt["csv"], newline="") as now, open(grid_dir / "table.csv", newline="") as committed:
        assert list(csv.DictReader(now)) == list(csv.DictReader(committed))
