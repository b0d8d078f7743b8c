"""Unit tests of the reusable blocks in `lightning_docmt.nn` against independent references."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import pytest
import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from lightning_docmt.batch import PAD_ID
from lightning_docmt.config.schema import ModelConfig
from lightning_docmt.nn.attention import (
    AttentionCache,
    AttentionMemory,
    MultiHeadAttention,
    key_mask,
    masked_softmax_attention,
    scaled_dot_product_attention,
)
from lightning_docmt.nn.embedding import TokenEmbedding, sinusoidal_positions
from lightning_docmt.nn.layers import (
    FeedForward,
    LayerInputs,
    cross_attention_block,
    decoder_layer,
    encoder_layer,
)
from lightning_docmt.nn.residual import LAYER_NORM_EPS, ResidualBlock
from lightning_docmt.nn.seq2seq import DecoderCache, EncoderState, select_rows

D, H = 16, 4


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def reference_mha(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    """torch's own implementation carrying the same weights."""
    ref = nn.MultiheadAttention(D, H, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.in_proj_weight)
        ref.in_proj_bias.copy_(torch.randn(3 * D))
        ours.in_proj_bias.copy_(ref.in_proj_bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(torch.randn(D))
        ours.out_proj.bias.copy_(ref.out_proj.bias)
    return ref.eval()


def test_self_attention_with_padding_matches_torch_reference():
    mha = MultiHeadAttention(D, H).eval()
    ref = reference_mha(mha)
    x = torch.randn(3, 5, D)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] + [True] * 4])
    expected, _ = ref(x, x, x, key_padding_mask=pad)
    got = mha(x, None, key_mask(pad))
    assert torch.allclose(got[~pad], expected[~pad], atol=1e-5)


def test_cross_attention_matches_torch_reference():
    mha = MultiHeadAttention(D, H).eval()
    ref = reference_mha(mha)
    x, memory = torch.randn(2, 4, D), torch.randn(2, 6, D)
    pad = torch.tensor([[False] * 6, [False] * 2 + [True] * 4])
    expected, _ = ref(x, memory, memory, key_padding_mask=pad)
    assert torch.allclose(mha(x, memory, key_mask(pad)), expected, atol=1e-5)


@pytest.mark.parametrize("with_padding_mask", [False, True])
def test_causal_self_attention_matches_torch_reference(with_padding_mask):
    mha = MultiHeadAttention(D, H).eval()
    ref = reference_mha(mha)
    x = torch.randn(2, 5, D)
    pad = torch.tensor([[False] * 5, [False] * 4 + [True]])
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)  # True = not allowed (torch convention)
    expected, _ = ref(x, x, x, attn_mask=future, key_padding_mask=pad if with_padding_mask else None)
    got = mha(x, None, key_mask(pad) if with_padding_mask else None, causal=True)
    assert torch.allclose(got, expected, atol=1e-5)


def test_incremental_cache_equals_causal_attention():
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(2, 6, D)
    full = mha(x, None, causal=True)
    cache = AttentionCache()
    steps = [mha(x[:, t:t + 1], None, cache=cache) for t in range(6)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-6)
    assert cache.key.shape == (2, H, 6, D // H)


@pytest.mark.parametrize("queries", [1, 4])
@pytest.mark.parametrize("masked", [False, True])
def test_the_cpu_attention_computes_what_the_math_kernel_does_even_with_nothing_to_attend(masked, queries):
    query, key, value = torch.randn(3, H, queries, 8), torch.randn(3, H, 5, 8), torch.randn(3, H, 5, 8)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False], [False] * 5])[:, None, None, :]
    mask = mask if masked else None
    with sdpa_kernel([SDPBackend.MATH]):
        expected = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    got = masked_softmax_attention(query, key, value, mask)
    assert torch.allclose(got, expected, atol=1e-6)
    if masked:
        assert got[2].abs().sum() == 0  # a row with no key to attend to is zeros, as PyTorch's safe softmax gives
        assert not torch.allclose(got[1], masked_softmax_attention(query, key, value, None)[1], atol=1e-3)


