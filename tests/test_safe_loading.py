"""Checkpoint loading never runs code and never yields a half-loaded model: a tampered file, a file
that is not a checkpoint and a checkpoint of another model are each one error line and exit 2, for
every command that reads checkpoints (`translate`, `contrastive`, `test`, `average`)."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lightning_docmt.checkpoints import read_checkpoint
from lightning_docmt.data.synthetic import write_contrastive_suite
from tests.helpers.cli_run import FIT_SETTINGS, docmt, read_json, run_dir_of, write_config

pytestmark = pytest.mark.fit

COMMANDS = ("translate", "contrastive", "test", "average")


class RunsCodeOnLoad:
    """Unpickling this object calls `Path.touch(marker)`: a stand-in for arbitrary code."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (self.marker,)


@pytest.fixture(scope="module")
def run(workdir: Path) -> dict[str, Path]:
    """A tiny fitted run, a suite and a document to translate."""
    config = write_config(workdir / "safe.yaml", FIT_SETTINGS.replace("20", "4"))
    run_dir = run_dir_of(docmt("fit", config, "--profile", "tiny"))
    suite = workdir / "safe_suite.jsonl"
    write_contrastive_suite("tiny", suite)
    text = workdir / "safe_doc.txt"
    text.write_text("a b c\n", encoding="utf-8")
    return {"run_dir": run_dir, "checkpoint": Path(read_json(run_dir / "run.json")["checkpoint"]),
            "suite": suite, "text": text}


def command_line(command: str, checkpoint: Path, run: dict[str, Path], out: Path) -> list:
    return {"translate": ["translate", "--ckpt", checkpoint, "--input", run["text"], "--output", out],
            "contrastive": ["contrastive", "--ckpt", checkpoint, "--suite", run["suite"]],
            "test": ["test", run["run_dir"], "--ckpt", checkpoint],
            "average": ["average", checkpoint, run["checkpoint"], "--out", out]}[command]


def run_cli(argv: list, cwd: Path) -> subprocess.CompletedProcess:
    """`docmt ARGV` in a subprocess, as a user runs it (no test process state can hide a failure)."""
    return subprocess.run([sys.executable, "-m", "lightning_docmt.cli", *map(str, argv)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def assert_one_error_line(code: int, stderr: str, *needles: str) -> None:
    assert code == 2, stderr[-2000:]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-2000:]
    assert all(n in lines[0] for n in needles), lines[0]


@pytest.mark.subprocess
@pytest.mark.parametrize("command", COMMANDS)
def test_a_checkpoint_that_would_run_code_is_refused_without_running_it(run, workdir, command):
    marker = workdir / f"ran-{command}"
    tampered = workdir / f"tampered-{command}.ckpt"
    checkpoint = torch.load(run["checkpoint"], weights_only=True)
    checkpoint["hyper_parameters"]["payload"] = RunsCodeOnLoad(marker)
    torch.save(checkpoint, tampered)
    out = workdir / f"out-{command}"
    done = run_cli(command_line(command, tampered, run, out), workdir)
    assert_one_error_line(done.returncode, done.stderr, str(tampered), "refused", "would call getattr")
    assert not marker.exists() and not out.exists()
    with pytest.raises(Exception):  # the control: an unrestricted load of the same file runs the payload
        torch.load(tampered, weights_only=False)
        raise AssertionError("loaded")
    assert marker.exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_file_that_is_not_a_checkpoint_is_one_error_line(run, workdir, command):
    for name, content in (("text", b"not a checkpoint\n"), ("truncated", run["checkpoint"].read_bytes()[:200])):
        bogus = workdir / f"{name}-{command}.ckpt"
        bogus.write_bytes(content)
        done = docmt(*command_line(command, bogus, run, workdir / f"never-{command}"))
        assert_one_error_line(done.code, done.err, str(bogus), "not a checkpoint")


@pytest.mark.parametrize("command", ["translate", "contrastive", "test"])
def test_a_checkpoint_that_does_not_fit_the_model_is_one_error_line(run, workdir, command):
    checkpoint = torch.load(run["checkpoint"], weights_only=True)
    state = checkpoint["state_dict"]
    dropped = sorted(state)[0]
    del state[dropped]
    misfit = workdir / f"misfit-{command}.ckpt"
    torch.save(checkpoint, misfit)
    done = docmt(*command_line(command, misfit, run, workdir / f"never-misfit-{command}"))
    assert_one_error_line(done.code, done.err, str(misfit), "does not fit", "1 missing keys", dropped)


def test_read_checkpoint_loads_what_training_writes(run):
    checkpoint = read_checkpoint(run["checkpoint"])
    assert checkpoint["state_dict"] and checkpoint["hyper_parameters"]["config"]["model"]["arch"] == "transformer"
