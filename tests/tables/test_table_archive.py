"""Archiving a table's runs (`tables/archive.py`, `docmt archive`): finished runs only, without
checkpoints, line files compressed and read back as they were, the report rebuilt from the archive
with the same marks, a run replaced whole (never half-written), bad input one line and status 2.

The runs are the significance fakes (tests/tables/fake_runs.py), whose marks are known."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pytest
import yaml

import lightning_docmt.tables.archive as archive
from lightning_docmt.line_files import read_lines
from lightning_docmt.tables.runner import run_table
from tests.helpers.cli_run import docmt
from tests.tables.fake_runs import REFERENCES, TABLE, fake_run, hypotheses

ROWS = "baseline,better,worse"


@pytest.fixture
def table_file(tmp_path: Path) -> Path:
    path = tmp_path / "sig.yaml"
    path.write_text(yaml.safe_dump(TABLE, sort_keys=False))
    return path


@pytest.fixture
def results(table_file: Path, tmp_path: Path) -> Path:
    """Three rows x seeds 1, 2 finished, with a checkpoint and Lightning's hparams beside them."""
    out = tmp_path / "results"
    run_table(table_file, rows=ROWS, run_row=fake_run, results_dir=out)
    stage = out / "unit.sig" / "better" / "seed1" / "doc"
    (stage / "checkpoints").mkdir(parents=True)
    (stage / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    (stage / "hparams.yaml").write_text("a: 1\n")
    (stage / "metrics.csv").write_text("step,loss\n1,2.0\n")
    return out


def marks(table_dir: Path) -> dict[str, tuple[str, str]]:
    with open(table_dir / "table.csv", newline="") as f:
        return {r["row"]: (r["mark"], r["p_values"]) for r in csv.DictReader(f) if r["metric"] == "test/bleu"}


def test_an_archived_table_keeps_its_runs_and_marks_in_compressed_files(table_file, results, tmp_path):
    """...and the grid file beside it that lays it out gets its report rebuilt in the archive."""
    grid = {"id": "unit.grid", "title": "Grid", "metrics": ["test/bleu"],
            "parts": [{"name": "only", "table": "sig.yaml"}]}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(grid, sort_keys=False))
    to = tmp_path / "measured"
    outcome = archive.archive_table(table_file, results, to)
    assert outcome.grids == [to / "unit.grid" / "table.md"] and outcome.grids[0].is_file()
    runs = sorted(p.relative_to(to).as_posix() for p in outcome.archived)
    assert runs == [f"unit.sig/{row}/seed{s}" for row in sorted(ROWS.split(",")) for s in (1, 2)]
    assert outcome.unfinished == []
    run = to / "unit.sig" / "better" / "seed1"
    names = {p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file()}
    assert names == {"config.yaml", "log.txt", "metrics.json", "test.hyp.txt.gz", "test.ref.txt.gz",
                     "doc/metrics.csv"}  # no checkpoint, no hparams.yaml, no plain line file
    assert read_lines(run / "test.ref.txt") == REFERENCES
    assert read_lines(run / "test.hyp.txt") == hypotheses("better", 1)
    assert marks(to / "unit.sig") == marks(results / "unit.sig")  # significance from the archive alone
    assert marks(to / "unit.sig")["worse"][0] == "↓"


def test_archiving_again_gives_the_same_bytes_and_leaves_out_unfinished_runs(table_file, results, tmp_path):
    to = tmp_path / "measured"
    archive.archive_table(table_file, results, to, rows="better", seeds=[1])
    first = (to / "unit.sig" / "better" / "seed1" / "test.hyp.txt.gz").read_bytes()
    assert gzip.decompress(first).decode().splitlines() == hypotheses("better", 1)
    (results / "unit.sig" / "better" / "seed3").mkdir()  # started, never finished
    outcome = archive.archive_table(table_file, results, to, rows="better")
    assert outcome.unfinished == [results / "unit.sig" / "better" / "seed3"]
    assert not (to / "unit.sig" / "better" / "seed3").exists()
    assert (to / "unit.sig" / "better" / "seed1" / "test.hyp.txt.gz").read_bytes() == first


def test_an_interrupted_archive_leaves_the_archived_run_as_it_was(table_file, results, tmp_path, monkeypatch):
    to = tmp_path / "measured"
    archive.archive_table(table_file, results, to, rows="better", seeds=[1])
    run = to / "unit.sig" / "better" / "seed1"
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    (results / "unit.sig" / "better" / "seed1" / "test.hyp.txt").write_text("changed\n" * len(REFERENCES))

    def killed(source, target):
        raise KeyboardInterrupt  # stands for a kill between two files of the copy

    monkeypatch.setattr(archive, "write_compressed", killed)
    with pytest.raises(KeyboardInterrupt):
        archive.archive_table(table_file, results, to, rows="better", seeds=[1])
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    monkeypatch.undo()
    archive.archive_table(table_file, results, to, rows="better", seeds=[1])  # the leftover is cleared
    assert read_lines(run / "test.hyp.txt") == ["changed"] * len(REFERENCES)
    assert sorted(p.name for p in run.parent.iterdir()) == ["seed1"]


def test_docmt_archive_prints_the_runs_and_refuses_an_empty_selection(table_file, results, tmp_path):
    done = docmt("archive", table_file, "--rows", "baseline,worse", "--seeds", "1",
                 "--results", results, "--to", tmp_path / "measured")
    assert done.code == 0, done.err
    assert done.out.count("archived ") == 2 and "table.md" in done.out
    empty = docmt("archive", table_file, "--rows", "same", "--results", results, "--to", tmp_path / "measured")
    assert empty.code == 2
    assert len(empty.err.strip().splitlines()) == 1 and "no finished run" in empty.err
    assert "sig.yaml" in empty.err


def test_a_rebuilt_report_covers_rows_of_different_seeds_and_is_written_once(table_file, results, tmp_path,
                                                                            monkeypatch):
    """Rows archived with different seeds are checked a seed set at a time (nothing trains), and the
    costly report (significance, figures) is written once, covering them all."""
    import lightning_docmt.tables.runner as runner

    to = tmp_path / "measured"
    archive.archive_table(table_file, results, to, rows="baseline,worse")
    archive.archive_table(table_file, results, to, rows="better", seeds=[1])
    written = []
    monkeypatch.setattr(runner, "write_markdown", lambda *a, **k: written.append(a[2]) or a[2])
    outcome = archive.rebuild_report(table_file, to)
    assert written == [to / "unit.sig" / "table.md"]
    reported = {(s.row.name, r.seed) for s in outcome.results.summaries for r in s.records}
    assert reported == {("better", 1), ("baseline", 1), ("baseline", 2), ("worse", 1), ("worse", 2)}
    assert set(outcome.results.tested) == {"better", "worse"}
