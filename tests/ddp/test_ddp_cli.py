"""DDP through the command line, as the README shows it: 2 CPU processes (gloo) finish cleanly on
both ranks and exit 0; a rank that fails makes the command fail."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.paths import DDP_SCRIPTS, REPO
from tests.helpers.run_checks import assert_test_bleu_rescores
from tests.helpers.run_env import DOCMT, subprocess_env

pytestmark = [pytest.mark.fit, pytest.mark.subprocess]

README_DDP = ["fit", str(REPO / "experiments" / "demo.yaml"), "--row", "transformer", "--profile", "tiny",
              "trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp"]
SHORT = ["train.max_steps=6", "train.val_every_steps=6", "data.corpus=synthetic:tiny"]


def launch(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=subprocess_env(**env), capture_output=True, text=True, timeout=300)


def test_the_readme_ddp_command_finishes_cleanly_on_both_ranks(tmp_path):
    done = launch([str(DOCMT), *README_DDP, *SHORT, f"data.cache_dir={tmp_path / 'cache'}"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Error" not in done.stderr, done.stderr[-3000:]
    printed = [line for line in done.stdout.splitlines() if not line.startswith("[")]
    run_dir = tmp_path / "results" / "demo" / "transformer" / "seed1"
    assert printed == [str(run_dir.relative_to(tmp_path))]  # rank zero alone prints the run dir
    assert_test_bleu_rescores(run_dir, "synthetic:tiny")  # the hypotheses of both ranks, gathered
    assert "contrastive/accuracy" not in json.loads((run_dir / "metrics.json").read_text())
    assert not (run_dir / "error.json").exists()


@pytest.mark.parametrize("fail_at", ["after_test", "before_test"])
def test_a_rank_that_fails_fails_the_command_without_hanging(tmp_path, fail_at):
    script = DDP_SCRIPTS / "ddp_failing_rank_script.py"
    done = launch([sys.executable, str(script), *README_DDP, *SHORT, f"data.cache_dir={tmp_path / 'cache'}"],
                  tmp_path, FAIL_RANK="1", FAIL_AT=fail_at)  # a hang would time out: an error
    assert done.returncode != 0, done.stdout[-2000:]
    assert f"rank 1 fails {fail_at.replace('_', ' its ')}" in done.stderr


def test_co_attention_cross_training_runs_under_ddp(tmp_path):
    """Li & Feng's phases leave the other group's parameters out of each update's graph, which plain
    DDP reports as an error: the trainer switches such a model to `find_unused_parameters`. Two
    ranks cross-train through both phases (2 updates each) and test."""
    argv = [str(DOCMT), "fit", str(REPO / "experiments" / "demo.yaml"), "--row", "coattn", "--profile", "tiny",
            "trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp", *SHORT,
            "train.stages.doc.max_steps=6", "model.cross_training.translator_steps=2",
            "model.cross_training.selector_steps=2", "model.rl.samples=2", "trainer.log_every_n_steps=1",
            f"data.cache_dir={tmp_path / 'cache'}"]
    done = launch(argv, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "results" / "demo" / "coattn" / "seed1"
    header = (run_dir / "doc" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "train/theta_r/selection_rate" in header and "train/theta_s/selection_rate" in header
    assert_test_bleu_rescores(run_dir, "synthetic:tiny")


def test_a_rank_killed_mid_stage_ends_the_job_naming_it_and_the_run_resumes(tmp_path):
    """SIGKILL (not an exception) of local rank 1 during training: rank zero ends within seconds with
    one line naming the rank and the signal; `docmt fit --resume` then finishes the run on 2 ranks."""
    steps, every = 120, 10
    config = tmp_path / "run.yaml"
    config.write_text(f"data: {{corpus: 'synthetic:tiny', cache_dir: {tmp_path / 'cache'}}}\n"
                      f"logging: {{runs_dir: {tmp_path / 'runs'}}}\n"
                      f"train: {{max_steps: {steps}, step_cap: null, val_every_steps: {steps}, "
                      f"checkpoint_every_steps: {every}}}\n")
    argv = [str(DOCMT), "fit", str(config), "--profile", "tiny", "trainer.accelerator=cpu", "trainer.devices=2",
            "trainer.strategy=ddp"]
    job = subprocess.Popen(argv, cwd=tmp_path, env=subprocess_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not list((tmp_path / "runs").glob("*/*/main/checkpoints/resume.ckpt")):
        assert job.poll() is None and time.monotonic() < deadline, job.communicate()[1][-3000:]
        time.sleep(0.2)
    (rank1,) = map(int, Path(f"/proc/{job.pid}/task/{job.pid}/children").read_text().split())
    os.kill(rank1, signal.SIGKILL)
    killed = time.monotonic()
    _, err = job.communicate(timeout=120)
    assert time.monotonic() - killed < 60 and job.returncode == 1, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"docmt fit: error: local rank 1 (pid {rank1}) ended with signal SIGKILL"), last
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    assert not (run_dir / "metrics.json").exists()
    resumed = launch([str(DOCMT), "fit", "--resume", str(run_dir)], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stdout
    record = json.loads((run_dir / "run.json").read_text())
    assert record["stages"]["main"]["global_step"] == steps
