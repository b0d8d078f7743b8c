"""`docmt demo`: the demo table's question, answered by trained models on a laptop's budget.

The question (`experiments/demo.yaml`): does the previous source sentence help a Transformer on the
Bible (en-fr), and does a document model read what that sentence says? Every row of the table
starts from the same sentence-level Transformer (stage `sent`, the `cpu` profile's 1,800 steps)
and trains 300 further steps of its own. The sentence model is the costly part (most of an hour on
2 cores), so the project ships it: `experiments/demo/sentence_model.ckpt` is the table's own `sent`
stage, exported in bfloat16 (`docmt export`; its run, command and numbers are in
`experiments/demo/README.md`). Three ways to run:

- `docmt demo` (the default, about 15 minutes on 2 cores): the rows `transformer` and `concat`,
  each from the shipped sentence model, with the table's own further stage and decoding; of the
  controls, CXMI and random-context CXMI (the random-context BLEU's three beam searches are left
  out for the budget). Its rows are the table's rows (within the bfloat16 rounding of the start).
- `docmt demo --from-scratch`: the same two rows, the sentence model trained here too.
- `docmt demo --quick`: a smoke run of every row in a few minutes; untrained models.

The whole table, five rows: `docmt table experiments/demo.yaml`.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path

from lightning_docmt.resources import shipped_dir

DEMO_TABLE = shipped_dir("experiments") / "demo.yaml"
SHIPPED_MODEL = shipped_dir("experiments") / "demo" / "sentence_model.ckpt"
FURTHER_STAGE = {"transformer": "more"}  # the stage each row trains after `sent`; the others: "doc"
ROWS = ("transformer", "concat")  # the most telling pair: does reading the previous sentence help?


@dataclass(frozen=True)
class DemoBudget:
    rows: tuple[str, ...]
    overrides: tuple[str, ...]  # applied to every row; a stage a row lacks is left unused
    results: str  # results root, apart from the whole table's `results/`
    preface: str  # printed with the table and written into table.md
    shipped_start: bool = False  # the rows start from SHIPPED_MODEL instead of training `sent`


# The random-context BLEU and its floor cost three more beam searches of the test split (about 9 of
# concat's minutes on 2 cores); the teacher-forced CXMI passes that the answer reads stay.
BUDGET_OVERRIDES = ("eval.random_context_decodes=false",)
SHIPPED = DemoBudget(
    rows=ROWS, overrides=BUDGET_OVERRIDES, results="results-demo", shipped_start=True,
    preface=("Demo: rows transformer and concat of the demo table, each trained from the shipped "
             "sentence-level Transformer (experiments/demo/sentence_model.ckpt: the table's own 1,800-step "
             "stage `sent`, exported in bfloat16) exactly as in the table (300 further steps, beam 4), "
             "scored as there but for the random-context BLEU decodes (CXMI and random-context CXMI "
             "are kept). docmt demo --from-scratch trains the sentence model too; docmt table "
             "experiments/demo.yaml runs all five rows with every control."))
FROM_SCRATCH = DemoBudget(
    rows=ROWS, overrides=BUDGET_OVERRIDES, results="results-demo-scratch",
    preface=("Demo from scratch: rows transformer and concat of the demo table, the shared sentence-level "
             "Transformer trained here (1,800 steps), then 300 further steps per row, as in the table."))
QUICK = DemoBudget(
    rows=("transformer", "concat", "zhang_doc", "flat", "coattn"),
    overrides=("train.max_steps=120", "train.optim.warmup_steps=30", "train.stages.more.max_steps=20",
               "train.stages.doc.max_steps=20", "train.stages.more.optim.warmup_steps=4",
               "train.stages.doc.optim.warmup_steps=4",
               "decode.beam=1", "train.val_every_steps=100000"),
    results="results-quick",
    preface=("SMOKE RUN (docmt demo --quick): 120 + 20 training steps, the models are untrained and "
             "these numbers mean nothing; it only shows that every part runs."))


def start_overrides(row: str) -> list[str]:
    """The row's further stage, started from the shipped sentence model instead of stage `sent`."""
    stage = FURTHER_STAGE.get(row, "doc")
    return [f"train.schedule=[{stage}]", f"train.stages.{stage}.init_from={SHIPPED_MODEL}"]


def row_overrides(budget: DemoBudget, row: str) -> list[str]:
    return [*budget.overrides, *(start_overrides(row) if budget.shipped_start else [])]


def budget_of(args: argparse.Namespace) -> DemoBudget:
    return QUICK if args.quick else FROM_SCRATCH if args.from_scratch else SHIPPED


def demo_command(args: argparse.Namespace) -> int:
    """The demo on its budget; prints the table, its answer and where the results are."""
    from lightning_docmt.cli.demo_answer import demo_answer
    from lightning_docmt.tables import runner as tables
    from lightning_docmt.training.run import run_metrics

    budget = budget_of(args)
    started = time.monotonic()
    print(budget.preface, flush=True)
    outcome = None
    for row in budget.rows:  # one call per row: a row's start is its own override
        outcome = tables.run_table(DEMO_TABLE, rows=[row], profile="cpu", results_dir=Path(budget.results),
                                   cli_overrides=row_overrides(budget, row), run_row=run_metrics,
                                   preface=budget.preface)
    print(Path(outcome.outputs["md"]).read_text())
    if outcome.results is not None and budget is not QUICK:
        print(demo_answer(outcome.results.summaries, outcome.results.tested))
    print(f"results: {', '.join(str(p) for p in outcome.outputs.values())}")
    print(f"runs:    {Path(budget.results) / outcome.table.id}/<row>/seed<seed>")
    mode = os.environ.get("WANDB_MODE", "offline")
    print(f"wandb:   mode={mode}; offline runs are under each run dir's wandb/, the table's under "
          f"{Path(budget.results) / outcome.table.id / 'wandb'} (upload later with `wandb sync <dir>`)")
    print(f"wall time: {time.monotonic() - started:.0f} s")
    failed = outcome.results is not None and any(s.status == "failed" for s in outcome.results.summaries)
    return 1 if failed else 0