def test_causal_attention_on_a_cpu_equals_the_math_kernel_values_and_gradients():
    query, key, value = (torch.randn(2, H, 6, 8, requires_grad=True) for _ in range(3))
    pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    for mask in (None, key_mask(pad)):
        got = scaled_dot_product_attention(query, key, value, mask, 0.0, causal=True)
        grads = torch.autograd.grad(got.square().sum(), (query, key, value))
        causal = torch.ones(6, 6, dtype=torch.bool).tril()
        with sdpa_kernel([SDPBackend.MATH]):
            expected = torch.nn.functional.scaled_dot_product_attention(
                query, key, value, attn_mask=causal if mask is None else mask & causal)
        for a, b in zip(grads, torch.autograd.grad(expected.square().sum(), (query, key, value))):
            assert torch.allclose(a, b, atol=1e-5)
        assert torch.allclose(got, expected, atol=1e-6)


def test_attention_dropout_on_a_cpu_drops_weights_and_rescales_the_rest():
    torch.manual_seed(0)
    query, key = torch.zeros(1, 1, 2000, 8), torch.zeros(1, 1, 4, 8)  # uniform weights: 1/4 each
    value = torch.ones(1, 1, 4, 8)
    out = masked_softmax_attention(query, key, value, None, dropout=0.5)[0, 0, :, 0]  # (2000,) sums of kept weights
    kept = out / 0.5  # each kept weight is (1/4) / (1 - p) = 0.5: the count of kept weights of each row
    assert torch.equal(kept, kept.round()) and kept.min() >= 0 and kept.max() <= 4
    assert abs(kept.mean().item() - 2.0) < 4 * (1.0 / 2000) ** 0.5  # 4 of them kept with p = 1/2: mean 2, sd 1
    assert torch.equal(masked_softmax_attention(query, key, value, None)[0, 0, :, 0], torch.ones(2000))


def test_rows_selected_from_a_cache_are_taken_with_the_next_append():
    rows = torch.arange(3.0)[:, None, None, None].expand(3, 1, 2, 1)  # (3, 1, 2, 1): row r holds r
    cache = AttentionCache(rows + 0.0, rows + 0.5)
    moved = select_rows(select_rows(cache, torch.tensor([2, 0, 0, 1])), torch.tensor([3, 0]))  # rows 1, 2
    moved.append(torch.full((2, 1, 1, 1), 7.0), torch.full((2, 1, 1, 1), 8.0))
    assert moved.key.flatten().tolist() == [1.0, 1.0, 7.0, 2.0, 2.0, 7.0]
    assert moved.value.flatten().tolist() == [1.5, 1.5, 8.0, 2.5, 2.5, 8.0]
    assert cache.key.flatten().tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]  # the original is untouched
    read_first = select_rows(cache, torch.tensor([1]))
    assert read_first.key.flatten().tolist() == [1.0, 1.0]  # reading takes the rows at once


