"""`docmt demo`'s budgets (cli/demo.py): what they run, and that the table says which one ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_docmt.cli import demo
from lightning_docmt.config.registry import import_all_archs
from lightning_docmt.schedules import lr_lambda
from lightning_docmt.tables.runner import run_table
from lightning_docmt.tables.spec import compose_row, load_table
from lightning_docmt.training.stages import check_stages, stage_config
from lightning_docmt.training.trainer import stage_steps


@pytest.mark.parametrize("budget", [demo.BUDGET, demo.QUICK], ids=["budget", "quick"])
def test_every_row_of_a_budget_trains_as_long_after_the_shared_transformer(budget):
    import_all_archs()
    table = load_table(demo.DEMO_TABLE)
    further = set()
    for row in budget.rows:
        cfg = compose_row(table, row, "cpu", list(budget.overrides))
        last = cfg.train.schedule[-1]
        assert cfg.train.schedule[0] == "sent" and cfg.train.stages[last].init_from == "sent"
        further.add(cfg.train.stages[last].max_steps)
        assert cfg.train.max_steps < 1800  # shorter than the table's own
        for name in cfg.train.schedule:  # every stage's schedule is usable at this length
            optim, scfg = stage_config(cfg, name).train.optim, stage_config(cfg, name)
            lr_lambda(schedule=optim.schedule, lr=optim.lr, d_model=scfg.model.d_model,
                      warmup=optim.warmup_steps, stage_steps=stage_steps(scfg, name))
        check_stages(cfg)  # nor does a stage continue a decayed schedule (trap K9)
    assert len(further) == 1 and further.pop() > 0


def test_the_fifteen_minute_budget_keeps_the_most_telling_rows_and_says_so():
    assert demo.BUDGET.rows == ("transformer", "concat")
    assert "greedy" in demo.BUDGET.preface and "docmt table experiments/demo.yaml" in demo.BUDGET.preface
    assert "SMOKE RUN" in demo.QUICK.preface and "mean nothing" in demo.QUICK.preface


def test_the_preface_is_written_into_the_report(tmp_path):
    def fake(cfg, run_dir: Path) -> dict:
        return {"test/bleu": 1.0, "test/chrf": 2.0, "cxmi": 0.0, "random_ctx/bleu_delta": 0.0}

    outcome = run_table(demo.DEMO_TABLE, rows=["transformer"], profile="cpu", run_row=fake,
                        results_dir=tmp_path, preface=demo.QUICK.preface)
    markdown = Path(outcome.outputs["md"]).read_text()
    assert demo.QUICK.preface in markdown
    assert "| concat |" in markdown and "not run" in markdown  # rows left out are shown as such
