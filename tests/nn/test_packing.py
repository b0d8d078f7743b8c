"""Packed positions (`nn/packing.py`): an encoder over the real tokens of a padded batch only
computes what the padded one computes, draws the same dropout masks, and trains the same."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_docmt.batch import PAD_ID
from lightning_docmt.config.schema import ModelConfig
from lightning_docmt.nn import packing as packing_module
from lightning_docmt.nn.attention import AttentionMemory, key_mask
from lightning_docmt.nn.layers import LayerInputs, TransformerStack, cross_attention_block, encoder_layer
from lightning_docmt.nn.output_loss import output_label_smoothed_nll
from lightning_docmt.nn.packing import Packing
from tests.helpers.model_inputs import random_batch, tiny_model
from tests.models.model_checks import (
    assert_packing_changes_nothing,
    assert_same_training,
    gradients,
    packed_and_padded,
)

D = 16
PAD = torch.tensor([[False] * 6, [False] * 2 + [True] * 4, [True] * 6, [False] * 5 + [True]])  # (3 + 1, 6)


def test_pack_keeps_the_real_positions_row_by_row_and_unpack_puts_them_back_with_zeros_between():
    x = torch.randn(4, 6, D)
    packing = Packing.of_mask(key_mask(PAD), x)
    packed = packing.pack(x)
    assert torch.equal(packed, x[~PAD])  # (13, D), rows in order
    restored = packing.unpack(packed)
    assert torch.equal(restored[~PAD], x[~PAD])
    assert torch.equal(restored[PAD], torch.zeros(int(PAD.sum()), D))


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_packed_dropout_draws_the_mask_of_the_padded_batch(p):
    x = torch.randn(4, 6, D, 8)
    packing = Packing.of_mask(key_mask(PAD), x)
    dropout = nn.Dropout(p).train()
    torch.manual_seed(3)
    expected = F.dropout(x, p, training=True)[~PAD]
    after = torch.rand(1)  # where the generator is afterwards
    torch.manual_seed(3)
    assert torch.equal(packing.dropout(dropout, packing.pack(x)), expected)
    assert torch.equal(torch.rand(1), after)
    assert torch.equal(packing.dropout(dropout.eval(), packing.pack(x)), packing.pack(x))


def test_only_a_cpu_batch_padded_enough_packs(monkeypatch):
    x = torch.randn(4, 6, D)
    share = int(PAD.sum()) / PAD.numel()  # 11 of 24 positions
    monkeypatch.setattr(packing_module, "MIN_PADDING_SHARE", share + 0.01)
    assert Packing.of_mask(key_mask(PAD), x) is None
    monkeypatch.setattr(packing_module, "MIN_PADDING_SHARE", share - 0.01)
    assert Packing.of_mask(key_mask(PAD), x) is not None
    assert Packing.of_mask(key_mask(PAD), x.to("meta")) is None  # off the CPU: padded
    assert Packing.of_mask(None, x) is None
    assert Packing.of_mask(torch.ones(4, 1, 6, 6, dtype=torch.bool), x) is None  # not a key mask


@pytest.mark.parametrize("pre_norm", [False, True])
def test_a_packed_encoder_with_dropout_computes_and_trains_as_the_padded_one(monkeypatch, pre_norm):
    cfg = ModelConfig(d_model=D, heads=2, ffn_dim=32, dropout=0.3, attn_dropout=0.2, relu_dropout=0.3,
                      pre_norm=pre_norm)
    torch.manual_seed(0)
    stack = TransformerStack([encoder_layer(cfg) for _ in range(2)], D, pre_norm).train()
    memory_pad = torch.tensor([[False] * 3 + [True] * 2, [False] * 5, [False] + [True] * 4, [True] * 5])
    memory = AttentionMemory.from_padding(torch.randn(4, 5, D), memory_pad)
    for layer in stack.layers:  # a cross-attention over a padded memory too
        layer.insert("cross_attn", cross_attention_block(cfg), before="ffn")
    x = torch.randn(4, 6, D)

    def compute():
        stack.zero_grad()
        out = stack(x, LayerInputs(self_mask=key_mask(PAD), memories={"memory": AttentionMemory(memory.states,
                                                                                                memory.mask)}))
        (out[~PAD] ** 2).sum().backward()
        return out, gradients(stack)

    packed, padded = packed_and_padded(compute, monkeypatch)
    assert torch.equal(packed[0][PAD], torch.zeros(int(PAD.sum()), D))
    assert_same_training((packed[0][~PAD], packed[1]), (padded[0][~PAD], padded[1]))


def label_smoothed_loss(model: nn.Module, batch: dict[str, Tensor]) -> None:
    output_loss = lambda hidden, target: output_label_smoothed_nll(hidden, model.output.weight, target,  # noqa: E731
                                                                  0.1, PAD_ID)
    model.loss_terms(batch, output_loss).loss_sum.backward()


def test_concat_trains_and_translates_the_same_packed(monkeypatch):
    """The other architectures check the same in their own modules (tests/models/)."""
    assert_packing_changes_nothing(lambda: tiny_model("concat"),
                                   random_batch([4, 2, 6, 3], [3, 5, 2, 4], ctx_lengths=[0, 7, 3, 9]), monkeypatch)


def test_a_transformer_batch_without_padding_stays_padded(monkeypatch):
    """The sentence rows of a bucketed batch are nearly all tokens: below MIN_PADDING_SHARE nothing packs."""
    calls = []
    original = Packing.pack
    monkeypatch.setattr(Packing, "pack", lambda self, x: calls.append(x.shape) or original(self, x))
    model = tiny_model("transformer").train()
    label_smoothed_loss(model, random_batch([5, 5, 5, 5], [3, 4, 2, 4]))
    assert calls == [] and packing_module.MIN_PADDING_SHARE > 0
    label_smoothed_loss(model, random_batch([9, 2, 2, 3], [3, 4, 2, 4]))
    assert calls  # 20 of 40 positions padded: the encoder packs