def test_static_cache_equals_attention_to_memory():
    mha = MultiHeadAttention(D, H).eval()
    x, memory = torch.randn(2, 3, D), torch.randn(2, 7, D)
    mask = key_mask(torch.tensor([[False] * 7, [False] * 5 + [True] * 2]))
    cache = mha.static_cache(memory)
    assert cache.static and cache.key.shape == (2, H, 7, D // H)
    assert torch.allclose(mha(x, None, mask, cache=cache), mha(x, memory, mask), atol=1e-6)


def test_padded_keys_have_no_influence():
    mha = MultiHeadAttention(D, H).eval()
    x, memory = torch.randn(1, 3, D), torch.randn(1, 5, D)
    mask = key_mask(torch.tensor([[False] * 3 + [True] * 2]))
    changed = memory.clone()
    changed[:, 3:] = 100.0
    assert torch.allclose(mha(x, memory, mask), mha(x, changed, mask), atol=1e-6)


def test_attention_projection_blocks_are_xavier_uniform():
    mha = MultiHeadAttention(256, 4)
    bound = math.sqrt(6.0 / (256 + 256))  # Xavier bound of one D x D matrix
    for block in list(mha.in_proj_weight.detach().chunk(3)) + [mha.out_proj.weight.detach()]:
        assert block.abs().max() <= bound
        assert block.std().item() == pytest.approx(bound / math.sqrt(3.0), rel=0.05)  # uniform std
    assert mha.in_proj_bias.abs().sum() == 0 and mha.out_proj.bias.abs().sum() == 0


def test_sinusoidal_positions_follow_the_formula():
    table = sinusoidal_positions(50, 8)
    assert table.shape == (50, 8)
    assert torch.equal(table[0], torch.tensor([0.0] * 4 + [1.0] * 4))
    for pos in (1, 7, 49):
        for i in range(4):
            rate = 10000.0 ** (-i / 3)
            assert table[pos, i].item() == pytest.approx(math.sin(pos * rate), abs=1e-6)
            assert table[pos, 4 + i].item() == pytest.approx(math.cos(pos * rate), abs=1e-6)


def test_token_embedding_is_scaled_table_plus_positions():
    emb = TokenEmbedding(vocab_size=11, d_model=D, max_positions=4)
    tokens = torch.tensor([[5, 7, 3, PAD_ID, PAD_ID, PAD_ID]])  # longer than max_positions: table regrows
    out = emb(tokens, offset=2)
    positions = sinusoidal_positions(8, D)[2:8]
    expected = emb.weight.detach()[tokens[0]] * math.sqrt(D) + positions
    assert torch.allclose(out[0], expected, atol=1e-5)
    assert torch.allclose(out[0, 3:], positions[3:], atol=1e-6)  # the <pad> row is zero


def test_token_embedding_init_and_segments():
    emb = TokenEmbedding(vocab_size=4000, d_model=64, num_segments=3)
    assert emb.weight[PAD_ID].abs().sum() == 0
    assert emb.weight.std().item() == pytest.approx(64 ** -0.5, rel=0.05)
    tokens, segments = torch.tensor([[5, 6]]), torch.tensor([[2, 0]])
    with_segments = emb(tokens, segments=segments)
    assert torch.allclose(with_segments - emb(tokens), emb.segment.weight.detach()[segments], atol=1e-6)
    with pytest.raises(ValueError):
        TokenEmbedding(10, 8)(tokens, segments=segments)


class Doubler(nn.Module):
    """A sublayer function: u = 2 x + 1."""

    def forward(self, x: Tensor, inputs: object = None, cache: object = None) -> Tensor:
        return 2 * x + 1


class Blend(nn.Module):
    """A stand-in for a gate: Integrate(x, u) = 0.25 x + 0.75 u."""

    def forward(self, x: Tensor, u: Tensor) -> Tensor:
        return 0.25 * x + 0.75 * u


def layer_norm(x: Tensor) -> Tensor:
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + LAYER_NORM_EPS)


def test_residual_block_post_and_pre_norm():
    x = torch.randn(2, 3, D)
    post = ResidualBlock(Doubler(), D, dropout=0.0, pre_norm=False)
    assert torch.allclose(post(x), layer_norm(x + 2 * x + 1), atol=1e-5)
    pre = ResidualBlock(Doubler(), D, dropout=0.0, pre_norm=True)
    assert torch.allclose(pre(x), x + 2 * layer_norm(x) + 1, atol=1e-5)


def test_residual_block_integration_is_pluggable():
    x = torch.randn(2, 3, D)
    block = ResidualBlock(Doubler(), D, dropout=0.0, pre_norm=False, integrate=Blend())
    assert torch.allclose(block(x), layer_norm(0.25 * x + 0.75 * (2 * x + 1)), atol=1e-5)


