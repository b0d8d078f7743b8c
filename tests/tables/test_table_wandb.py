"""The wandb runs of one `docmt table` (training/dashboard.py, tables/dashboard.py), written offline
and read back from their files: one run per (row, seed) spanning its two stages, and the table's
own run with the report and the p-values against the baseline.

Both rows start from the same sentence-level stage `s1`, which the first row trains and the second
reuses from the stage cache; each then trains its own stage `s2` with a warm-up of its own (so that
a stage's view of the config differs from the run's)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import yaml

from lightning_docmt.provenance import code_fingerprint
from tests.helpers.cli_run import CORPUS, docmt
from tests.helpers.run_env import single_process_run_env
from tests.helpers.wandb_files import offline_runs

pytestmark = [pytest.mark.fit, pytest.mark.subprocess]  # trains; wandb starts its service process

ROWS = {"sent": ("transformer", []), "concat": ("concat", ["context.prev_sentences=1"])}
STAGE_KEYS = ("reused", "key", "global_step", "best_score")


def write_table(root: Path) -> Path:
    """Two rows of two stages, `s1` shared; seed 1 (the default)."""
    s2 = "train.stages.s2={{arch: {}, init_from: s1, optim: {{warmup_steps: 2}}}}"
    rows = [{"name": name, "overrides": [f"model.arch={arch}", *more, s2.format(arch), "train.schedule=[s1,s2]"]}
            for name, (arch, more) in ROWS.items()]
    path = root / "dash.yaml"
    path.write_text(yaml.safe_dump({
        "id": "dash", "title": "wandb runs", "metrics": ["test/bleu"], "baseline": "sent",
        "base": [f"data.corpus={CORPUS}", f"data.cache_dir={root / 'cache'}", "logging.wandb=true",
                 "train.max_steps=4", "train.val_every_steps=4", "eval.valid_bleu=false",
                 "train.stages={s1: {arch: transformer}}"],
        "rows": rows}, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def table_runs(tmp_path_factory) -> Path:
    """The results folder of the table, run once at the tiny profile with wandb offline."""
    root = tmp_path_factory.mktemp("table_wandb")
    with single_process_run_env() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        for variable in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
            mp.setenv(variable, str(root / "wandb_home"))
        outcome = docmt("table", write_table(root), "--profile", "tiny", "--results", root / "results")
    assert outcome.code == 0, outcome.err
    return root / "results" / "dash"


def test_one_run_per_row_and_seed_and_one_for_the_table_all_in_the_tables_group(table_runs):
    runs = {run.name: run for run in offline_runs(table_runs)}
    assert set(runs) == {"sent/seed1", "concat/seed1", "dash/table"}
    assert {run.group for run in runs.values()} == {"dash"}
    assert {run.exit_code for run in runs.values()} == {0}
    for row, (arch, _) in ROWS.items():
        run = runs[f"{row}/seed1"]
        assert run.directory.parent == table_runs / row / "seed1" / "wandb"  # under its run directory
        assert set(run.tags) == {"dash", arch, "profile:tiny", "precision:32-true", f"code:{code_fingerprint()}"}
        # the run's config, not that of a stage (s2 warms up for 2 updates, the run for 5)
        assert run.config["model"]["arch"] == arch and run.config["train"]["optim"]["warmup_steps"] == 5


def test_a_row_runs_summary_holds_its_stages_and_its_metrics(table_runs):
    runs = {run.name: run for run in offline_runs(table_runs)}
    sent, concat = runs["sent/seed1"], runs["concat/seed1"]
    for row, run in (("sent", sent), ("concat", concat)):
        metrics = json.loads((table_runs / row / "seed1" / "metrics.json").read_text())
        assert {k: run.summary[k] for k in metrics if k in run.summary} == \
            {k: v for k, v in metrics.items() if k != "time/run_s"}  # every metric but the runner's time
        assert "nrefs:1" in run.summary["test/bleu_signature"] and run.summary["env/code"] == code_fingerprint()
        assert {f"{stage}/{key}" for stage in ("s1", "s2") for key in STAGE_KEYS} <= set(run.summary)
        assert run.summary["s2/reused"] is False and "s2/val/loss" in run.history_keys
    # s1 trained by the first row, reused by the second: same key, no curve of its own there
    assert sent.summary["s1/reused"] is False and concat.summary["s1/reused"] is True
    assert sent.summary["s1/key"] == concat.summary["s1/key"]
    assert "s1/val/loss" in sent.history_keys and not any(k.startswith("s1/") for k in concat.history_keys)


def test_wandbs_own_log_records_stay_out_of_the_runs_log_files(table_runs):
    """wandb logs every step of a run at DEBUG into the run's debug.log; none of it is the run's output."""
    for row in ROWS:
        log = (table_runs / row / "seed1" / "log.txt").read_text()
        assert f"row {row}, seed 1 finished" in log and not re.search(r" (DEBUG|INFO) wandb[.:]", log)


def test_the_table_run_holds_the_report_and_the_p_values_against_the_baseline(table_runs):
    [table] = [run for run in offline_runs(table_runs) if run.name == "dash/table"]
    assert table.directory.parent == table_runs / "wandb" and table.job_type == "table" and table.tags == ["dash"]
    assert {"table.md", "table.csv"} <= table.files and table.summary["chart/_type"] == "image-file"
    assert {(r["row"], r["metric"]) for r in table.logged_table("table")} == {("sent", "test/bleu"),
                                                                             ("concat", "test/bleu")}
    with (table_runs / "table.csv").open(newline="") as f:
        [concat] = [line for line in csv.DictReader(f) if line["row"] == "concat"]
    [tested] = table.logged_table("significance")  # the baseline is not tested against itself
    assert [tested[k] for k in ("row", "seed", "run", "metric")] == ["concat", 1, "concat/seed1", "test/bleu"]
    assert (tested["p_value"], tested["mark"]) == (float(concat["p_values"]), concat["mark"])
    assert table.summary["p_value/concat/seed1"] == tested["p_value"]
    assert table.summary["delta/concat/seed1"] == tested["delta"]
