"""`MemoryProjection`: external-width states -> a cross-attention memory of width d_model."""

from __future__ import annotations

import pytest
import torch

from lightning_docmt.config.schema import ModelConfig
from lightning_docmt.nn.attention import key_mask
from lightning_docmt.nn.layers import LayerInputs, cross_attention_block
from lightning_docmt.nn.memory import MemoryProjection
from lightning_docmt.nn.residual import LAYER_NORM_EPS

D, H, W_EXT = 16, 4, 24  # model width, heads, the external encoder's width
PAD = torch.tensor([[False, False, False, True, True],
                    [False, True, True, True, True]])  # (B, E) = (2, 5), True = padding


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_projection_is_linear_then_layer_norm_with_the_padding_mask():
    projection = MemoryProjection(W_EXT, D).eval()
    states = torch.randn(2, 5, W_EXT)
    memory = projection(states, PAD)
    assert memory.states.shape == (2, 5, D) and memory.mask.shape == (2, 1, 1, 5)
    assert torch.equal(memory.mask, key_mask(PAD))
    expected = torch.nn.functional.layer_norm(states @ projection.proj.weight.T, (D,),
                                              eps=LAYER_NORM_EPS)  # zero bias, unit LN at init
    assert torch.allclose(memory.states[~PAD], expected[~PAD], atol=1e-5)
    assert (memory.states[PAD] == 0).all()
    assert {n for n, _ in projection.named_parameters()} == {"proj.weight", "proj.bias",
                                                             "norm.weight", "norm.bias"}
    plain = MemoryProjection(W_EXT, D, layer_norm=False)
    assert {n for n, _ in plain.named_parameters()} == {"proj.weight", "proj.bias"}
    assert torch.allclose(plain(states, PAD).states[~PAD], plain.proj(states)[~PAD])


def test_dropout_is_active_in_training_only():
    projection = MemoryProjection(W_EXT, D, dropout=0.5)
    states = torch.randn(2, 5, W_EXT)
    assert not torch.equal(projection(states, PAD).states, projection(states, PAD).states)
    projection.eval()
    assert torch.equal(projection(states, PAD).states, projection(states, PAD).states)


@pytest.mark.parametrize("junk", [1e4, float("nan")])
def test_padded_positions_get_no_attention_weight(junk):
    """Whatever the external encoder leaves at padded positions cannot change what a
    cross-attention sublayer of `nn/layers.py` reads, while any real position does."""
    projection = MemoryProjection(W_EXT, D).eval()
    block = cross_attention_block(ModelConfig(d_model=D, heads=H, ffn_dim=32, dropout=0.0),
                                  memory="context").eval()
    x, states = torch.randn(2, 3, D), torch.randn(2, 5, W_EXT)

    def attend(states: torch.Tensor) -> torch.Tensor:
        return block(x, LayerInputs(memories={"context": projection(states, PAD)}))

    reference = attend(states)
    assert torch.isfinite(reference).all()
    for b, length in enumerate((~PAD).sum(1).tolist()):  # = attending to the real positions only
        alone = projection(states[b:b + 1, :length], PAD[b:b + 1, :length])
        expected = block(x[b:b + 1], LayerInputs(memories={"context": alone}))
        assert torch.allclose(reference[b:b + 1], expected, atol=1e-6)
    assert torch.equal(attend(states.masked_fill(PAD[:, :, None], junk)), reference)
    changed = states.clone()
    changed[1, 0] += 1.0  # the only real position of row 1
    moved = attend(changed)
    assert torch.equal(moved[0], reference[0]) and not torch.allclose(moved[1], reference[1])
