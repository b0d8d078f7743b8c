"""The batch of one update (`training/update_size.py`) and its per-token gradient.

- `train.tokens_per_update` derives the accumulation from the world size; conflicting or
  unreachable settings are one error naming the key.
- Accumulated batches give the gradient of the per-token loss of their union: two batches of 9 and
  26 target tokens (those of `tests/helpers/grad_update.py`) accumulated in one update must give the
  gradient that one batch holding both gives. Averaging the two batches' per-token gradients (what
  Lightning's division of each batch's loss by the accumulation does) weighs a token of the short
  batch about 3x and fails this test.
- A tiny fit through `run_stage` with accumulation validates every `val_every_steps` *updates*
  and records its update in the stage's `done.json`.
"""

from __future__ import annotations

import json
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader

from lightning_docmt.batch import PAD_ID
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.training import run as train
from lightning_docmt.training.update_size import update_size
from tests.helpers.grad_update import RANK_BATCHES, GradRecorder, build_module, recording_module, union_batch
from tests.helpers.stage_fits import tiny_config


@pytest.fixture
def config(tmp_path: Path):
    def make(*overrides: str):
        return tiny_config(tmp_path, *overrides)
    return make


@pytest.mark.parametrize("world, accumulate", [(1, 4), (2, 2), (4, 1), (3, 2)])
def test_the_accumulation_reaches_the_update_on_any_world_size(config, world, accumulate):
    """24,000 budget tokens of 6,000 per device: 4 batches on 1 device, 1 on 4; 3 devices round
    up to 2 batches each (36,000: at least the stated update)."""
    size = update_size(config("train.tokens_per_update=24000", "data.max_tokens=6000"), world)
    assert (size.accumulate, size.budget) == (accumulate, world * 6000 * accumulate)


def test_without_tokens_per_update_the_accumulation_is_as_given(config):
    size = update_size(config("train.accumulate=3"), world_size=2)
    assert (size.accumulate, size.budget) == (3, 2 * 1024 * 3)  # tiny profile: max_tokens 1024


def test_a_document_order_update_is_described_in_sentences(config):
    size = update_size(config("data.document_order=true", "data.max_documents=16", "train.accumulate=2"),
                       world_size=3)
    assert size.accumulate == 2
    assert "data.max_documents=16" in size.describe() and "up to 96 sentences per update" in size.describe()


@pytest.mark.parametrize("overrides, message", [
    (["train.tokens_per_update=4096", "train.accumulate=2"], "does not combine with train.accumulate=2"),
    (["train.tokens_per_update=1000"], "lower data.max_tokens to at most 1000"),
    (["train.tokens_per_update=4096", "data.document_order=true"], "document-order batches do not have"),
])
def test_conflicting_or_unreachable_updates_name_the_key(config, overrides, message):
    with pytest.raises(DocMTInputError) as err:
        update_size(config(*overrides), world_size=1)
    assert err.value.key == "train.tokens_per_update" and message in str(err.value)


def test_the_cpu_and_tiny_profiles_switch_the_paper_batch_off_and_the_paper_profile_keeps_it():
    from lightning_docmt.config import composition

    def tokens(profile: str):
        return composition.compose(None, ["model.arch=zhang_doc"], profile=profile).train.tokens_per_update

    assert (tokens("paper"), tokens("cpu"), tokens("tiny")) == (24000, None, None)


@pytest.mark.fit
def test_accumulated_batches_give_the_per_token_gradient_of_their_union():
    tokens = [int(b["tgt_out"].ne(PAD_ID).sum()) for b in RANK_BATCHES]
    assert tokens == [9, 26]
    recorded: dict[str, torch.Tensor] = {}

    class Recorder(GradRecorder):
        def record(self, trainer: pl.Trainer, pl_module) -> None:
            recorded.update({n: p.grad.clone() for n, p in pl_module.model.named_parameters()
                             if p.grad is not None})

    recorder = Recorder(Path("."))
    module = recording_module(build_module("transformer"), recorder)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=1, accumulate_grad_batches=2,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0, callbacks=[recorder])
    trainer.fit(module, train_dataloaders=DataLoader(RANK_BATCHES, batch_size=None))
    assert trainer.global_step == 1

    reference = build_module("transformer")
    reference.model.load_state_dict(recorder.initial)
    loss_sum, _, ntok = reference.loss_terms(union_batch(RANK_BATCHES))
    assert int(ntok) == sum(tokens)
    (loss_sum / ntok).backward()
    expected = {n: p.grad for n, p in reference.model.named_parameters() if p.grad is not None}
    assert sorted(recorded) == sorted(expected)
    for name, grad in expected.items():
        assert torch.allclose(recorded[name], grad, rtol=0, atol=1e-6), name


@pytest.mark.fit
def test_a_fit_with_accumulation_validates_every_val_every_steps_updates(tmp_path: Path):
    """Tiny profile, 1,024 budget tokens per batch: 2,048 per update accumulates 2 batches. Lightning
    counts the validation interval in batches; it must still come every 2 updates."""
    cfg = tiny_config(tmp_path, "train.tokens_per_update=2048", "train.max_steps=4",
                      "train.val_every_steps=2", "train.checkpoint_every_steps=0")
    result = train.run_stage(cfg, "main", tmp_path / "run", {})
    info = json.loads((result.checkpoint.parent / "done.json").read_text())
    assert info["trained_steps"] == 4
    assert info["update"] == {"world_size": 1, "max_tokens": 1024, "accumulate": 2, "budget_tokens": 2048}
    rows = (tmp_path / "run" / "main" / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    step, val_loss = header.index("step"), header.index("val/loss")
    validated = sorted({int(r.split(",")[step]) for r in rows[1:] if r.split(",")[val_loss]})
    assert validated == [1, 3]  # Lightning logs validation at the step index of its last batch
