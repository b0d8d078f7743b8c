"""The fused output-projection loss equals the plain label-smoothed loss over full logits."""

import pytest
import torch
from omegaconf import OmegaConf
from torch.overrides import TorchFunctionMode

from lightning_docmt.config.registry import ARCHS, ArchEntry
from lightning_docmt.models.transformer import TransformerConfig, TransformerSeq2Seq
from lightning_docmt.nn import output_loss
from lightning_docmt.nn.output_loss import output_label_smoothed_nll
from lightning_docmt.nn.reference_loss import label_smoothed_nll
from lightning_docmt.training.module import DocMTModule

VOCAB, DIM = 50, 16


def _inputs(seed=0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(3, 7, DIM, generator=gen)
    weight = torch.randn(VOCAB, DIM, generator=gen)
    target = torch.randint(1, VOCAB, (3, 7), generator=gen)
    target[1, 4:] = 0  # padding
    target[2, 2:] = 0
    return hidden, weight, target


def _reference(hidden, weight, target, eps, upstream):
    hidden = hidden.clone().requires_grad_()
    weight = weight.clone().requires_grad_()
    loss, nll, ntok = label_smoothed_nll(hidden @ weight.t(), target, eps, pad_id=0)
    (loss * upstream).backward()
    return loss, nll, ntok, hidden.grad, weight.grad


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("chunk_rows", [1, 4, 100])  # one row per chunk, a ragged last chunk, one chunk
def test_fused_loss_and_gradients_equal_the_unfused_ones(monkeypatch, eps, chunk_rows):
    monkeypatch.setattr(output_loss, "CHUNK_ELEMENTS", chunk_rows * VOCAB)
    hidden, weight, target = _inputs()
    ref_loss, ref_nll, ref_ntok, ref_dh, ref_dw = _reference(hidden, weight, target, eps, 0.3)
    h = hidden.clone().requires_grad_()
    w = weight.clone().requires_grad_()
    loss, nll, ntok = output_label_smoothed_nll(h, w, target, eps, pad_id=0)
    (loss * 0.3).backward()
    assert int(ntok) == int(ref_ntok) == 13
    assert torch.allclose(loss, ref_loss, rtol=1e-5) and torch.allclose(nll, ref_nll, rtol=1e-5)
    assert torch.allclose(h.grad, ref_dh, atol=1e-5)
    assert torch.allclose(w.grad, ref_dw, atol=1e-5)
    assert h.grad[target.eq(0)].abs().max() == 0  # padding positions get no gradient


def test_frozen_output_weight_gets_no_gradient():
    hidden, weight, target = _inputs(1)
    *_, ref_dh, _ = _reference(hidden, weight, target, 0.1, 1.0)
    h = hidden.clone().requires_grad_()
    loss, _, _ = output_label_smoothed_nll(h, weight, target, 0.1, pad_id=0)
    loss.backward()
    assert weight.grad is None and torch.allclose(h.grad, ref_dh, atol=1e-5)


class MatmulCounter(TorchFunctionMode):
    """Counts the matrix products run while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += getattr(func, "__name__", "") in ("matmul", "__matmul__", "mm")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("no_grad", [torch.no_grad, torch.inference_mode])  # Lightning's eval loops
def test_without_grad_only_the_values_are_computed(monkeypatch, no_grad):
    """One matmul per chunk (the logits) without grad mode, although both inputs require grad;
    with it, two more per chunk (the hidden and weight gradients)."""
    monkeypatch.setattr(output_loss, "CHUNK_ELEMENTS", 4 * VOCAB)  # 13 target tokens: 4 chunks
    hidden, weight, target = _inputs(2)
    ref_loss, ref_nll, *_ = _reference(hidden, weight, target, 0.1, 1.0)
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    with no_grad(), MatmulCounter() as counted:
        loss, nll, _ = output_label_smoothed_nll(h, w, target, 0.1, 0)
    with MatmulCounter() as counted_with_grad:
        output_label_smoothed_nll(h, w, target, 0.1, 0)
    assert (counted.count, counted_with_grad.count) == (4, 12)
    assert not loss.requires_grad
    assert torch.allclose(loss, ref_loss, rtol=1e-5) and torch.allclose(nll, ref_nll, rtol=1e-5)


def test_autocast_runs_the_matmuls_in_bf16_and_keeps_float32_gradients():
    hidden, weight, target = _inputs(3)
    ref_loss, _, _, ref_dh, ref_dw = _reference(hidden, weight, target, 0.1, 1.0)
    h = hidden.clone().requires_grad_()
    w = weight.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _, _ = output_label_smoothed_nll(h, w, target, 0.1, pad_id=0)
    loss.backward()
    assert loss.dtype == torch.float32 and h.grad.dtype == w.grad.dtype == torch.float32
    # bf16 logits: ~3 significant digits, so close to but not equal to the float32 figures
    assert 0 < abs(loss.item() - ref_loss.item()) < 2e-2 * ref_loss.item()
    assert torch.allclose(w.grad, ref_dw, atol=5e-2 * ref_dw.abs().max().item())
    assert torch.allclose(h.grad, ref_dh, atol=5e-2 * ref_dh.abs().max().item())


class BiasedOutputTransformer(TransformerSeq2Seq):
    def __init__(self, cfg: TransformerConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__(cfg, src_vocab_size, tgt_vocab_size)
        self.output = torch.nn.Linear(cfg.d_model, tgt_vocab_size, bias=True)


def test_a_model_whose_output_projection_has_a_bias_is_refused(monkeypatch):
    """The fused loss has no bias term: such a model would train without its bias."""
    monkeypatch.setitem(ARCHS, "biased", ArchEntry("biased", TransformerConfig, BiasedOutputTransformer))
    model_cfg = OmegaConf.create({"arch": "biased", "d_model": DIM, "heads": 2, "ffn_dim": DIM,
                                  "enc_layers": 1, "dec_layers": 1, "tie_output": False})
    with pytest.raises(TypeError, match="BiasedOutputTransformer.output has a bias"):
        DocMTModule.build_model(model_cfg, VOCAB, VOCAB)
    monkeypatch.setitem(ARCHS, "biased", ArchEntry("biased", TransformerConfig, TransformerSeq2Seq))
    assert DocMTModule.build_model(model_cfg, VOCAB, VOCAB).output.bias is None
