"""`StagedUnfreezing` (callbacks/staged_unfreezing.py): Zhang et al. 2018's two-step training
(Eq. 25: theta_s frozen, theta_d trained), milestones, resume, dropout in frozen modules (reading Z10).

Every fit is an in-process tiny-profile fit on `synthetic:tiny` (tests/helpers/stage_fits.py); the fits of
a group of tests are shared through module-scoped fixtures.
"""

from __future__ import annotations

import json
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Iterator

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_docmt.callbacks.staged_unfreezing import StagedUnfreezing
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.models.zhang_doc import THETA_D_GLOBS, THETA_S_GLOBS
from lightning_docmt.schedules import lr_at
from lightning_docmt.training import stages
from tests.helpers.stage_fits import StepRecorder, fit_stage, tiny_config

TWO_STEP = ["model.arch=zhang_doc", "context.prev_sentences=1",
            "model.dropout=0.3", "model.attn_dropout=0.1", "model.relu_dropout=0.1",
            "train.stages={s1: {arch: transformer, max_steps: 3}, "
            f"s2: {{arch: zhang_doc, trainable: {json.dumps(THETA_D_GLOBS)}, max_steps: 3}}}}",
            "train.schedule=[s1,s2]", "train.val_every_steps=3"]
MILESTONE_GLOBS = ["decoder.layers.*.ffn.*"]
MILESTONE_STEP, MILESTONE_LR = 3, 1.0e-3
MILESTONE = [f"train.stages.main.trainable={json.dumps(THETA_D_GLOBS)}",
             f"train.stages.main.unfreeze=[{{globs: {json.dumps(MILESTONE_GLOBS)}, "
             f"at_step: {MILESTONE_STEP}, lr: {MILESTONE_LR}}}]",
             "model.arch=zhang_doc", "context.prev_sentences=1",
             "train.max_steps=6", "train.val_every_steps=6"]


def matching(names: list[str], globs: list[str]) -> list[str]:
    return sorted(n for n in names if any(fnmatchcase(n, g) for g in globs))


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small shared machine
    yield tmp_path_factory.mktemp("unfreezing")
    torch.set_num_threads(threads)


# ---------------------------------------------------------------------- two-step training


