"""What a table's columns can be: `contrastive:<suite>[:<key>]` columns (tables/contrastive_columns.py)
and selection tables scored on valid only (`evaluate: valid`)."""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest
import yaml
from omegaconf import OmegaConf

from lightning_docmt.data import synthetic
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.evaluation import contrastive_scoring
from lightning_docmt.tables.contrastive_columns import column_value
from lightning_docmt.tables.runner import run_table
from lightning_docmt.tables.spec import compose_row, load_table
from lightning_docmt.training.run import run_validation_metrics
from tests.helpers.paths import CONTRASTIVE_SUITES
from tests.helpers.run_env import single_process_run_env

SUITES = CONTRASTIVE_SUITES


def write_table(tmp_path: Path, **changes) -> Path:
    table = {"id": "unit.columns", "title": "Columns", "base": ["model.arch=transformer", "profile=tiny"],
             "metrics": ["test/bleu", "contrastive:scat", "contrastive:scat:random_ctx/accuracy",
                         "contrastive:corpus"],
             "rows": [{"name": "a", "overrides": ["eval.contrastive=[scat]"]}, {"name": "b"}]}
    table.update(changes)
    path = tmp_path / "columns.yaml"
    path.write_text(yaml.safe_dump(table, sort_keys=False))
    return path


def test_every_row_gets_the_suites_of_the_columns_once(tmp_path):
    table = write_table(tmp_path)
    assert list(compose_row(table, "a").eval.contrastive) == ["scat", "corpus"]
    assert list(compose_row(table, "b").eval.contrastive) == ["scat", "corpus"]


def fake_run(cfg, run_dir: Path) -> dict:
    """Two suites: the metrics carry the suite names, as evaluation/contrastive_scoring.py names them."""
    assert list(cfg.eval.contrastive) == ["scat", "corpus"]
    bonus = 0.1 if cfg.logging.name == "a" else 0.0
    return {"test/bleu": 10.0, "contrastive/scat/accuracy": 0.6 + bonus,
            "contrastive/scat/random_ctx/accuracy": 0.55, "contrastive/scat/chance": 0.5,
            "contrastive/scat/majority": 0.701, "contrastive/corpus/accuracy": 0.9,
            "contrastive/corpus/chance": 0.5, "contrastive/corpus/majority": 0.5}


def test_columns_read_the_suite_named_metrics_and_the_footnote_gives_the_rates(tmp_path):
    outcome = run_table(write_table(tmp_path), run_row=fake_run, results_dir=tmp_path / "r")
    markdown = Path(outcome.outputs["md"]).read_text()
    assert "| a | 10.00 (n=1) | 0.70 (n=1) | 0.55 (n=1) | 0.90 (n=1) | ok |" in markdown  # no paper: no column
    assert "| b | 10.00 (n=1) | 0.60 (n=1) |" in markdown
    assert "- `contrastive:scat`: chance 0.500, majority 0.701" in markdown
    assert "- `contrastive:corpus`: chance 0.500, majority 0.500" in markdown


def test_a_run_with_one_suite_names_its_metrics_without_it(tmp_path):
    table = write_table(tmp_path, metrics=["contrastive:corpus"],
                        rows=[{"name": "a"}])

    def one_suite(cfg, run_dir):
        assert list(cfg.eval.contrastive) == ["corpus"]
        return {"contrastive/accuracy": 0.8, "contrastive/chance": 0.5, "contrastive/majority": 0.5}

    outcome = run_table(table, run_row=one_suite, results_dir=tmp_path / "r")
    assert "| a | 0.80 (n=1) |" in Path(outcome.outputs["md"]).read_text()


def test_cxmi_columns_show_four_decimals_and_scores_two(tmp_path):
    """A CXMI of 1.2e-4 nats per token is not 0.00, and a context-blind row's 0 keeps the same four decimals."""
    table = write_table(tmp_path, metrics=["test/bleu", "cxmi", "random_ctx/cxmi"],
                        rows=[{"name": "a"}, {"name": "b"}])

    def run(cfg, run_dir):
        used = cfg.logging.name == "a"
        return {"test/bleu": 10.123, "cxmi": 0.00012 if used else 0.0,
                "random_ctx/cxmi": -0.00004 if used else 0.0}

    markdown = Path(run_table(table, run_row=run, results_dir=tmp_path / "r").outputs["md"]).read_text()
    assert "| a | 10.12 (n=1) | 0.0001 (n=1) | -0.0000 (n=1) |" in markdown
    assert "| b | 10.12 (n=1) | 0.0000 (n=1) | 0.0000 (n=1) |" in markdown


