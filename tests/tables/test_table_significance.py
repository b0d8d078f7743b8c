"""Significance marks of a table (`tables/row_significance.py`): every row's test BLEU against the
`baseline:` row, paired bootstrap per seed, marked only when significant in every seed.

The runs are fakes (tests/tables/fake_runs.py) that write hand-made hypotheses: the baseline drops
about half the words of each reference, `better` is the reference itself, `worse` keeps one word,
`same` is the baseline's output, and `lucky` is better with seed 1 only. `near` corrects just enough
baseline sentences to be significant in each seed, `near_split` one sentence fewer in seed 2: a cell
at the threshold.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from lightning_docmt.errors import DocMTInputError
from lightning_docmt.tables.runner import run_table
from lightning_docmt.tables.spec import load_table
from tests.tables.fake_runs import NEAR, ROWS, TABLE, fake_run, p_value


@pytest.fixture
def table_file(tmp_path: Path) -> Path:
    path = tmp_path / "sig.yaml"
    path.write_text(yaml.safe_dump(TABLE, sort_keys=False))
    return path


@pytest.mark.parametrize("evaluate", ["test", "valid_report"])
def test_marks_need_significance_in_every_seed(table_file, tmp_path, evaluate):
    """The same marks whether the rows report on test or, as `evaluate: valid_report` has them, on
    valid (their `valid.hyp.txt`, in the `valid/bleu` column)."""
    split = "valid" if evaluate == "valid_report" else "test"
    table_file.write_text(yaml.safe_dump({**TABLE, "evaluate": evaluate, "metrics": [f"{split}/bleu"]},
                                         sort_keys=False))
    run_table(table_file, run_row=fake_run, results_dir=tmp_path / "results")
    out = tmp_path / "results" / "unit.sig"
    lines = {r["row"]: r for r in csv.DictReader((out / "table.csv").open())}
    marks = {row: lines[row]["mark"] for row in ROWS}
    assert marks == {"baseline": "", "better": "↑", "worse": "↓", "same": "", "lucky": "",
                     "near": "↑", "near_split": ""}
    p = {row: [float(v) for v in lines[row]["p_values"].split(";") if v] for row in ROWS}
    assert p["baseline"] == [] and p["same"] == [1.0, 1.0]
    assert all(v < 0.05 for v in p["better"] + p["worse"])
    assert p["lucky"][0] < 0.05 and p["lucky"][1] == 1.0
    # at the threshold: the table's p-values are the paired test's, seed by seed
    assert p["near"] == pytest.approx([p_value(seed, NEAR[seed]) for seed in (1, 2)])
    assert all(v < 0.05 for v in p["near"]) and p["near_split"][0] < 0.05 <= p["near_split"][1]
    markdown = (out / "table.md").read_text()
    assert next(text for text in markdown.splitlines() if text.startswith("| better |")).count("↑") == 1
    assert "baseline row `baseline`" in markdown and "METEOR are case-insensitive." in markdown
    assert f"↑/↓: {split}/bleu significantly" in markdown
    assert ("the test split was never read" in markdown) == (evaluate == "valid_report")
    assert not list((tmp_path / "results").rglob(f"{'test' if split == 'valid' else 'valid'}.hyp.txt"))


def test_a_valid_report_table_shows_valid_scores_only(table_file):
    table_file.write_text(yaml.safe_dump({**TABLE, "evaluate": "valid_report"}, sort_keys=False))
    with pytest.raises(DocMTInputError, match="metric 'test/bleu' is not a valid/ metric"):
        load_table(table_file)


def test_the_baseline_must_name_a_row(table_file):
    table_file.write_text(yaml.safe_dump({**TABLE, "baseline": "nope"}, sort_keys=False))
    with pytest.raises(DocMTInputError, match="'baseline' must name a row"):
        load_table(table_file)
