"""The torchmetrics metrics of `DocMTModule` (`training/metrics.py`) and what the evaluation loop
computes from them: validation NLL token-weighted over the whole split, a loop that starts empty,
a training counter that no loop resets, checkpoints without metric states. Their sums over ranks:
`tests/ddp/`."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from lightning_docmt.training.evaluation_loop import EvaluationLoop
from lightning_docmt.training.metrics import DecodeSpeed, Sums
from lightning_docmt.training.module import DocMTModule
from tests.helpers.model_inputs import VOCAB, random_batch
from tests.helpers.stage_fits import tiny_config

ROOT_ONLY = SimpleNamespace(is_global_zero=True)  # the strategy of one process


def test_sums_add_up_by_name_in_their_dtype():
    sums = Sums("loss", "tokens")
    sums.update(loss=torch.tensor(1.5), tokens=torch.tensor(3))
    sums.update(loss=torch.tensor(0.25, dtype=torch.bfloat16), tokens=4)
    assert sums.compute() == {"loss": 1.75, "tokens": 7.0}
    assert sums.loss.dtype == sums.tokens.dtype == torch.float32
    with pytest.raises(KeyError, match="nll"):
        sums.update(nll=torch.tensor(1.0))
    counts = Sums("tokens", dtype=torch.long)
    counts.update(tokens=torch.tensor(2**40))
    counts.update(tokens=torch.tensor(1))
    assert counts.compute() == {"tokens": 2**40 + 1}  # exact: a float32 sum would lose the 1
    with pytest.raises(RuntimeError):
        counts.update(tokens=torch.tensor(0.5))  # no fraction of a token into an integer sum


def test_computing_leaves_the_sums_accumulating():
    sums = Sums("tokens", dtype=torch.long)
    sums.update(tokens=torch.tensor(5))
    assert sums.compute() == {"tokens": 5}
    sums.update(tokens=torch.tensor(2))
    assert sums.compute() == {"tokens": 7}
    sums.reset()
    sums.update(tokens=torch.tensor(1))
    assert sums.compute() == {"tokens": 1}


def test_decode_speed_is_sentences_over_summed_seconds():
    speed = DecodeSpeed()
    speed.update(0.5, 10)
    speed.update(1.5, 30)
    assert speed.compute() == 20.0
    assert speed.seconds.dtype == speed.sentences.dtype == torch.float64


def test_states_keep_their_dtype_when_the_module_is_converted():
    """`bf16-true` converts the LightningModule with `.to(dtype)`: a float32 loss sum that became
    bfloat16 would round 1 + 1/512 to 1."""
    sums, speed = Sums("nll"), DecodeSpeed()
    for metric in (sums, speed):
        metric.to(torch.bfloat16)
    sums.update(nll=torch.tensor(1.0))
    sums.update(nll=torch.tensor(1 / 512))
    assert sums.nll.dtype == torch.float32 and sums.compute() == {"nll": 1 + 1 / 512}
    assert speed.seconds.dtype == torch.float64
    sums.reset()
    assert sums.nll.dtype == torch.float32  # the default it resets to kept its dtype too


def module() -> DocMTModule:
    cfg = tiny_config(Path("/nonexistent"), "model.dropout=0.0")
    return DocMTModule(OmegaConf.to_container(cfg, resolve=True), VOCAB, VOCAB).eval()


def loop(docmt: DocMTModule, split: str = "valid") -> EvaluationLoop:
    """An evaluation loop of `docmt` that reads no split (a sentence-level model)."""
    datamodule = SimpleNamespace(split=lambda name: None, window=None)
    return EvaluationLoop(docmt.model, docmt.cfg, datamodule, split, docmt.eval_metrics)


def test_the_metrics_are_submodules_that_no_checkpoint_holds():
    docmt = module()
    assert {"train_tokens", "eval_metrics"} <= {name for name, _ in docmt.named_children()}
    docmt.train_tokens.update(tokens=torch.tensor(3))
    assert all(key.startswith("model.") for key in docmt.state_dict())


@torch.no_grad()
def test_validation_nll_is_token_weighted_over_every_batch_and_each_loop_starts_empty():
    """Two batches of 3 and 24 target tokens: the logged NLL is their NLL summed over their tokens
    together, not the mean of the two batch means; the next loop counts only its own batches, and
    the fit's training tokens stay as they were."""
    docmt = module()
    docmt.train_tokens.update(tokens=torch.tensor(100))
    batches = [random_batch([4], [2], seed=1), random_batch([5, 7, 3], [9, 6, 6], seed=2)]
    terms = [docmt.model.loss_terms(b, docmt.output_loss) for b in batches]
    assert [int(t.tokens) for t in terms] == [3, 24]
    first = loop(docmt)
    for batch in batches:
        first.step(batch, 0, docmt.output_loss)
    scores = first.scores("val", False, ROOT_ONLY, None)
    nll = sum(float(t.nll_sum) for t in terms) / 27
    assert scores["val/nll"] == pytest.approx(nll, rel=1e-6)
    assert scores["val/loss"] == pytest.approx(sum(float(t.loss_sum) for t in terms) / 27, rel=1e-6)
    assert scores["val/ppl"] == pytest.approx(math.exp(scores["val/nll"]), rel=1e-9)
    batch_means = sum(float(t.nll_sum) / int(t.tokens) for t in terms) / 2
    assert abs(batch_means - nll) > 1e-3  # the two means differ: the test tells them apart
    second = loop(docmt)
    second.step(batches[0], 0, docmt.output_loss)
    assert second.scores("val", False, ROOT_ONLY, None)["val/nll"] == pytest.approx(
        float(terms[0].nll_sum) / 3, rel=1e-6)
    assert docmt.train_tokens.compute() == {"tokens": 100}
