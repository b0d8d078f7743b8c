"""What a report shows of each row: a score's change against the baseline row, seed by seed, beside
the paper's change (tables/effects.py, report.py); the learning curves of the runs, a stage shared
by several rows found in the run that trained it (tables/learning_curves.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from lightning_docmt.tables.effects import is_score, metric_label, metric_panel
from lightning_docmt.tables.figures import write_learning_curves
from lightning_docmt.tables.learning_curves import learning_curves
from lightning_docmt.tables.report import write_csv, write_markdown
from lightning_docmt.tables.spec import load_table
from lightning_docmt.tables.summaries import DONE, RunRecord, summarize

TABLE = {"id": "unit.effects", "title": "Effects", "metrics": ["test/bleu", "test/chrf", "cxmi"],
         "base": ["profile=tiny"], "baseline": "base",
         "rows": [{"name": "base", "paper": {"test/bleu": 30.0}},
                  {"name": "ctx", "paper": {"test/bleu": 31.5, "test/chrf": 50.0}},
                  {"name": "unrun"}]}
# seed -> row -> metrics: ctx beats base by 0.5 then 1.5 BLEU; the seeds' own levels differ by 3
METRICS = {1: {"base": {"test/bleu": 10.0, "test/chrf": 40.0, "cxmi": 0.0},
               "ctx": {"test/bleu": 10.5, "test/chrf": 40.2, "cxmi": 0.01}},
           2: {"base": {"test/bleu": 13.0, "test/chrf": 41.0, "cxmi": 0.0},
               "ctx": {"test/bleu": 14.5, "test/chrf": 41.6, "cxmi": 0.03}}}


@pytest.fixture
def summaries(tmp_path):
    path = tmp_path / "effects.yaml"
    path.write_text(yaml.safe_dump(TABLE, sort_keys=False))
    table = load_table(path)
    records = [RunRecord(row=row, seed=seed, run_dir=tmp_path / row / f"seed{seed}", status=DONE, metrics=m)
               for seed, rows in METRICS.items() for row, m in rows.items()]
    return table, summarize(table, records)


def test_a_score_is_the_rows_change_against_the_baseline_seed_by_seed(summaries):
    table, rows = summaries
    bleu = metric_panel(rows, "test/bleu", table.baseline)
    assert bleu.against == "base" and [e.row for e in bleu.effects] == ["ctx"]
    [ctx] = bleu.effects
    assert ctx.seeds == {1: 0.5, 2: 1.5}  # not the difference of means over unpaired seeds
    assert ctx.mean == pytest.approx(1.0) and ctx.sd == pytest.approx(0.7071, abs=1e-4)
    assert ctx.paper == pytest.approx(1.5)  # the paper's change: 31.5 - 30.0, not ours - paper
    cxmi = metric_panel(rows, "cxmi", table.baseline)  # measured against the row's own model
    assert cxmi.against is None and {e.row: e.mean for e in cxmi.effects} == {"base": 0.0, "ctx": 0.02}


def test_the_markdown_shows_changes_per_seed_values_and_names_rows_not_run_once(summaries, tmp_path):
    table, rows = summaries
    markdown = write_markdown(table, rows, tmp_path / "table.md").read_text()
    assert "| Row | test/bleu | Δ base | paper | paper Δ | test/chrf | Δ base | paper | paper Δ | cxmi | Status |" \
        in markdown
    assert "| base | 11.50 ± 2.12 (n=2) | — | 30.00 | — | 40.50 ± 0.71 (n=2) | — | n/a | — |" in markdown
    assert ("| ctx | 12.50 ± 2.83 (n=2) | +1.00 ± 0.71 | 31.50 | +1.50 | 40.90 ± 0.99 (n=2) | +0.40 ± 0.28 "
            "| 50.00 | n/a |") in markdown
    assert "| unrun |" not in markdown and "Not run: `unrun`." in markdown
    assert "| ctx | 10.50 | 14.50 | — |" in markdown  # test/bleu per seed


def test_the_csv_holds_per_seed_values_and_the_changes(summaries, tmp_path):
    table, rows = summaries
    lines = {(r["row"], r["metric"]): r for r in csv.DictReader(write_csv(table, rows, tmp_path / "t.csv").open())}
    bleu = lines[("ctx", "test/bleu")]
    assert bleu["values"] == "1:10.5;2:14.5"
    assert float(bleu["delta_base"]) == pytest.approx(1.0) and float(bleu["paper_delta_base"]) == 1.5
    assert lines[("ctx", "cxmi")]["delta_base"] == ""  # not a score: no change against the baseline


@pytest.mark.parametrize("metric, label, score", [
    ("test/bleu", "test BLEU", True), ("valid/chrf", "valid chrF", True), ("val/bleu@600", "val BLEU@600", True),
    ("cxmi", "CXMI (nats/token)", False), ("valid/random_ctx/cxmi", "valid random-context CXMI (nats/token)", False),
    ("random_ctx/bleu_delta", "random-context BLEU change", False),
    ("contrastive:corpus:pronoun_d1", "corpus: pronoun_d1 accuracy", True),
    ("contrastive:corpus:random_ctx/accuracy", "corpus: random-context accuracy", False),
    ("speed/train_tokens_per_s", "training target tokens/s", False)])
def test_axis_names_are_readable_and_only_scores_are_read_against_the_baseline(metric, label, score):
    assert (metric_label(metric), is_score(metric)) == (label, score)


def write_stage(run_dir: Path, name: str, key: str, steps: int, bleu_every: int) -> None:
    stage = run_dir / name
    stage.mkdir(parents=True)
    (stage / "stage.json").write_text(json.dumps({"key": key}))
    lines = ["step,train/loss,val/bleu"]
    lines += [f"{s},{5 - s / steps:.3f}," + (f"{s / 10}" if (s + 1) % bleu_every == 0 else "")
              for s in range(steps)]
    (stage / "metrics.csv").write_text("\n".join(lines) + "\n")


def test_learning_curves_lay_stages_end_to_end_and_find_a_reused_stage_by_its_key(tmp_path):
    trained, reusing = tmp_path / "a" / "seed1", tmp_path / "b" / "seed1"
    write_stage(trained, "sent", "k-sent", steps=100, bleu_every=50)
    write_stage(trained, "doc", "k-doc-a", steps=40, bleu_every=20)
    write_stage(reusing, "doc", "k-doc-b", steps=40, bleu_every=20)  # its `sent` was reused: no folder
    for run_dir, doc_key in ((trained, "k-doc-a"), (reusing, "k-doc-b")):
        (run_dir / "run.json").write_text(json.dumps({"stages": {
            "sent": {"key": "k-sent", "global_step": 100}, "doc": {"key": doc_key, "global_step": 40}}}))
    records = [RunRecord("a", 1, trained, DONE), RunRecord("b", 1, reusing, DONE)]
    curves = learning_curves(records)
    assert [c.row for c in curves] == ["a", "b"]
    for curve in curves:
        sent, doc = curve.stages
        assert (sent.key, sent.start, doc.start) == ("k-sent", 0, 100)
        assert [step for step, _ in sent.valid] == [50, 100] and [step for step, _ in doc.valid] == [120, 140]
        assert curve.valid_metric == "val/bleu"
    png = write_learning_curves("Effects", curves, tmp_path / "curves.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
