"""A table's curve (`curve:`, tables/curve.py): the points are the rows' seed means at the x each run
reports, the figure and its CSV are written beside the table, and a bad curve is one error naming it."""

from __future__ import annotations

import csv

import pytest
import yaml

from lightning_docmt.errors import DocMTInputError
from lightning_docmt.tables.curve import Curve, curve_points
from lightning_docmt.tables.runner import run_table
from lightning_docmt.tables.spec import load_table
from tests.helpers.stand_in_archs import CTX

PAIRS = {"base": 1000, "quarter": 250, "half": 500, "whole": 1000}


def table(curve: dict) -> dict:
    return {"id": "unit.curve", "title": "Data-size curve", "metrics": ["test/bleu"],
            "base": [f"model.arch={CTX}", "profile=tiny"], "seeds": [1, 2], "curve": curve,
            "rows": [{"name": name, "overrides": [f"model.context_layers={i + 1}"]} for i, name in enumerate(PAIRS)]}


CURVE = {"metric": "test/bleu", "x": "data/train_pairs", "x_label": "pairs", "log_x": True, "baseline": "base",
         "series": {"context": ["quarter", "half", "whole"]}, "marks": [{"x": 3000, "label": "paper threshold"}]}


def fake(cfg, run_dir):
    row, seed = cfg.logging.name, cfg.train.seed
    return {"test/bleu": PAIRS[row] / 100 + seed, "data/train_pairs": PAIRS[row]}


def test_the_curve_is_each_rows_seed_mean_at_its_reported_x(tmp_path, stand_in_archs):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(table(CURVE)))
    outcome = run_table(path, run_row=fake, results_dir=tmp_path / "results")
    assert outcome.outputs["curve_png"].stat().st_size > 0
    with open(outcome.outputs["curve_csv"], newline="") as f:
        rows = {r["row"]: r for r in csv.DictReader(f)}
    assert list(rows) == ["base", "quarter", "half", "whole"]
    assert rows["base"]["series"] == "baseline" and rows["half"]["series"] == "context"
    assert float(rows["quarter"]["x"]) == 250 and float(rows["quarter"]["mean"]) == pytest.approx(2.5 + 1.5)
    assert float(rows["whole"]["sd"]) == pytest.approx(0.7071067811865476) and rows["whole"]["seeds"] == "2"


def test_a_run_without_the_x_or_the_metric_gives_no_point():
    curve = Curve(metric="m", x="x", x_label="x", series={"s": ("a", "b")})
    points = curve_points(curve, {"a": [{"m": 1.0}, {"m": 2.0, "x": 5}], "b": [{"x": 3}]})
    assert [(p.row, p.x, p.mean, p.sd, p.seeds) for p in points] == [("a", 5.0, 2.0, None, 1)]


@pytest.mark.parametrize("change, message", [
    ({"metric": "test/chrf"}, "not one of the table's metrics"),
    ({"baseline": "nope"}, "curve baseline 'nope' is not a row"),
    ({"series": {"context": ["quarter", "other"]}}, "'other' is not a row"),
    ({"marks": [{"x": "far", "label": "a"}]}, "a curve mark is"),
    ({"colour": "red"}, "unknown curve key 'colour'"),
])
def test_a_bad_curve_is_one_error_naming_its_line(tmp_path, change, message):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(table({**CURVE, **change}), sort_keys=False))
    with pytest.raises(DocMTInputError, match=message) as error:
        load_table(path)
    assert error.value.line is not None
