import math

import pytest
import torch

from lightning_docmt.nn.reference_loss import label_smoothed_nll
from lightning_docmt.schedules import lr_at, lr_lambda


def approx(x):
    return pytest.approx(x, rel=1e-6)


def test_label_smoothing_matches_hand_computation():
    # Two positions, vocab 3, second position is padding (pad id 0).
    logits = torch.tensor([[[1.0, 2.0, 0.5], [0.3, 0.1, 0.2]]])
    target = torch.tensor([[1, 0]])
    loss, nll, ntok = label_smoothed_nll(logits, target, eps=0.1, pad_id=0)
    z = math.log(math.exp(1.0) + math.exp(2.0) + math.exp(0.5))
    lp = [1.0 - z, 2.0 - z, 0.5 - z]
    expected_nll = -lp[1]
    expected = 0.9 * -lp[1] + 0.1 / 2 * (-lp[0] - lp[2])
    assert ntok.item() == 1
    assert nll.item() == approx(expected_nll)
    assert loss.item() == approx(expected)


def test_no_smoothing_equals_cross_entropy():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    target = torch.randint(1, 7, (2, 5))
    target[1, 3:] = 0
    loss, nll, ntok = label_smoothed_nll(logits, target, eps=0.0, pad_id=0)
    ref = torch.nn.functional.cross_entropy(logits.view(-1, 7), target.view(-1), ignore_index=0,
                                            reduction="sum")
    assert torch.allclose(loss, ref) and torch.allclose(nll, ref)
    assert ntok.item() == 8


def test_inverse_sqrt_schedule_values():
    d, w = 512, 4000
    assert lr_at(1, schedule="inverse_sqrt", lr=1.0, warmup=w, d_model=d) == approx(
        d ** -0.5 * w ** -1.5)
    peak = lr_at(w, schedule="inverse_sqrt", lr=1.0, warmup=w, d_model=d)
    assert peak == approx(d ** -0.5 * w ** -0.5)
    assert lr_at(4 * w, schedule="inverse_sqrt", lr=1.0, warmup=w, d_model=d) == approx(peak / 2)


def test_linear_warmup_schedule_and_offset():
    f = lr_lambda(schedule="linear_warmup_inverse_sqrt", lr=5e-4, warmup=100, d_model=512)
    assert f(0) == approx(5e-4 / 100)
    assert f(99) == approx(5e-4)
    assert f(399) == approx(5e-4 * 0.5)
    g = lr_lambda(schedule="linear_warmup_inverse_sqrt", lr=5e-4, warmup=100, d_model=512,
                  step_offset=300)
    assert g(99) == approx(f(399))


def test_linear_decay_schedule_reaches_zero_at_the_last_update():
    f = lr_lambda(schedule="linear_warmup_linear_decay", lr=2e-3, warmup=100, d_model=512,
                  stage_steps=1100)
    assert f(0) == approx(2e-3 / 100)
    assert f(99) == approx(2e-3)  # update 100: the peak
    assert f(599) == approx(1e-3)  # update 600: half way from the peak to update 1100
    assert f(1099) == 0.0 and f(1500) == 0.0
    # continued from update 1000 of an earlier stage, for 100 more: T = 1100 as above
    g = lr_lambda(schedule="linear_warmup_linear_decay", lr=2e-3, warmup=100, d_model=512,
                  step_offset=1000, stage_steps=100)
    assert g(49) == approx(f(1049))


@pytest.mark.parametrize("stage_steps", [None, -1, 50, 100])
def test_linear_decay_needs_a_length_beyond_its_warmup(stage_steps):
    with pytest.raises(ValueError, match="needs a training length"):
        lr_lambda(schedule="linear_warmup_linear_decay", lr=1.0, warmup=100, d_model=8,
                  stage_steps=stage_steps)


def test_unknown_schedule_rejected():
    with pytest.raises(ValueError, match="unknown lr schedule"):
        lr_lambda(schedule="cosine", lr=1.0, warmup=1, d_model=8)


@pytest.mark.fit
def test_a_stage_trains_on_its_own_optim_overrides_and_decays_to_zero(tmp_path):
    from tests.helpers.stage_fits import StepRecorder, fit_stage, tiny_config

    cfg = tiny_config(tmp_path, "train.stages.main.optim={schedule: linear_warmup_linear_decay, "
                                "lr: 0.002, warmup_steps: 4}", "train.max_steps=10")
    assert cfg.train.optim.schedule == "linear_warmup_inverse_sqrt"  # the run's own stays as it was
    recorder = StepRecorder()
    fit_stage(cfg, "main", tmp_path / "main", callbacks=[recorder])
    lrs = [recorder.steps[step]["groups"][0][1] for step in sorted(recorder.steps)]
    expected = [lr_at(t, schedule="linear_warmup_linear_decay", lr=0.002, warmup=4, d_model=32,
                      total_steps=10) for t in range(1, 11)]
    assert lrs == pytest.approx(expected) and expected[3] == approx(0.002) and expected[-1] == 0.0
