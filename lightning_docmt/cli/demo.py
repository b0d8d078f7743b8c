"""`docmt demo`: the demo table (`experiments/demo.yaml`) on a budget a 2-core laptop can afford.

The table itself gives every row the `cpu` profile's 1,800 steps of the shared Transformer and 300
further steps each, which takes about an hour on 2 cores without bf16 (`docmt table
experiments/demo.yaml` runs it whole). `docmt demo` runs it on one of two budgets, and says on the
table which one it ran, so that nobody mistakes its numbers for the table's:

- the default, 15 minutes on 2 cores: the rows `transformer` and `concat` (the most telling pair:
  does reading the previous sentence help, and does the model use it), shorter training with the
  same equal-budget design, greedy test decoding;
- `--quick`, a smoke run of every row in about 7 minutes: the models are untrained and its numbers
  mean nothing.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path

from lightning_docmt.resources import shipped_dir

DEMO_TABLE = shipped_dir("experiments") / "demo.yaml"


@dataclass(frozen=True)
class DemoBudget:
    rows: tuple[str, ...]
    overrides: tuple[str, ...]  # applied to every row; a stage a row lacks is left unused
    results: str  # results root, apart from the whole table's `results/`
    preface: str  # printed with the table and written into table.md


SHARED_STEPS, FURTHER_STEPS = 400, 150
BUDGET = DemoBudget(
    rows=("transformer", "concat"),
    overrides=(f"train.max_steps={SHARED_STEPS}", "train.optim.warmup_steps=100",  # the profile's 500 > 400
               f"train.stages.more.max_steps={FURTHER_STEPS}", f"train.stages.doc.max_steps={FURTHER_STEPS}",
               # a sixth of each further stage warms up, as in the table (50 of 300)
               "train.stages.more.optim.warmup_steps=25", "train.stages.doc.optim.warmup_steps=25", "decode.beam=1",
               "train.val_every_steps=100000"),  # no validation: every stage hands on its last step
    results="results-demo",
    preface=(f"Demo budget (15 minutes on 2 cores): the shared Transformer {SHARED_STEPS} steps (100 of "
             f"warmup), then "
             f"{FURTHER_STEPS} steps per row, greedy test decoding; rows transformer and concat. "
             "Models this short are far from converged: read the rows against each other. The "
             "whole table (1,800 + 300 steps, beam 4, five rows): docmt table experiments/demo.yaml."))
QUICK = DemoBudget(
    rows=("transformer", "concat", "zhang_doc", "flat", "coattn"),
    overrides=("train.max_steps=120", "train.optim.warmup_steps=30", "train.stages.more.max_steps=20",
               "train.stages.doc.max_steps=20", "train.stages.more.optim.warmup_steps=4",
               "train.stages.doc.optim.warmup_steps=4",
               "decode.beam=1", "train.val_every_steps=100000"),
    results="results-quick",
    preface=("SMOKE RUN (docmt demo --quick): 120 + 20 training steps, the models are untrained and "
             "these numbers mean nothing; it only shows that every part runs."))


def demo_command(args: argparse.Namespace) -> int:
    """The demo table on `bible:en-fr` at the `cpu` profile on a budget; prints the table and where
    the results are."""
    from lightning_docmt.tables import runner as tables
    from lightning_docmt.training.run import run_metrics

    budget = QUICK if args.quick else BUDGET
    started = time.monotonic()
    print(budget.preface, flush=True)
    outcome = tables.run_table(DEMO_TABLE, rows=list(budget.rows), profile="cpu",
                               results_dir=Path(budget.results), cli_overrides=list(budget.overrides),
                               run_row=run_metrics, preface=budget.preface)
    print(Path(outcome.outputs["md"]).read_text())
    print(f"results: {', '.join(str(p) for p in outcome.outputs.values())}")
    print(f"runs:    {', '.join(str(r.run_dir) for r in outcome.records)}")
    mode = os.environ.get("WANDB_MODE", "offline")
    print(f"wandb:   mode={mode}; offline runs are under each run dir's wandb/ "
          f"(upload later with `wandb sync <dir>`)")
    print(f"wall time: {time.monotonic() - started:.0f} s")
    return 1 if any(r.error for r in outcome.records) else 0