def test_residual_dropout_applies_to_the_sublayer_output_only():
    block = ResidualBlock(Doubler(), D, dropout=1.0, pre_norm=True).train()
    x = torch.randn(2, 3, D)
    assert torch.equal(block(x), x)  # everything the sublayer adds is dropped


def test_feed_forward_is_relu_mlp():
    ffn = FeedForward(D, 32).eval()
    x = torch.randn(2, 3, D)
    hidden = torch.clamp(x @ ffn.fc1.weight.T + ffn.fc1.bias, min=0.0)
    assert torch.allclose(ffn(x), hidden @ ffn.fc2.weight.T + ffn.fc2.bias, atol=1e-5)


def tiny_cfg(**overrides) -> ModelConfig:
    return ModelConfig(**{"d_model": D, "heads": H, "ffn_dim": 32, "dropout": 0.0, **overrides})


def test_layers_have_the_papers_sublayer_order():
    assert list(encoder_layer(tiny_cfg())) == ["self_attn", "ffn"]
    assert list(decoder_layer(tiny_cfg())) == ["self_attn", "cross_attn", "ffn"]


def test_inserting_a_sublayer_runs_it_in_place_and_names_its_parameters():
    layer = decoder_layer(tiny_cfg())
    layer.insert("context_attn", cross_attention_block(tiny_cfg(), memory="context"), before="cross_attn")
    assert list(layer) == ["self_attn", "context_attn", "cross_attn", "ffn"]
    assert any(name.startswith("context_attn.fn.attn.") for name, _ in layer.named_parameters())
    with pytest.raises(KeyError):
        layer.insert("context_attn", cross_attention_block(tiny_cfg()), before="ffn")
    with pytest.raises(KeyError):
        layer.insert("other", cross_attention_block(tiny_cfg()), before="missing")

    calls = []
    for name, block in layer.items():
        block.register_forward_hook(lambda module, args, out, name=name: calls.append(name))
    layer.eval()
    x, memory, context = torch.randn(2, 3, D), torch.randn(2, 4, D), torch.randn(2, 5, D)
    memories = {"memory": AttentionMemory.from_padding(memory, torch.zeros(2, 4, dtype=torch.bool)),
                "context": AttentionMemory.from_padding(context, torch.zeros(2, 5, dtype=torch.bool))}
    out = layer(x, LayerInputs(causal=True, memories=memories))
    assert calls == ["self_attn", "context_attn", "cross_attn", "ffn"]
    # The context sublayer reads its own memory: changing the context changes the output.
    memories["context"] = AttentionMemory.from_padding(context + 1.0, torch.zeros(2, 5, dtype=torch.bool))
    assert not torch.allclose(out, layer(x, LayerInputs(causal=True, memories=memories)))
    assert set(layer.new_cache(LayerInputs(memories=memories))) == {"self_attn", "context_attn", "cross_attn"}


