"""`docmt fit --resume RUN_DIR` after a SIGKILL mid-stage ends with the weights of an uninterrupted
run: the sampler position, optimizer, schedule, random streams (dropout), frozen set and
averaging window all come back from the stage's newest checkpoint."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from fnmatch import fnmatchcase
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.trainer.states import TrainerFn

from lightning_docmt.callbacks.checkpoint_averaging import CheckpointAveraging
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.models.zhang_doc import THETA_D_GLOBS
from lightning_docmt.training import run as train
from tests.helpers.run_env import DOCMT, subprocess_env

PROGRESS_LINE = re.compile(r"\[docmt\] stage '(\w+)' (\d+/\d+) updates")
STEPS, EVERY = 40, 8
# Two stages (Zhang's two-step: a Transformer, then theta_d alone, frozen set restored on resume),
# dropout on (random streams restored), checkpoint averaging over the last 2 validations.
CONFIG = f"""\
data: {{corpus: "synthetic:tiny", max_tokens: 300}}
model: {{arch: zhang_doc, dropout: 0.1}}
context: {{prev_sentences: 1}}
eval: {{valid_bleu: false}}
train:
  max_steps: {STEPS}
  step_cap: null  # longer than the tiny profile's cap
  val_every_steps: 10
  checkpoint_every_steps: {EVERY}
  average: {{checkpoints: 2, rule: last}}
  stages:
    s1: {{arch: transformer, max_steps: 6}}
    s2: {{arch: zhang_doc, init_from: s1, trainable: ["context_encoder.*", "*.context_attn.*"]}}
  schedule: [s1, s2]
