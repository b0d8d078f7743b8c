"""Two "nodes" of one process each on this machine (torchrun `--nnodes 2` on localhost, gloo),
through the CLI (training/launch.py): both ranks write one run directory, the run is killed mid-stage
and resumes to its end; a node whose paths lead elsewhere (no shared filesystem) ends the job with
one line naming its rank instead of hanging."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.helpers.paths import REPO
from tests.helpers.run_env import LAUNCH_VARIABLES

pytestmark = [pytest.mark.fit, pytest.mark.subprocess]

TORCHRUN = Path(sys.executable).parent / "torchrun"
STEPS, EVERY = 60, 8
CONFIG = f"""\
data: {{corpus: "synthetic:tiny"}}
train: {{max_steps: {STEPS}, step_cap: null, val_every_steps: 30, checkpoint_every_steps: {EVERY}}}
"""
TWO_NODES = ["--profile", "tiny", "trainer.accelerator=cpu", "trainer.devices=1", "trainer.num_nodes=2",
             "trainer.strategy=ddp"]


def free_port_pair() -> int:
    """A port P with P and P + 1 free: torchrun's store, then the run directory's rendezvous."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        try:
            with socket.socket() as second:
                second.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no pair of free ports")


def start_nodes(workdirs: tuple[Path, Path], argv: list[str], **env: str) -> list[subprocess.Popen]:
    """`torchrun --nnodes 2 --node-rank R ... -m lightning_docmt.cli ARGV` for R = 0, 1, node R in
    `workdirs[R]`, each in a process group of its own (so that a kill takes its worker too)."""
    port = free_port_pair()
    environ = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    environ.update(WANDB_MODE="disabled", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), **env)
    return [subprocess.Popen([str(TORCHRUN), "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(rank),
                              "--master-addr", "127.0.0.1", "--master-port", str(port),
                              "-m", "lightning_docmt.cli", *argv],
                             cwd=workdirs[rank], env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True) for rank in (0, 1)]


def kill_tree(node: subprocess.Popen) -> None:
    """SIGKILL a torchrun agent and its workers (which torchrun starts in sessions of their own):
    a node that dies at once, as a preempted machine does."""
    tree, todo = [], [node.pid]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        with contextlib.suppress(OSError):
            todo += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    node.wait()


def finish(nodes: list[subprocess.Popen]) -> list[tuple[int, str, str]]:
    outputs = [node.communicate(timeout=300) for node in nodes]
    return [(node.returncode, *output) for node, output in zip(nodes, outputs)]


def test_two_nodes_write_one_run_directory_and_resume_it_after_a_kill(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(CONFIG)
    overrides = [f"data.cache_dir={tmp_path / 'cache'}", f"logging.runs_dir={tmp_path / 'runs'}"]
    nodes = start_nodes((tmp_path, tmp_path), ["fit", str(config), *TWO_NODES, *overrides])
    deadline = time.monotonic() + 240
    while True:  # kill both nodes once the stage has a resume checkpoint
        found = list((tmp_path / "runs").glob("*/*/main/checkpoints/resume.ckpt"))
        if found and torch.load(found[0], weights_only=True)["global_step"] >= EVERY:
            break
        assert all(n.poll() is None for n in nodes) and time.monotonic() < deadline, \
            [n.communicate()[1][-2000:] for n in nodes]
        time.sleep(0.2)
    for node in nodes:
        kill_tree(node)
    run_dirs = [p for p in (tmp_path / "runs").glob("*/*") if p.is_dir()]
    assert run_dirs == [found[0].parents[2]]  # one directory for both ranks
    run_dir = run_dirs[0]
    assert json.loads((run_dir / "launch.json").read_text())["starters"] == 2
    assert not list((tmp_path / "cache").glob("stages/*/done.json"))  # killed mid-stage

    resumed = finish(start_nodes((tmp_path, tmp_path), ["fit", "--resume", str(run_dir)]))
    assert [code for code, _, _ in resumed] == [0, 0], [err[-3000:] for _, _, err in resumed]
    assert "resuming from" in resumed[0][1]
    assert [p for p in (tmp_path / "runs").glob("*/*") if p.is_dir()] == [run_dir]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["stages"]["main"]["global_step"] == STEPS
    assert "test/bleu" in json.loads((run_dir / "metrics.json").read_text())


def test_a_node_that_does_not_share_the_filesystem_ends_the_job_naming_itself(tmp_path):
    """Node 1 starts in another directory and the paths are relative: it resolves the run directory
    rank 0 names to a folder rank 0 never wrote, as a node without the shared filesystem would."""
    workdirs = (tmp_path / "node0", tmp_path / "node1")
    for workdir in workdirs:
        workdir.mkdir()
        (workdir / "run.yaml").write_text(CONFIG + "logging: {runs_dir: runs}\n")
    nodes = start_nodes(workdirs, ["fit", "run.yaml", *TWO_NODES, "data.cache_dir=cache"],
                        DOCMT_SHARED_FS_WAIT_S="2")
    outcome = finish(nodes)
    assert all(code != 0 for code, _, _ in outcome)
    for _, _, err in outcome:
        lines = [line for line in err.splitlines() if "cannot see" in line]
        assert len(lines) == 1, err[-2000:]  # one line, no traceback
        assert "rank 1 on" in lines[0] and "launch.json" in lines[0] and "shared filesystem" in lines[0]
    assert not list((workdirs[1] / "runs").glob("*/*/main"))  # node 1 trained nothing
