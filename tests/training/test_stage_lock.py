"""Runs started at once that share a stage train it once: one process holds the stage's lock, the
others wait for it, naming it, and reuse what it publishes; the lock of a process killed with
SIGKILL is taken over by exactly one of them (training/run.py, claims.py, locks.py).

Three `docmt fit` processes of one tiny config (another run name each, so another run directory):
`a` takes the lock of stage `s1` and holds it (the test hook `claims.HOLD_VARIABLE`), `b` and `c`
start and wait for it, `a` is killed; one of `b` and `c` takes the lock over and trains the stage,
the other waits for that one and reuses the stage.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from lightning_docmt.claims import HOLD_VARIABLE
from lightning_docmt.locks import OwnerLock
from tests.helpers.cli_run import write_config
from tests.helpers.run_env import DOCMT, subprocess_env

pytestmark = [pytest.mark.fit, pytest.mark.subprocess]

CONFIG = """\
model: {arch: transformer}
train:
  max_steps: 6
  val_every_steps: 6
  stages: {s1: {arch: transformer}}
  schedule: [s1]
"""
WAIT_S = 240


@pytest.fixture
def start(tmp_path):
    """`start(name, **env)`: `docmt fit` of the config as run `name` in a process, its output in
    `<name>.out`; any still running at the end are killed (a failed test leaves no holder behind)."""
    started: list[subprocess.Popen] = []

    def launch(name: str, **env: str) -> subprocess.Popen:
        with open(tmp_path / f"{name}.out", "w") as out:
            started.append(subprocess.Popen(
                [str(DOCMT), "fit", "run.yaml", "--profile", "tiny", f"logging.name={name}"], cwd=tmp_path,
                env=subprocess_env(**env), stdout=out, stderr=subprocess.STDOUT))
        return started[-1]

    yield launch
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def until(condition, what: str, *running: subprocess.Popen) -> None:
    """Wait until `condition()`, while the `running` processes still run."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        assert all(p.poll() is None for p in running), f"a process ended before {what}"
        time.sleep(0.2)


def printed(workdir: Path, name: str) -> str:
    return (workdir / f"{name}.out").read_text()


def stage_record(workdir: Path, name: str) -> dict:
    """The `run.json` stage record of `s1` of run `name`."""
    [run_dir] = (workdir / "runs" / "runs").glob(f"{name}-seed1-*")
    return json.loads((run_dir / "run.json").read_text())["stages"]["s1"]


def test_one_of_the_waiters_takes_the_lock_of_a_killed_owner_over_and_the_other_reuses_its_stage(tmp_path, start):
    write_config(tmp_path / "run.yaml", CONFIG)
    stages = tmp_path / "cache" / "stages"
    a = start("a", **{HOLD_VARIABLE: "600"})
    until(lambda: "holding the lock" in printed(tmp_path, "a"), "a holds the lock of stage s1", a)
    [lock_path] = stages.glob("*.lock")
    assert OwnerLock(lock_path).owner().pid == a.pid
    waiters = {name: start(name) for name in ("b", "c")}
    waiting = f"[docmt] stage 's1': waiting for pid {a.pid} on {socket.gethostname()}, since "
    until(lambda: all(waiting in printed(tmp_path, name) for name in waiters), "b and c wait for a",
          a, *waiters.values())
    os.kill(a.pid, signal.SIGKILL)
    a.wait()
    for name, process in waiters.items():
        assert process.wait(timeout=WAIT_S) == 0, printed(tmp_path, name)[-3000:]
    took_over = [name for name in waiters if f"took over the lock of pid {a.pid} on " in printed(tmp_path, name)]
    assert len(took_over) == 1 and "(its process is gone)" in printed(tmp_path, took_over[0])
    [other] = set(waiters) - set(took_over)
    assert not stage_record(tmp_path, took_over[0])["reused"] and stage_record(tmp_path, other)["reused"]
    assert stage_record(tmp_path, other)["key"] == stage_record(tmp_path, took_over[0])["key"] == lock_path.stem
    assert all(printed(tmp_path, name).count("waiting for") <= 2 for name in waiters)  # a, then perhaps the taker
    assert sorted(p.name for p in stages.iterdir()) == [lock_path.stem]  # no lock or record left behind