class DropoutProbe(pl.Callback):
    """Records, for every dropout module inside theta_s, whether it changed its input in training."""

    def __init__(self) -> None:
        self.calls: dict[str, list[bool]] = {}
        self._handles: list[Any] = []

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        for name, module in pl_module.model.named_modules():
            frozen = any(fnmatchcase(name + ".x", g) for g in THETA_S_GLOBS)
            if isinstance(module, torch.nn.Dropout) and module.p > 0 and frozen:
                self._handles.append(module.register_forward_hook(self._hook(name)))

    def _hook(self, name: str):
        def record(module: torch.nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            if module.training or torch.is_grad_enabled():
                self.calls.setdefault(name, []).append(module.training and not torch.equal(out, args[0]))
        return record

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        for handle in self._handles:
            handle.remove()


@pytest.fixture(scope="module")
def two_step(root: Path) -> dict[str, Any]:
    cfg = tiny_config(root, *TWO_STEP)
    s1 = fit_stage(cfg, "s1", root / "two_step" / "s1")
    s1_ckpt = Path(s1.trainer.checkpoint_callback.last_model_path)
    recorder, probe = StepRecorder(), DropoutProbe()
    s2 = fit_stage(cfg, "s2", root / "two_step" / "s2", init_from=s1_ckpt, callbacks=[recorder, probe])
    s1_weights = torch.load(s1_ckpt, map_location="cpu", weights_only=False)["state_dict"]
    return {"s1": {k.removeprefix("model."): v for k, v in s1_weights.items()},
            "recorder": recorder, "probe": probe, "s2": s2}


@pytest.mark.fit
def test_step_2_keeps_theta_s_bit_identical_and_trains_theta_d(two_step):
    s1, recorder = two_step["s1"], two_step["recorder"]
    start, end = recorder.start, recorder.end
    theta_d = matching(list(end), THETA_D_GLOBS)
    assert theta_d and sorted(set(end) - set(s1)) == theta_d
    assert all(torch.equal(start[k], s1[k]) for k in s1)  # step 2 started from step 1
    assert all(torch.equal(end[k], s1[k]) for k in s1), "theta_s changed"
    assert [k for k in theta_d if not torch.equal(end[k], start[k])] == theta_d


@pytest.mark.fit
def test_the_optimizer_holds_exactly_the_trainable_parameters(two_step):
    recorder = two_step["recorder"]
    names = [n for n, _ in two_step["s2"].module.model.named_parameters()]
    theta_d = matching(names, THETA_D_GLOBS)
    assert sorted(recorder.steps) == [0, 1, 2]
    for snapshot in recorder.steps.values():
        assert [g for g, _ in snapshot["groups"]] == [theta_d]
        assert snapshot["trainable"] == theta_d


@pytest.mark.fit
def test_dropout_stays_active_inside_frozen_modules(two_step):
    calls = two_step["probe"].calls
    assert any(".self_attn." in name for name in calls) and any(".ffn." in name for name in calls)
    assert all(len(active) >= 3 and all(active) for active in calls.values()), calls


# ---------------------------------------------------------------------- milestones and resume


@pytest.fixture(scope="module")
def milestone_fits(root: Path) -> dict[str, Any]:
    """One uninterrupted fit (6 steps, milestone at step 3, checkpoints every 2 steps), and two
    fits resumed from its checkpoints at steps 4 (milestone fired) and 2 (not yet fired)."""
    cfg = tiny_config(root, *MILESTONE)
    out = root / "milestone"
    recorders = {"full": StepRecorder()}
    every_two = ModelCheckpoint(dirpath=str(out / "steps"), every_n_train_steps=2, save_top_k=-1,
                                filename="{step}")
    fit_stage(cfg, "main", out / "full", callbacks=[recorders["full"], every_two])
    for step in (4, 2):
        recorders[step] = StepRecorder()
        fit_stage(cfg, "main", out / f"resumed{step}", ckpt_path=out / "steps" / f"step={step}.ckpt",
                  callbacks=[recorders[step]])
    return {"cfg": cfg, "recorders": recorders}


def expected_lr(cfg, lr: float, step: int) -> float:
    optim = cfg.train.optim
    return lr_at(step + 1, schedule=optim.schedule, lr=lr, warmup=optim.warmup_steps,
                 d_model=cfg.model.d_model)


@pytest.mark.fit
def test_a_milestone_adds_exactly_its_frozen_parameters_as_a_group_at_its_lr(milestone_fits):
    cfg, full = milestone_fits["cfg"], milestone_fits["recorders"]["full"]
    names = list(full.start)
    theta_d, unfrozen = matching(names, THETA_D_GLOBS), matching(names, MILESTONE_GLOBS)
    assert unfrozen and not set(unfrozen) & set(theta_d)
    assert sorted(full.steps) == list(range(6))
    for step, snapshot in full.steps.items():
        groups = snapshot["groups"]
        if step < MILESTONE_STEP:
            assert [g for g, _ in groups] == [theta_d] and snapshot["trainable"] == theta_d
        else:
            assert [g for g, _ in groups] == [theta_d, unfrozen]
            assert snapshot["trainable"] == sorted(theta_d + unfrozen)
            assert groups[1][1] == pytest.approx(expected_lr(cfg, MILESTONE_LR, step), rel=1e-12)
        assert groups[0][1] == pytest.approx(expected_lr(cfg, cfg.train.optim.lr, step), rel=1e-12)
    changed = sorted(k for k in names if not torch.equal(full.start[k], full.end[k]))
    assert changed == sorted(theta_d + unfrozen)  # the rest of theta_s stayed frozen


@pytest.mark.fit
@pytest.mark.parametrize("step", [4, 2])
def test_resume_restores_the_frozen_set_the_groups_and_the_trajectory(milestone_fits, step):
    recorders = milestone_fits["recorders"]
    full, resumed = recorders["full"], recorders[step]
    assert sorted(resumed.steps) == list(range(step, 6))
    for s in resumed.steps:
        assert resumed.steps[s] == full.steps[s], f"step {s}"
    assert resumed.end.keys() == full.end.keys()
    assert all(torch.equal(resumed.end[k], full.end[k]) for k in full.end)


# ---------------------------------------------------------------------- bad policies


@pytest.mark.parametrize("overrides,key,text", [
    (["train.stages.main.trainable=[context_encoder.*,nothing.*]"], "train.stages.main.trainable",
     "nothing.*"),
    (["train.stages.main.unfreeze=[{globs: [nowhere.*], at_step: 2, lr: 0.1}]"],
     "train.stages.main.unfreeze.0.globs", "nowhere.*"),
    (["train.stages.main.unfreeze=[{globs: [src_embed.*], at_step: 2}]"],
     "train.stages.main.unfreeze.0.lr", "lr is required"),
    (["train.stages.main.unfreeze=[{globs: [src_embed.*], at_step: 2, at_epoch: 1, lr: 0.1}]"],
     "train.stages.main.unfreeze.0", "exactly one"),
])
def test_a_bad_policy_fails_before_anything_trains(root, overrides, key, text):
    cfg = tiny_config(root, "model.arch=zhang_doc", "context.prev_sentences=1", *overrides)
    with pytest.raises(DocMTInputError, match="nothing|nowhere|lr is required|exactly one") as err:
        stages.check_stages(cfg)
    assert f"key '{key}'" in str(err.value) and text in str(err.value)


@pytest.mark.fit
def test_a_milestone_that_unfreezes_nothing_new_is_an_error(root):
    cfg = tiny_config(root, "model.arch=zhang_doc", "context.prev_sentences=1",
                      f"train.stages.main.trainable={json.dumps(THETA_D_GLOBS)}",
                      "train.stages.main.unfreeze=[{globs: [context_encoder.*], at_step: 0, lr: 0.1}]")
    with pytest.raises(DocMTInputError, match="unfreezes nothing") as err:
        fit_stage(cfg, "main", root / "nothing_new")
    assert "train.stages.main.unfreeze.0.globs" in str(err.value)


def test_resuming_under_another_policy_is_an_error():
    saved = StagedUnfreezing("s2", THETA_D_GLOBS).state_dict()
    with pytest.raises(DocMTInputError, match="trained with trainable"):
        StagedUnfreezing("s2", ["*"]).load_state_dict(saved)
