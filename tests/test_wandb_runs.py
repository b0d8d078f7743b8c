"""wandb runs with every call guarded (`lightning_docmt/wandb_runs.py`): a failure is one warning and
turns the run off; `disabled` starts nothing. No run is written here (see the offline tests in
tests/training/test_dashboard.py and tests/tables/test_table_wandb.py)."""

from __future__ import annotations

import logging

import wandb

from lightning_docmt import wandb_runs


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