def test_layer_caches_are_static_for_cross_attention_only():
    layer = decoder_layer(tiny_cfg())
    memory = AttentionMemory.from_padding(torch.randn(2, 4, D), torch.zeros(2, 4, dtype=torch.bool))
    cache = layer.new_cache(LayerInputs(memories={"memory": memory}))
    assert not cache["self_attn"].static and cache["self_attn"].key is None
    assert cache["cross_attn"].static and cache["cross_attn"].key.shape == (2, H, 4, D // H)


@dataclass
class ExtendedState(EncoderState):
    context: Optional[Tensor] = None
    note: str = "kept"


def test_encoder_state_index_select_covers_subclass_fields():
    state = ExtendedState(memory=torch.arange(3.0)[:, None, None].expand(3, 2, 4),
                          memory_pad=torch.tensor([[False, True], [False, False], [False, True]]),
                          context=torch.tensor([[10.0], [11.0], [12.0]]))
    picked = state.index_select(torch.tensor([2, 2, 0]))
    assert isinstance(picked, ExtendedState) and picked.note == "kept"
    assert picked.memory[:, 0, 0].tolist() == [2.0, 2.0, 0.0]
    assert picked.memory_pad.tolist() == [[False, True], [False, True], [False, True]]
    assert picked.context.squeeze(1).tolist() == [12.0, 12.0, 10.0]


def test_decoder_cache_index_select_can_leave_static_caches():
    rows = torch.arange(3.0)[:, None, None, None]  # (3, 1, 1, 1)
    cache = DecoderCache(layers=[{"self": AttentionCache(rows + 0.0, rows + 0.5),
                                  "cross": AttentionCache(rows + 0.0, rows + 0.0, static=True)}], step=4)
    index = torch.tensor([1, 1, 0])
    moved = cache.index_select(index)
    assert moved.step == 4
    assert moved.layers[0]["self"].value.flatten().tolist() == [1.5, 1.5, 0.5]
    assert moved.layers[0]["cross"].key.flatten().tolist() == [1.0, 1.0, 0.0]
    reordered = cache.index_select(index, include_static=False)
    assert reordered.layers[0]["self"].key.flatten().tolist() == [1.0, 1.0, 0.0]
    assert reordered.layers[0]["cross"] is cache.layers[0]["cross"]
    assert cache.layers[0]["self"].key.flatten().tolist() == [0.0, 1.0, 2.0]  # the original is untouched


def test_the_beams_of_a_sentence_read_one_copy_of_its_static_cache_and_attend_as_with_their_own():
    mha = MultiHeadAttention(D, H).eval()
    memory = torch.randn(3, 7, D)
    pad = torch.tensor([[False] * 7, [False] * 4 + [True] * 3, [False] * 2 + [True] * 5])
    cache = DecoderCache(layers=[{"self": AttentionCache(), "cross": mha.static_cache(memory)}])
    beam = 4
    expand = torch.arange(3).repeat_interleave(beam)  # (12,): each sentence's rows in a row
    shared = cache.index_select(expand, shared=beam).layers[0]["cross"]
    copied = cache.index_select(expand).layers[0]["cross"]
    assert shared.key.shape[0] == 3 and shared.group == beam  # one row per sentence, not one per beam
    assert copied.key.shape[0] == 12 and copied.group == 1
    query, mask = torch.randn(12, 1, D), key_mask(pad).index_select(0, expand)
    assert torch.allclose(mha(query, None, mask, cache=shared), mha(query, None, mask, cache=copied), atol=1e-6)

    keep = torch.tensor([0, 2]).repeat_interleave(beam) * beam + torch.arange(beam).repeat(2)  # drop sentence 1
    kept = shared.select_rows(keep)
    assert kept.key.shape[0] == 2 and kept.group == beam
    assert torch.equal(kept.key, shared.key[[0, 2]])
    assert torch.allclose(mha(query[keep], None, mask[keep], cache=kept),
                          mha(query[keep], None, mask[keep], cache=copied.select_rows(keep)), atol=1e-6)
    assert shared.select_rows(keep.flip(0)).key.shape[0] == 2  # a sentence's beams in another order: fine
    with pytest.raises(ValueError, match="splits a group"):
        shared.select_rows(torch.tensor([0, 1, 2, 4]))  # one row of sentence 1 among sentence 0's


def test_select_rows_handles_containers_and_empty_caches():
    value = {"a": [torch.tensor([1, 2, 3]), (torch.tensor([[4], [5], [6]]), 7)], "b": AttentionCache()}
    picked = select_rows(value, torch.tensor([2]))
    assert picked["a"][0].tolist() == [3] and picked["a"][1][0].tolist() == [[6]] and picked["a"][1][1] == 7
    assert picked["b"].key is None