"""


def fit(workdir: Path, *argv: str) -> subprocess.CompletedProcess:
    done = subprocess.run([str(DOCMT), "fit", *argv], cwd=workdir, env=subprocess_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def final_weights(run_dir: Path) -> tuple[dict[str, torch.Tensor], int]:
    record = json.loads((run_dir / "run.json").read_text())
    checkpoint = torch.load(record["checkpoint"], map_location="cpu", weights_only=True)
    return checkpoint["state_dict"], record["stages"]["s2"]["global_step"]


def start_of_s2(run_dir: Path) -> dict[str, float]:
    """The valid NLLs recorded as stage s2 began (its `done.json`): before and with its new tensors."""
    record = json.loads((run_dir / "run.json").read_text())
    done = json.loads((Path(record["checkpoint"]).parent / "done.json").read_text())
    return {k: done[k] for k in ("initial_nll", "parent_nll")}


def write_run_config(workdir: Path) -> Path:
    workdir.mkdir()
    config = workdir / "run.yaml"
    config.write_text(CONFIG + f"logging: {{runs_dir: {workdir / 'runs'}}}\n")
    return config


@pytest.fixture(scope="module")
def uninterrupted_fit(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """(run dir, the finished process) of the fit that is never killed, a progress line every 16
    updates (logging.* does not change the stages' keys: the killed fit's stages are the same)."""
    workdir = tmp_path_factory.mktemp("resume") / "uninterrupted"
    config = write_run_config(workdir)
    done = fit(workdir, str(config), "--profile", "tiny", f"data.cache_dir={workdir / 'cache'}",
               "logging.progress_every_steps=16")
    return Path(done.stdout.strip().splitlines()[-1]), done


@pytest.fixture(scope="module")
def uninterrupted(uninterrupted_fit) -> tuple[dict[str, torch.Tensor], int, dict[str, float]]:
    run_dir, _ = uninterrupted_fit
    return (*final_weights(run_dir), start_of_s2(run_dir))


@pytest.mark.fit
@pytest.mark.subprocess
def test_a_fit_prints_progress_lines_and_a_summary_per_stage_and_no_library_chatter(uninterrupted_fit):
    _, done = uninterrupted_fit
    lines = done.stdout.splitlines()
    counts = [m.group(1, 2) for m in map(PROGRESS_LINE.match, lines) if m]
    # every 16 updates and after the last; s1 (6 updates) only after its last
    assert counts == [("s1", "6/6"), ("s2", "16/40"), ("s2", "32/40"), ("s2", "40/40")]
    first_of_s2 = next(line for line in lines if "16/40 updates" in line)
    assert re.search(r"loss \d+\.\d{3} · lr \d\.\d\de-\d\d · [\d,]+ tok/s · \d+s · eta \d+s$", first_of_s2)
    summaries = [line for line in lines if " done: " in line]
    assert [line.split("'")[1] for line in summaries] == ["s1", "s2"]
    assert re.search(r"stage 's2' done: 40 updates in .* · lr .* -> .*, summed \d+\.\d{3}", summaries[1])
    for chatter in ("GPU available", "Seed set to", "LeafSpec", "exists and is not empty", "┃ Name"):
        assert chatter not in done.stdout + done.stderr, chatter


@pytest.mark.fit
@pytest.mark.subprocess
def test_a_killed_fit_resumes_to_the_weights_of_an_uninterrupted_one(tmp_path, uninterrupted):
    workdir = tmp_path / "killed"
    config = write_run_config(workdir)
    proc = subprocess.Popen([str(DOCMT), "fit", str(config), "--profile", "tiny",
                             f"data.cache_dir={workdir / 'cache'}"], cwd=workdir, env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 240
    while True:  # kill it once stage s2 has a checkpoint past its first validation
        found = list((workdir / "runs").glob("*/*/s2/checkpoints/resume.ckpt"))
        if found and torch.load(found[0], weights_only=True)["global_step"] >= 2 * EVERY:
            break
        assert proc.poll() is None and time.monotonic() < deadline, "the fit ended before it was killed"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    run_dir = found[0].parents[2]
    assert not (run_dir / "metrics.json").exists()  # it really was interrupted mid-stage
    done = fit(workdir, "--resume", str(run_dir))
    assert "resuming from" in done.stdout and "reusing" in done.stdout  # s1 from the stage cache
    assert "before the new tensors" not in done.stdout  # s2's start was measured once, not again
    weights, steps = final_weights(run_dir)
    expected, expected_steps, expected_start = uninterrupted
    assert start_of_s2(run_dir) == expected_start  # kept from the interrupted run's stage marker
    assert steps == expected_steps
    assert weights.keys() == expected.keys()
    for name, tensor in weights.items():
        assert torch.allclose(tensor, expected[name], atol=1e-6, rtol=0), name
    averaged = json.loads((run_dir / "s2" / "averaging" / "average.json").read_text())
    assert len(averaged["steps"]) == 2 and averaged["steps"][-1] == steps
    snapshots = list((run_dir / "s2" / "averaging").glob("step*.pt"))
    assert snapshots
    for snapshot in snapshots:  # theta_s is frozen in s2: the snapshots hold theta_d alone
        names = torch.load(snapshot, weights_only=True).keys()
        assert names and all(any(fnmatchcase(n, "model." + g) for g in THETA_D_GLOBS) for n in names)


def test_a_resumed_averaging_window_whose_snapshots_are_gone_is_an_error(tmp_path):
    averaging = CheckpointAveraging(2, "last", tmp_path, monitor="val/loss", mode="min")
    kept = tmp_path / "step000000010.pt"
    kept.write_bytes(b"")
    averaging.load_state_dict({"snapshots": [{"step": 10, "score": -1.0, "path": str(kept)},
                                             {"step": 5, "score": -2.0, "path": None}]})  # pruned: fine
    with pytest.raises(DocMTInputError, match="snapshot files are gone.*step000000020.pt"):
        averaging.load_state_dict({"snapshots": [{"step": 20, "score": -1.0,
                                                  "path": str(tmp_path / "step000000020.pt")}]})


def validate(averaging: CheckpointAveraging, trainer: SimpleNamespace, module: torch.nn.Module,
             step: int, loss: float) -> None:
    trainer.global_step, trainer.callback_metrics = step, {"val/loss": torch.tensor(loss)}
    averaging.on_validation_end(trainer, module)


def checkpoint(averaging: CheckpointAveraging, trainer: SimpleNamespace) -> dict:
    """What Lightning does as it builds a checkpoint: the callback's state, then its save hook."""
    state = averaging.state_dict()
    averaging.on_save_checkpoint(trainer, None, {})
    return state


