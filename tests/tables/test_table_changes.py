"""Changes between rows (`changes:` in a table file, tables/changes.py and change_results.py): the
paper's stated steps and mean gains, measured seed by seed on the finished runs, one-pair changes
tested by paired bootstrap.

The runs are the significance table's fakes (tests/tables/fake_runs.py): a run's `test/bleu` is its
row name's length, so every change's value is known in advance, and its hypotheses are hand-made,
so every mark is: `better` is the reference itself, `worse` keeps one word, `same` is the
baseline's output, `lucky` is better with seed 1 only. `lucky` fails seed 2 here, so a change that
reads it has seed 1 only.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from lightning_docmt.errors import DocMTInputError
from lightning_docmt.tables.runner import run_table
from lightning_docmt.tables.spec import load_table
from tests.tables.fake_runs import TABLE, fake_run

CHANGES = [
    {"name": "better_step", "of": [["better", "baseline"]], "paper": {"test/bleu": 2.25}, "notes": "stated"},
    {"name": "worse_step", "of": [["worse", "same"]]},
    {"name": "lucky_step", "of": [["lucky", "baseline"]], "paper": {"test/bleu": None}},
    {"name": "family_mean", "of": [["better", "baseline"], ["worse", "same"]], "paper": {"test/bleu": 1.58}},
    {"name": "with_lucky", "of": [["better", "baseline"], ["lucky", "baseline"]]},
]


def run_lucky_fails_seed_2(cfg, run_dir: Path) -> dict:
    if cfg.logging.name == "lucky" and cfg.train.seed == 2:
        raise RuntimeError("this run fails")
    return fake_run(cfg, run_dir)


def written_table(tmp_path: Path, **keys) -> Path:
    path = tmp_path / "changes.yaml"
    path.write_text(yaml.safe_dump({**TABLE, **keys}, sort_keys=False))
    return path


def test_changes_are_measured_seed_by_seed_and_one_pair_changes_are_tested(tmp_path):
    table_file = written_table(tmp_path, changes=CHANGES)
    outcome = run_table(table_file, run_row=run_lucky_fails_seed_2, results_dir=tmp_path / "results")
    lines = {r["change"]: r for r in csv.DictReader(outcome.outputs["changes_csv"].open())}
    assert list(lines) == [c["name"] for c in CHANGES]
    # test/bleu is the row name's length: better 6, baseline 8, worse 5, same 4, lucky 5
    values = {name: {int(s): float(v) for s, v in (kv.split(":") for kv in line["values"].split(";") if kv)}
              for name, line in lines.items()}
    assert values == {"better_step": {1: -2.0, 2: -2.0}, "worse_step": {1: 1.0, 2: 1.0},
                      "lucky_step": {1: -3.0}, "family_mean": {1: -0.5, 2: -0.5},
                      "with_lucky": {1: -2.5}}  # the mean never mixes seeds: seed 2 lacks lucky
    assert lines["family_mean"]["of"] == "mean(better − baseline, worse − same)"
    assert [lines[n]["paper"] for n in ("better_step", "lucky_step", "family_mean")] == ["2.25", "", "1.58"]
    # marks from the hypotheses' paired bootstrap, in every seed both rows finished (lucky: seed 1,
    # where it is the references); means are not tested
    assert {n: lines[n]["mark"] for n in lines} == {"better_step": "↑", "worse_step": "↓", "lucky_step": "↑",
                                                   "family_mean": "", "with_lucky": ""}
    assert len(lines["better_step"]["p_values"].split(";")) == 2 and lines["lucky_step"]["p_values"].count(";") == 0
    assert lines["family_mean"]["p_values"] == "" and lines["with_lucky"]["n"] == "1"
    markdown = outcome.outputs["md"].read_text()
    row = next(text for text in markdown.splitlines() if text.startswith("| better_step |"))
    assert "better − baseline" in row and "-2.00 ± 0.00 (n=2) ↑" in row and "+2.25" in row
    family = next(text for text in markdown.splitlines() if text.startswith("| family_mean |"))
    assert "-0.50 ± 0.00 (n=2) |" in family and family.endswith("| +1.58 | — |")
    assert "- `better_step`: stated" in markdown


def test_a_table_without_changes_writes_no_changes_file(tmp_path):
    outcome = run_table(written_table(tmp_path), run_row=fake_run, results_dir=tmp_path / "results")
    assert "changes_csv" not in outcome.outputs and "Changes between rows" not in outcome.outputs["md"].read_text()
    assert not (tmp_path / "results" / "unit.sig" / "changes.csv").exists()


@pytest.mark.parametrize("changes, message", [
    ([{"name": "x", "of": [["better", "nope"]]}], "change 'x': no row 'nope'"),
    ([{"name": "x", "of": [["better", "better"]]}], "row 'better' is measured against itself"),
    ([{"name": "x", "of": [["better"]]}], "'of' must be a non-empty list of \\[row, against\\] pairs"),
    ([{"name": "x", "of": []}], "'of' must be a non-empty list"),
    ([{"name": "x", "of": [["better", "baseline"]], "paper": {"test/chrf": 1.0}}],
     "paper change for 'test/chrf', which is not in the table's metrics"),
    ([{"name": "x", "of": [["better", "baseline"]], "paper": {"test/bleu": "big"}}], "must be a number or null"),
    ([{"name": "x", "of": [["better", "baseline"]], "against": "baseline"}], "unknown key 'against'"),
    ([{"name": "x", "of": [["better", "baseline"]]}, {"name": "x", "of": [["worse", "baseline"]]}],
     "change 'x': duplicate change name"),
    ([], "'changes' must be a non-empty list"),
])
def test_a_bad_change_is_one_error_naming_the_file_and_line(tmp_path, changes, message):
    table_file = written_table(tmp_path, changes=changes)
    with pytest.raises(DocMTInputError, match=message) as err:
        load_table(table_file)
    assert str(err.value).startswith(f"{table_file}:") and err.value.line is not None
    assert err.value.line > len(yaml.safe_dump(TABLE, sort_keys=False).splitlines())  # in the changes section
