"""Optimizer phases (`nn/model_hooks.OptimizerPhase`, `training/optimizer_phases.py`): several optimizers
taking turns under manual optimisation, freezing by optimizer, clipping, checkpointed phase state.

The fits train the stand-in `PhasedTransformer` (tests/helpers/hook_stand_ins.py: phase "a" over
`encoder.*`, phase "b" over `decoder.*`, alternating every 2 updates) at the tiny profile on
`synthetic:tiny`, with the embeddings frozen by the stage (every trainable parameter must be in a
phase). One uninterrupted fit records the weights before every update; a second fit resumes from
its checkpoint after update 3, in the middle of a turn of phase "b".
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from lightning_docmt.errors import DocMTInputError
from lightning_docmt.nn.model_hooks import OptimizerPhase
from lightning_docmt.training import stages
from lightning_docmt.training import trainer as trainer_factory
from lightning_docmt.training.optimizer_phases import PhaseCycle
from tests.helpers.hook_stand_ins import PHASE_GLOBS, PHASE_STEPS, PHASED, PhaseRecorder, phase_of
from tests.helpers.stage_fits import fit_then_resume, tiny_config

STEPS, RESUME_AT, CLIP = 8, 3, 0.1
EXPECTED_PHASES = [("a", "b")[step // PHASE_STEPS % 2] for step in range(STEPS)]  # a a b b a a b b
PHASED_RUN = [f"model.arch={PHASED}", f"train.max_steps={STEPS}", "train.val_every_steps=4",
              "train.stages.main.trainable=[encoder.*,decoder.*]", f"train.optim.clip_norm={CLIP}"]


@pytest.fixture(scope="module")
def phased(tmp_path_factory: pytest.TempPathFactory, hook_archs) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("phases")
    full, resumed = PhaseRecorder(), PhaseRecorder()
    fit, resumed_fit = fit_then_resume(tiny_config(root, *PHASED_RUN), root, full, resumed, RESUME_AT)
    return {"full": full, "fit": fit, "resumed": resumed, "resumed_fit": resumed_fit}


@pytest.mark.fit
def test_the_phases_take_turns_and_each_update_changes_only_its_parameters(phased):
    full = phased["full"]
    assert [full.steps[s]["phase"] for s in range(STEPS)] == EXPECTED_PHASES
    assert phased["fit"].module.model.phases_seen == EXPECTED_PHASES  # the loss hook got the phase
    for step in range(STEPS):
        before = full.steps[step]["weights"]
        after = full.steps[step + 1]["weights"] if step + 1 < STEPS else full.end
        changed = {n for n in before if not torch.equal(before[n], after[n])}
        phase_params = {n for n in before if phase_of(n) == EXPECTED_PHASES[step]}
        assert phase_params and changed == phase_params, step  # the rest is bit-identical
        assert full.steps[step]["no_gradients"], step  # nothing leaks into the next update


@pytest.mark.fit
def test_each_optimizer_holds_exactly_its_phases_trainable_parameters(phased):
    module = phased["fit"].module
    names = [n for n, _ in module.model.named_parameters()]
    expected = [sorted(n for n in names if phase_of(n) == p) for p in PHASE_GLOBS]
    assert all(expected) and not set(expected[0]) & set(expected[1])
    for snapshot in phased["full"].steps.values():
        assert [sorted(params) for params, _ in snapshot["optimizers"]] == expected
    trainable = sorted(n for n, p in module.model.named_parameters() if p.requires_grad)
    assert trainable == sorted(expected[0] + expected[1])  # the embeddings are frozen by the stage


@pytest.mark.fit
def test_each_phase_clips_its_own_gradients(phased):
    norms = [(s["norm_before_clip"], s["norm_after_clip"]) for s in phased["full"].steps.values()]
    assert all(after <= CLIP * (1 + 1e-5) for _, after in norms)
    assert all(before > CLIP for before, _ in norms)  # so every update was clipped


@pytest.mark.parametrize("arch,trainer_clips", [("transformer", True), (PHASED, False)])
def test_the_trainer_clips_only_under_automatic_optimisation(tmp_path, hook_archs, arch,
                                                             trainer_clips):
    """Lightning refuses `gradient_clip_val` with manual optimisation; the module clips then."""
    cfg = tiny_config(tmp_path, f"model.arch={arch}", f"train.optim.clip_norm={CLIP}")
    trainer, _ = trainer_factory.build_trainer(cfg, "main", tmp_path / "run")
    assert trainer.gradient_clip_val == (CLIP if trainer_clips else None)


@pytest.mark.fit
def test_a_fit_resumed_mid_phase_continues_in_that_phase_to_the_same_weights(phased):
    full, resumed = phased["full"], phased["resumed"]
    assert sorted(resumed.steps) == list(range(RESUME_AT, STEPS))
    assert resumed.steps[RESUME_AT]["phase"] == "b" == EXPECTED_PHASES[RESUME_AT - 1]  # mid-turn
    assert phased["resumed_fit"].module.model.phases_seen == EXPECTED_PHASES[RESUME_AT:]
    for step in range(RESUME_AT, STEPS):
        assert resumed.steps[step]["optimizers"] == full.steps[step]["optimizers"]  # names and lr
    assert all(torch.allclose(resumed.end[k], full.end[k], atol=1e-6, rtol=0) for k in full.end)


def test_each_phases_schedule_counts_its_own_updates():
    cycle = PhaseCycle([OptimizerPhase("a", ("x",), 3), OptimizerPhase("b", ("y",), 1)])
    turns = []
    for _ in range(9):
        turns.append(cycle.current.name)
        cycle.advance()
    assert "".join(turns) == "aaabaaaba"
    assert [cycle.updates_within(0, 9), cycle.updates_within(1, 9)] == [turns.count("a"), turns.count("b")]
    assert cycle.updates_within(0, -1) == -1  # no step limit


def test_a_checkpoint_of_other_phases_is_refused():
    saved = PhaseCycle([OptimizerPhase("a", ("x",), 2), OptimizerPhase("b", ("y",), 2)]).state_dict()
    other = PhaseCycle([OptimizerPhase("a", ("x",), 3), OptimizerPhase("b", ("y",), 2)])
    with pytest.raises(DocMTInputError, match="trained with optimizer phases"):
        other.load_state_dict(saved)


@pytest.mark.parametrize("overrides,key,text", [
    (["train.stages.main.trainable=[encoder.*]"], "train.stages.main.trainable",
     "phase 'b': glob 'decoder.*' matches no trainable parameter"),
    ([], "train.stages.main.trainable", "trainable parameters are in no optimizer phase"),
    (["train.stages.main.trainable=[encoder.*,decoder.*]", "train.accumulate=2"], "train.accumulate",
     "without gradient accumulation"),
    (["train.stages.main.trainable=[encoder.*]",
      "train.stages.main.unfreeze=[{globs: [decoder.*], at_step: 2, lr: 0.1}]"],
     "train.stages.main.unfreeze", "milestones do not combine"),
])
def test_settings_the_phases_cannot_work_with_fail_before_training(tmp_path, hook_archs, overrides,
                                                                   key, text):
    cfg = tiny_config(tmp_path, f"model.arch={PHASED}", *overrides)
    with pytest.raises(DocMTInputError) as err:
        stages.check_stages(cfg)
    assert f"key '{key}'" in str(err.value) and text in str(err.value)