def test_a_pruned_snapshot_outlives_every_checkpoint_that_lists_it(tmp_path):
    """A kill after a prune and before the next checkpoint resumes from a checkpoint that lists the
    pruned snapshot: its file must still be there (the CI failure of a killed fit that had pruned
    step 10 at step 30 and was resumed from its step-24 checkpoint)."""
    module = torch.nn.Linear(2, 2)
    trainer = SimpleNamespace(sanity_checking=False, state=SimpleNamespace(fn=TrainerFn.FITTING),
                              is_global_zero=True, global_step=0, callback_metrics={})
    averaging = CheckpointAveraging(2, "last", tmp_path, monitor="val/loss", mode="min")
    validate(averaging, trainer, module, 10, 3.0)
    validate(averaging, trainer, module, 20, 2.0)
    at_24 = checkpoint(averaging, trainer)
    validate(averaging, trainer, module, 30, 1.0)  # the window is now 20, 30: step 10 is pruned
    step_10 = tmp_path / "step000000010.pt"
    assert step_10.is_file()
    CheckpointAveraging(2, "last", tmp_path, "val/loss", "min").load_state_dict(at_24)  # the resume
    at_32 = checkpoint(averaging, trainer)
    assert step_10.is_file()  # the step-24 checkpoint is the newest whole one while step 32's is written
    assert at_32["unlisted"] == [str(step_10)]
    resumed = CheckpointAveraging(2, "last", tmp_path, "val/loss", "min")
    resumed.load_state_dict(at_32)
    checkpoint(averaging, trainer)
    assert not step_10.is_file()  # written whole, step 32's checkpoint lists it no more
    assert sorted(p.name for p in tmp_path.glob("step*.pt")) == ["step000000020.pt", "step000000030.pt"]
    step_10.write_bytes(b"")  # a resume from step 32 deletes what that checkpoint left unlisted
    resumed.delete_pruned(trainer)
    assert not step_10.is_file()


def test_at_one_step_the_resume_takes_the_checkpoint_written_last(tmp_path):
    stage_dir = tmp_path / "stage"
    (stage_dir / "checkpoints").mkdir(parents=True)
    (stage_dir / train.STAGE_MARKER).write_text(json.dumps({"key": "k"}))
    periodic, validation = stage_dir / "checkpoints" / "resume.ckpt", stage_dir / "checkpoints" / "last.ckpt"
    torch.save({"global_step": 20, "state_dict": {}}, periodic)
    torch.save({"global_step": 20, "state_dict": {}}, validation)
    os.utime(periodic, ns=(1, 2_000_000_000))
    os.utime(validation, ns=(1, 1_000_000_000))
    assert train.resumable_checkpoint(stage_dir, "k") == periodic
    os.utime(validation, ns=(1, 3_000_000_000))
    assert train.resumable_checkpoint(stage_dir, "k") == validation
    torch.save({"global_step": 24, "state_dict": {}}, periodic)
    os.utime(periodic, ns=(1, 1_000_000_000))
    assert train.resumable_checkpoint(stage_dir, "k") == periodic  # the step comes first


@pytest.mark.fit
@pytest.mark.subprocess
def test_resume_takes_only_a_run_directory(tmp_path):
    done = subprocess.run([str(DOCMT), "fit", "--resume", str(tmp_path), "train.max_steps=3"], cwd=tmp_path,
                          env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "only the run directory" in done.stderr
    done = subprocess.run([str(DOCMT), "fit", "--resume", str(tmp_path)], cwd=tmp_path,
                          env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no config.yaml" in done.stderr
