"""Grid files (`tables/grid.py`): part tables laid out as the paper prints them, one line per part
and one column per row, with each part's significance marks and the paper's numbers.

The runs are the fakes of tests/tables/fake_runs.py (hand-made hypotheses: `better` is the
reference, `worse` one word, the baseline half the words), so the marks are known in advance.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest
import yaml

from lightning_docmt.errors import DocMTInputError
from lightning_docmt.evaluation.context_usage import METRIC_MEANINGS
from lightning_docmt.tables.grid import load_grid, run_grid
from tests.helpers.cli_run import docmt
from tests.helpers.experiment_files import EXPERIMENTS
from tests.tables.fake_runs import fake_run

ROWS = ("baseline", "better", "worse")


def part_table(table_id: str, paper: float) -> dict:
    return {"id": table_id, "title": table_id, "metrics": ["test/bleu", "test/chrf"],
            "base": ["profile=tiny", "eval.lowercase=true"], "seeds": [1, 2], "baseline": "baseline",
            "rows": [{"name": name, "overrides": [], "paper": {"test/bleu": paper + i}}
                     for i, name in enumerate(ROWS)]}


GRID = {"id": "unit.grid", "title": "A grid", "metrics": ["test/bleu"],
        "parts": [{"name": "x-y", "table": "part_a.yaml"}, {"name": "y-x", "table": "part_b.yaml"}],
        "notes": "two directions"}


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path


@pytest.fixture
def grid_file(tmp_path: Path) -> Path:
    write(tmp_path / "part_a.yaml", part_table("unit.part_a", 10.0))
    write(tmp_path / "part_b.yaml", part_table("unit.part_b", 20.0))
    return write(tmp_path / "grid.yaml", GRID)


def recording(calls: list):
    def run(cfg, run_dir):
        calls.append((cfg.logging.group, cfg.logging.name, cfg.train.seed))
        return fake_run(cfg, run_dir)
    return lambda table: run


def csv_cells(path: Path) -> dict[tuple[str, str], dict]:
    return {(r["part"], r["row"]): r for r in csv.DictReader(path.open())}


def test_a_grid_has_a_line_per_part_a_column_per_row_and_each_parts_marks(grid_file, tmp_path):
    calls: list = []
    outcome = run_grid(grid_file, row_runner=recording(calls), results_dir=tmp_path / "results")
    assert len(calls) == 2 * len(ROWS) * 2  # parts x rows x seeds
    cells = csv_cells(outcome.outputs["csv"])
    assert {cell["mark"] for key, cell in cells.items() if key[1] == "better"} == {"↑"}
    assert {cell["mark"] for key, cell in cells.items() if key[1] == "worse"} == {"↓"}
    assert cells[("y-x", "better")]["mean"] == repr(float(len("better")))  # fake_run's BLEU
    assert float(cells[("y-x", "worse")]["paper"]) == 22.0 and cells[("x-y", "worse")]["n"] == "2"
    assert len(cells[("x-y", "better")]["p_values"].split(";")) == 2
    deltas = [float(d) for d in cells[("x-y", "better")]["deltas"].split(";")]
    assert len(deltas) == 2 and all(d > 20 for d in deltas)  # the reference vs. half its words
    assert cells[("x-y", "baseline")]["deltas"] == cells[("x-y", "baseline")]["mark"] == ""
    assert outcome.outputs["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the grid's own figure
    markdown = (tmp_path / "results" / "unit.grid" / "table.md").read_text()
    lines = markdown.splitlines()
    assert "| Part | baseline | better | worse |" in lines
    line = next(text for text in lines if text.startswith("| x-y |"))
    better, worse = line.split(" | ")[2], line.split(" | ")[3]
    assert f"↑ Δ +{statistics.mean(deltas):.2f} ± {statistics.stdev(deltas):.2f}" in better
    assert "↓ Δ -" in worse and "Δ" not in line.split(" | ")[1]  # the baseline has none
    assert lines[lines.index(line) + 1] == "| paper | 10.00 | 11.00 | 12.00 |"
    assert "[unit.part_a](../unit.part_a/table.md)" in markdown and "two directions" in markdown
    assert (tmp_path / "results" / "unit.part_b" / "table.md").is_file()  # each part's own report


def test_a_grid_explains_its_context_columns_and_only_those(grid_file, tmp_path):
    run_grid(grid_file, row_runner=recording([]), results_dir=tmp_path / "plain")
    assert "Context columns" not in (tmp_path / "plain" / "unit.grid" / "table.md").read_text()
    for part in ("part_a", "part_b"):
        table = yaml.safe_load((tmp_path / f"{part}.yaml").read_text())
        write(tmp_path / f"{part}.yaml", {**table, "metrics": [*table["metrics"], "cxmi"]})
    write(grid_file, {**GRID, "metrics": ["test/bleu", "cxmi"]})
    run_grid(grid_file, row_runner=recording([]), results_dir=tmp_path / "results")
    lines = (tmp_path / "results" / "unit.grid" / "table.md").read_text().splitlines()
    legend = lines.index("Context columns (on the test split):")
    assert lines[legend + 2:legend + 4] == [f"- `cxmi`: {METRIC_MEANINGS['cxmi']}", ""]


def test_the_grid_reuses_the_significance_tests_of_the_parts_that_ran(grid_file, tmp_path,
                                                                      monkeypatch):
    """The paired bootstrap is the costly part of a report: once per part, whether it ran now
    (its results come from `run_table`) or earlier (tested from its runs on disk)."""
    from lightning_docmt.tables import runner

    tested = []
    real = runner.row_significance
    monkeypatch.setattr(runner, "row_significance",
                        lambda summaries, baseline: tested.append(baseline) or real(summaries, baseline))
    results = tmp_path / "results"
    run_grid(grid_file, parts="x-y", row_runner=recording([]), results_dir=results)
    assert len(tested) == 2  # x-y by run_table; y-x (nothing on disk yet) by the grid
    tested.clear()
    run_grid(grid_file, row_runner=recording([]), results_dir=results)
    assert len(tested) == 2  # each part once, by its run_table


def test_parts_run_separately_fill_one_grid(grid_file, tmp_path):
    calls: list = []
    results = tmp_path / "results"
    run_grid(grid_file, parts="y-x", row_runner=recording(calls), results_dir=results)
    assert {group for group, _, _ in calls} == {"unit.part_b"}
    markdown = (results / "unit.grid" / "table.md").read_text()
    assert next(text for text in markdown.splitlines() if text.startswith("| x-y |")).count("n/a") == 3
    assert "unit.part_a (no report yet)" in markdown
    calls.clear()
    outcome = run_grid(grid_file, parts="x-y,y-x", row_runner=recording(calls), results_dir=results)
    assert {group for group, _, _ in calls} == {"unit.part_a"}  # part b's runs are finished
    assert all(cell["n"] == "2" for cell in csv_cells(outcome.outputs["csv"]).values())


def test_dry_run_prints_the_fit_commands_of_every_selected_part(grid_file, tmp_path):
    outcome = docmt("table", grid_file, "--dry-run", "--parts", "y-x", "--results", tmp_path / "r")
    commands = outcome.out.strip().splitlines()
    assert outcome.code == 0 and len(commands) == len(ROWS) * 2
    assert all("part_b.yaml" in c and "--row" in c and f"--results {tmp_path / 'r'} " in c for c in commands)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("edit, expected", [
    (lambda g, d: g["parts"].append({"name": "x-y", "table": "part_a.yaml"}), "duplicate part name"),
    (lambda g, d: g["parts"].append({"name": "z", "table": "nope.yaml"}), "no table file 'nope.yaml'"),
    (lambda g, d: g.update(metrics=["test/bleu", "cxmi"]), "metric 'cxmi' is not among"),
    (lambda g, d: g.update(colour="red"), "unknown grid key 'colour'"),
    (lambda g, d: g["parts"][1].update(rows="all"), "exactly 'name' and 'table'"),
    (lambda g, d: write(d / "part_b.yaml", {**part_table("unit.part_b", 0.0), "rows": [
        {"name": n, "overrides": []} for n in ("baseline", "worse", "better")]}),
     "its rows (baseline, worse, better) differ from those of part 'x-y'"),
])
def test_bad_grid_files_name_file_and_line(grid_file, edit, expected):
    grid = yaml.safe_load(grid_file.read_text())
    edit(grid, grid_file.parent)
    write(grid_file, grid)
    with pytest.raises(DocMTInputError) as err:
        load_grid(grid_file)
    assert expected in str(err.value) and f"{grid_file}:" in str(err.value)


def test_the_cli_refuses_parts_of_a_table_and_fit_of_a_grid(grid_file, tmp_path):
    of_table = docmt("table", grid_file.parent / "part_a.yaml", "--parts", "x-y", "--dry-run")
    assert of_table.code == 2 and "--parts applies to grid files only" in of_table.err
    fit = docmt("fit", grid_file, "--results", tmp_path / "r")
    assert fit.code == 2 and "a grid of table files" in fit.err and len(fit.err.strip().splitlines()) == 1
    unknown = docmt("table", grid_file, "--parts", "x-z", "--dry-run")
    assert unknown.code == 2 and "no part 'x-z' (did you mean 'x-y'?)" in unknown.err


def test_yamagishi_table_2_grid_holds_every_pair_file_of_the_paper():
    grid = load_grid(EXPERIMENTS / "yamagishi" / "t2_bleu.yaml")
    assert {part.table.path.name for part in grid.parts} == {
        p.name for p in (EXPERIMENTS / "yamagishi").glob("t2_*_*.yaml")}
    assert grid.columns == ("baseline", "sep_src", "sep_tgt", "sh_src", "sh_tgt", "sh_mix")
    assert all(part.table.baseline == "baseline" for part in grid.parts)
