"""`docmt demo`'s budgets (cli/demo.py): what they run, and that the table says which one ran."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from lightning_docmt.cli import demo
from lightning_docmt.cli.demo_answer import demo_answer
from lightning_docmt.config.registry import import_all_archs
from lightning_docmt.inference.loaded_model import load_checkpoint
from lightning_docmt.schedules import lr_lambda
from lightning_docmt.tables.row_significance import RowSignificance
from lightning_docmt.tables.runner import run_table
from lightning_docmt.tables.spec import compose_row, load_table
from lightning_docmt.tables.summaries import DONE, RunRecord, summarize
from lightning_docmt.training.stages import check_stages, stage_config
from lightning_docmt.training.trainer import stage_steps

# Keys that do not change the sentence model's weights (where data and caches live, evaluation-time batching)
IRRELEVANT = {"data": ("cache_dir", "num_workers", "eval_max_tokens")}


@pytest.mark.parametrize("budget", [demo.SHIPPED, demo.FROM_SCRATCH, demo.QUICK], ids=["shipped", "scratch", "quick"])
def test_every_row_of_a_budget_trains_as_long_after_the_shared_transformer(budget):
    import_all_archs()
    table = load_table(demo.DEMO_TABLE)
    further = set()
    for row in budget.rows:
        cfg = compose_row(table, row, "cpu", demo.row_overrides(budget, row))
        last = cfg.train.schedule[-1]
        start = str(demo.SHIPPED_MODEL) if budget.shipped_start else "sent"
        assert list(cfg.train.schedule) == ([last] if budget.shipped_start else ["sent", last])
        assert cfg.train.stages[last].init_from == start
        further.add(cfg.train.stages[last].max_steps)
        for name in cfg.train.schedule:  # every stage's schedule is usable at this length
            optim, scfg = stage_config(cfg, name).train.optim, stage_config(cfg, name)
            lr_lambda(schedule=optim.schedule, lr=optim.lr, d_model=scfg.model.d_model,
                      warmup=optim.warmup_steps, stage_steps=stage_steps(scfg, name))
        check_stages(cfg)  # nor does a stage continue a decayed schedule (trap K9)
    assert len(further) == 1 and further.pop() == (20 if budget is demo.QUICK else 300)  # the table's 300


def test_the_default_demo_keeps_the_most_telling_rows_as_the_table_trains_them_and_says_so():
    assert demo.SHIPPED.rows == ("transformer", "concat")
    assert demo.SHIPPED.overrides == ("eval.random_context_decodes=false",)  # scoring only: training as the table
    assert "sentence_model.ckpt" in demo.SHIPPED.preface and "docmt table experiments/demo.yaml" in demo.SHIPPED.preface
    assert "SMOKE RUN" in demo.QUICK.preface and "mean nothing" in demo.QUICK.preface


def test_the_shipped_sentence_model_is_the_demo_tables_sentence_stage():
    """Re-export it (experiments/demo/README.md) when the table's sentence stage changes."""
    import_all_archs()
    shipped = load_checkpoint(demo.SHIPPED_MODEL)
    table_sent = stage_config(compose_row(load_table(demo.DEMO_TABLE), "transformer", "cpu"), "sent")
    for section in ("data", "vocab", "model"):
        ours = OmegaConf.to_container(table_sent[section], resolve=True)
        theirs = OmegaConf.to_container(shipped.cfg[section], resolve=True)
        # keys added to the code since the export left the model as it was at their defaults
        differing = {k for k in theirs if k not in IRRELEVANT.get(section, ()) and ours.get(k) != theirs[k]}
        assert not differing, (section, differing)
    assert len(shipped.src_vocab) == table_sent.vocab.size


def test_the_preface_is_written_into_the_report(tmp_path):
    def fake(cfg, run_dir: Path) -> dict:
        return {"test/bleu": 1.0, "test/chrf": 2.0, "cxmi": 0.0, "random_ctx/bleu_delta": 0.0}

    outcome = run_table(demo.DEMO_TABLE, rows=["transformer"], profile="cpu", run_row=fake,
                        results_dir=tmp_path, preface=demo.QUICK.preface)
    markdown = Path(outcome.outputs["md"]).read_text()
    assert demo.QUICK.preface in markdown
    assert "Not run: `concat`, `zhang_doc`, `flat`, `coattn`." in markdown  # rows left out, named once


def answer_of(tmp_path: Path, metrics: dict[str, dict[int, dict]], tested: dict) -> str:
    records = [RunRecord(row, seed, tmp_path / row / f"seed{seed}", DONE, m)
               for row, by_seed in metrics.items() for seed, m in by_seed.items()]
    return demo_answer(summarize(load_table(demo.DEMO_TABLE), records), tested)


def test_the_answer_says_whether_concat_helps_and_whether_it_reads_its_sentence(tmp_path):
    base = {1: {"test/bleu": 20.0}, 2: {"test/bleu": 22.0}}
    reading = {1: {"test/bleu": 21.0, "cxmi": 0.03, "random_ctx/cxmi": 0.01},
               2: {"test/bleu": 23.5, "cxmi": 0.02, "random_ctx/cxmi": 0.004}}
    answer = answer_of(tmp_path, {"transformer": base, "concat": reading},
                       {"concat": RowSignificance(p_values=(0.01, 0.002), deltas=(1.0, 1.5), seeds=(1, 2))})
    assert "Answer (2 seeds)" in answer and "+1.25 test BLEU" in answer and "significantly better" in answer
    assert "p = 0.010, 0.002" in answer and "It reads what that sentence says" in answer
    blind = {seed: {**m, "random_ctx/cxmi": -0.001 if seed == 2 else 0.001} for seed, m in reading.items()}
    answer = answer_of(tmp_path, {"transformer": base, "concat": blind},
                       {"concat": RowSignificance(p_values=(0.3, 0.04), deltas=(1.0, 1.5), seeds=(1, 2))})
    assert "not significantly different" in answer and "It does not read what that sentence says" in answer
    assert "none yet" in answer_of(tmp_path, {"transformer": base}, {})
