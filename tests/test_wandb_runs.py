"""wandb runs with every call guarded (`lightning_docmt/wandb_runs.py`): a failure is one warning and
turns the run off; `disabled` starts nothing; online mode with no server to reach trains on. No run
is written here (see the offline tests in tests/training/test_dashboard.py and
tests/tables/test_table_wandb.py)."""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

import pytest
import wandb

from lightning_docmt import wandb_runs
from tests.helpers.cli_run import write_config
from tests.helpers.run_env import DOCMT, subprocess_env


def test_a_failing_start_is_a_warning_and_a_run_that_is_off(monkeypatch, caplog):
    def broken_init(**kwargs):
        raise ConnectionError("no network")

    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setattr(wandb, "init", broken_init)
    with caplog.at_level(logging.WARNING):
        run = wandb_runs.start_run(project="p", name="n")
    assert not run.alive and not run.summarize({"a": 1.0}) and not run.finish()
    assert "wandb init failed (ConnectionError: no network); continuing without it" in caplog.text


def test_disabled_mode_starts_no_run(monkeypatch):
    started = []
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setattr(wandb, "init", lambda **kwargs: started.append(kwargs))
    assert not wandb_runs.start_run(project="p").alive and started == []


class FailingSummary:
    """A stand-in run whose summary cannot be written; it records the exit codes it finishes with."""

    def __init__(self):
        self.exit_codes: list[int] = []

    @property
    def summary(self):
        raise OSError("disk full")

    def finish(self, exit_code: int) -> None:
        self.exit_codes.append(exit_code)


def test_the_first_failing_call_turns_the_run_off_but_it_is_still_finished(caplog):
    stand_in = FailingSummary()
    run = wandb_runs.GuardedRun(stand_in)
    calls = []
    with caplog.at_level(logging.WARNING):
        assert not run.summarize({"a": 1.0})
        assert not run.call("log", lambda: calls.append(1))  # off: not tried
    assert calls == [] and caplog.text.count("wandb summary failed (OSError: disk full)") == 1
    assert run.finish(exit_code=1) and stand_in.exit_codes == [1] and not run.alive


def test_a_bad_init_timeout_is_the_users_error_not_a_warning(monkeypatch):
    from lightning_docmt.errors import DocMTInputError

    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv(wandb_runs.INIT_TIMEOUT_VARIABLE, "soon")
    with pytest.raises(DocMTInputError, match="DOCMT_WANDB_INIT_TIMEOUT='soon'"):
        wandb_runs.start_run(project="p")


@pytest.mark.fit
@pytest.mark.subprocess
def test_online_mode_with_an_unreachable_server_trains_with_one_warning(tmp_path):
    """Issue 37 item 5: wandb online, its server unreachable (a closed local port; a key is set, so
    wandb really tries the network): `docmt fit` warns once, within the init timeout, and finishes
    with its metrics in the run directory."""
    config = write_config(tmp_path / "run.yaml", "train:\n  max_steps: 2\n  val_every_steps: 2\n")
    env = subprocess_env(WANDB_MODE="online", WANDB_API_KEY="a" * 40, WANDB_BASE_URL="http://127.0.0.1:9",
                         WANDB_DIR=str(tmp_path), **{wandb_runs.INIT_TIMEOUT_VARIABLE: "3"})
    done = subprocess.run([str(DOCMT), "fit", str(config), "--profile", "tiny", "logging.wandb=true"],  # tiny: off
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    [warning] = [line for line in done.stderr.splitlines() if "wandb" in line]  # one line, once
    assert warning.startswith("wandb init failed (CommError") and warning.endswith("continuing without it")
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    assert isinstance(json.loads((run_dir / "metrics.json").read_text())["test/bleu"], float)
