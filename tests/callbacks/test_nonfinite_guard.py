"""Non-finite updates (`callbacks/nonfinite_guard.py`): a NaN loss forced at chosen updates of a tiny
`docmt fit` is skipped (no parameter or Adam state changes, counted in `done.json` and printed), and
`train.nonfinite_stop_after` of them in a row stop the stage with one line naming the update, exit
status 1, and no checkpoint holding a non-finite weight."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lightning_docmt.training.module import DocMTModule
from tests.helpers.cli_run import docmt, run_dir_of, write_config

pytestmark = pytest.mark.fit

STEPS = 8


def poison(monkeypatch: pytest.MonkeyPatch, bad_updates: set[int]) -> None:
    """The loss of every batch of the given (1-based) updates becomes NaN."""
    original = DocMTModule.scaled_loss

    def poisoned(self, terms):
        loss = original(self, terms)
        return loss * float("nan") if self.trainer.global_step + 1 in bad_updates else loss

    monkeypatch.setattr(DocMTModule, "scaled_loss", poisoned)


def fit(tmp_path: Path, *overrides: str):
    config = write_config(tmp_path / "run.yaml", f"train:\n  max_steps: {STEPS}\n  val_every_steps: {STEPS}\n"
                                                 f"  checkpoint_every_steps: 1\n")
    return docmt("fit", config, "--profile", "tiny", *overrides)


def finite(checkpoint: Path) -> bool:
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    return all(torch.isfinite(t).all() for t in state.values() if t.is_floating_point())


def test_non_finite_updates_are_skipped_counted_and_change_nothing(workdir, tmp_path, monkeypatch):
    poison(monkeypatch, {3, 4})
    done = fit(tmp_path)
    run_dir = run_dir_of(done)
    assert "update 3 skipped: non-finite gradient (1 skipped" in done.out
    assert "update 4 skipped: non-finite gradient (2 skipped" in done.out
    record = json.loads((run_dir / "run.json").read_text())
    stage = json.loads((Path(record["checkpoint"]).parent / "done.json").read_text())
    assert stage["nonfinite_skipped"] == 2 and stage["trained_steps"] == STEPS
    last = run_dir / "main" / "checkpoints" / "last.ckpt"
    assert finite(last)
    adam = torch.load(last, map_location="cpu", weights_only=True)["optimizer_states"][0]["state"]
    assert {float(s["step"]) for s in adam.values()} == {STEPS - 2}  # two steps never taken
    assert "test/bleu" in json.loads((run_dir / "metrics.json").read_text())


def test_a_run_of_non_finite_updates_stops_the_stage_naming_the_update(workdir, tmp_path, monkeypatch):
    poison(monkeypatch, set(range(3, STEPS + 1)))
    done = fit(tmp_path, "train.nonfinite_stop_after=3")
    assert done.code == 1
    assert done.err.strip().splitlines()[-1].startswith(
        "docmt fit: stopped: stage 'main': update 5 is the 3. in a row with a non-finite gradient")
    assert "the weights are those of update 2" in done.err
    checkpoints = list((tmp_path / "runs").rglob("*.ckpt"))
    assert checkpoints and all(finite(c) for c in checkpoints)
    assert not list((tmp_path / "runs").rglob("metrics.json"))
    assert not list((tmp_path / "cache").rglob("done.json"))  # nothing published to the stage cache