def test_an_empty_suite_in_a_column_is_one_error_naming_the_line(tmp_path):
    with pytest.raises(DocMTInputError, match="expected contrastive:<suite>") as err:
        load_table(write_table(tmp_path, metrics=["test/bleu", "contrastive:"]))
    assert err.value.line is not None


@pytest.mark.parametrize("changes, match", [
    ({"metrics": ["val/bleu", "test/bleu"]}, "metric 'test/bleu' is neither a val/ metric"),
    ({"metrics": ["val/bleu", "contrastive:scat"]}, "metric 'contrastive:scat' is neither"),  # a test set
    ({"metrics": ["val/bleu"], "baseline": "a"}, "'baseline' tests test BLEU"),
    ({"evaluate": "train"}, "'evaluate' must be one of test, valid"),
])
def test_a_selection_table_shows_nothing_measured_on_test(tmp_path, changes, match):
    with pytest.raises(DocMTInputError, match=match):
        load_table(write_table(tmp_path, **{"evaluate": "valid", **changes}))


@pytest.mark.fit
def test_a_selection_row_trains_and_reports_its_validation_curve_without_touching_test(tmp_path):
    """Also the corpus' own contrastive suite, scored on the valid split's items (`val/contrastive/...`)."""
    table = write_table(tmp_path, evaluate="valid",
                        metrics=["val/bleu", "val/bleu@10", "val/bleu@20", "contrastive:corpus"],
                        base=["model.arch=transformer", "profile=tiny", "data.corpus=synthetic:tiny?docs=20",
                              f"data.cache_dir={tmp_path / 'cache'}", "train.max_steps=20",
                              "train.val_every_steps=10", "logging.wandb=false"])
    cfg = compose_row(table, "b")
    seen = []
    original = contrastive_scoring.score_suite
    def recording(model, examples):
        seen.append(examples)
        return original(model, examples)

    with single_process_run_env(), mock.patch.object(contrastive_scoring, "score_suite", recording):
        scores = run_validation_metrics(cfg, tmp_path / "run")
    suite = {ex["id"] for ex in seen[0]}
    assert suite == {ex["id"] for ex in synthetic.contrastive_suite("tiny?docs=20", split="valid")}
    assert suite.isdisjoint(ex["id"] for ex in synthetic.contrastive_suite("tiny?docs=20"))  # not test's
    contrastive_keys = {k for k in scores if "contrastive" in k}
    assert contrastive_keys and all(k.startswith("val/contrastive/") for k in contrastive_keys)
    assert column_value(scores, "contrastive:corpus") == scores["val/contrastive/accuracy"]
    scores = {k: v for k, v in scores.items() if k not in contrastive_keys}
    assert set(scores) == {"val/bleu", "val/bleu@10", "val/bleu@20"}
    assert scores["val/bleu"] == max(scores["val/bleu@10"], scores["val/bleu@20"])  # the best is kept
    assert not list((tmp_path / "run").rglob("test*"))  # no test decoding, no test files
    done = next((tmp_path / "cache").rglob("done.json"))
    assert [step for step, _ in json.loads(done.read_text())["validation"]] == [10, 20]


@pytest.mark.parametrize("entry", ["scat", "suite.jsonl"])
def test_scoring_on_valid_refuses_a_test_suite_naming_the_key(tmp_path, entry):
    """A published suite or a suite file is a test set: nothing may be chosen by reading it."""
    cfg = OmegaConf.create({"eval": {"contrastive": [entry]}, "data": {}})
    with pytest.raises(DocMTInputError, match=f"'{entry}' is a test set") as err:
        contrastive_scoring.configured_suites(cfg, "valid")
    assert "key 'eval.contrastive'" in str(err.value)


@pytest.mark.fit
def test_a_selection_row_that_never_validates_reports_its_last_checkpoints_suite(tmp_path):
    """Without a validation during training the stage hands on its last step: no val/bleu, but the
    valid split's suite of that checkpoint."""
    table = write_table(tmp_path, evaluate="valid", metrics=["contrastive:corpus"],
                        base=["model.arch=transformer", "profile=tiny", "data.corpus=synthetic:tiny?docs=20",
                              f"data.cache_dir={tmp_path / 'cache'}", "train.max_steps=4",
                              "train.val_every_steps=100000", "logging.wandb=false"])
    with single_process_run_env():
        scores = run_validation_metrics(compose_row(table, "b"), tmp_path / "run")
    assert "val/bleu" not in scores and 0.0 <= scores["val/contrastive/accuracy"] <= 1.0
