"""The sentence Transformer and the concatenation baseline: interface, invariances, options."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from lightning_docmt.batch import EOS_ID, PAD_ID, SEP_ID
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.models.concat import concatenate_context
from lightning_docmt.models.transformer import TransformerConfig, TransformerSeq2Seq
from tests.helpers.model_inputs import SIZES, VOCAB, padded, random_batch, tiny_model
from tests.models.model_checks import assert_incremental_matches_full


def widen(x: Tensor, extra: int) -> Tensor:
    return torch.cat([x, torch.full((x.size(0), extra), PAD_ID)], dim=1)


ARCHS = [("transformer", False), ("transformer", True), ("concat", False), ("concat", True)]


def batch_for(arch: str) -> dict[str, Tensor]:
    return random_batch([5, 2, 7], [4, 6, 1], [6, 0, 3] if arch == "concat" else None)


@pytest.mark.parametrize("arch,pre_norm", ARCHS)
def test_output_shapes(arch, pre_norm):
    model = tiny_model(arch, pre_norm=pre_norm)
    batch = batch_for(arch)
    logits = model(batch)
    assert logits.shape == (3, 7, VOCAB)
    state = model.encode(batch)
    src_len = batch["src"].size(1) + (batch["ctx_src"].size(1) if arch == "concat" else 0)
    assert state.memory.shape[0] == 3 and state.memory.shape[2] == 16 and state.memory.shape[1] <= src_len
    assert state.memory_pad.shape == state.memory.shape[:2] and state.memory_pad.dtype == torch.bool
    cache = model.init_cache(state)
    assert len(cache.layers) == 2 and cache.step == 0
    assert model.decode_step(batch["tgt_in"][:, :1], state, cache).shape == (3, VOCAB)
    assert cache.step == 1


@pytest.mark.parametrize("arch,pre_norm", ARCHS)
def test_incremental_decoding_equals_full_forward(arch, pre_norm):
    model = tiny_model(arch, pre_norm=pre_norm)
    assert_incremental_matches_full(model, batch_for(arch))


@pytest.mark.parametrize("arch,pre_norm", ARCHS)
def test_padding_does_not_change_outputs(arch, pre_norm):
    model = tiny_model(arch, pre_norm=pre_norm)
    batch = batch_for(arch)
    reference = model(batch)
    real = batch["tgt_out"].ne(PAD_ID)
    for keys in [("src",), ("tgt_in", "tgt_out")] + ([("ctx_src",)] if arch == "concat" else []):
        wider = {**batch, **{key: widen(batch[key], 3) for key in keys}}
        assert torch.allclose(model(wider)[:, : real.size(1)][real], reference[real], atol=1e-5), keys


@pytest.mark.parametrize("arch,pre_norm", ARCHS)
def test_rows_are_independent_of_each_other(arch, pre_norm):
    model = tiny_model(arch, pre_norm=pre_norm)
    batch = batch_for(arch)
    together = model(batch)
    for row in range(3):
        alone = {key: value[row:row + 1] for key, value in batch.items()}
        length = int(alone["tgt_out"].ne(PAD_ID).sum())
        assert torch.allclose(model(alone)[0, :length], together[row, :length], atol=1e-5)


def test_decoder_is_causal():
    model = tiny_model()
    batch = random_batch([4, 5], [6, 6])
    changed = {**batch, "tgt_in": batch["tgt_in"].clone()}
    changed["tgt_in"][:, 4] = (changed["tgt_in"][:, 4] + 1 - SEP_ID) % (VOCAB - SEP_ID - 1) + SEP_ID + 1
    before, after = model(batch), model(changed)
    assert torch.allclose(before[:, :4], after[:, :4], atol=1e-6)
    assert not torch.allclose(before[:, 4:], after[:, 4:])


def test_dropout_is_active_in_training_mode_only():
    model = tiny_model()
    batch = random_batch([4], [3])
    assert torch.equal(model(batch), model(batch))
    model.train()
    assert not torch.equal(model(batch), model(batch))


def test_cache_reordering_matches_decoding_the_reordered_batch():
    model = tiny_model()
    batch = random_batch([5, 3, 4], [5, 5, 5])
    state = model.encode(batch)
    cache = model.init_cache(state)
    for t in range(3):
        model.decode_step(batch["tgt_in"][:, t:t + 1], state, cache)
    order = torch.tensor([2, 0, 0, 1])
    state, cache = state.index_select(order), cache.index_select(order)
    step = model.decode_step(batch["tgt_in"][order, 3:4], state, cache)
    assert torch.allclose(step, model(batch)[order, 3], atol=1e-5)


def test_shared_embeddings_need_equal_vocabularies():
    with pytest.raises(DocMTInputError, match="model.share_embeddings"):
        TransformerSeq2Seq(TransformerConfig(**SIZES, share_embeddings=True), 30, 31)
    model = TransformerSeq2Seq(TransformerConfig(**SIZES, share_embeddings=False, tie_output=True), 30, 31)
    assert model.output.weight is model.tgt_embed.weight and model.output.weight.shape == (31, 16)


@pytest.mark.parametrize("share,tie", [(True, True), (True, False), (False, True), (False, False)])
def test_embedding_sharing_and_output_tying(share, tie):
    model = TransformerSeq2Seq(TransformerConfig(**SIZES, share_embeddings=share, tie_output=tie), VOCAB, VOCAB)
    assert (model.src_embed.weight is model.tgt_embed.weight) == share
    assert (model.output.weight is model.tgt_embed.weight) == tie
    tables = {id(p) for p in (model.src_embed.weight, model.tgt_embed.weight, model.output.weight)}
    assert len(tables) == 3 - share - tie


def test_final_layer_norm_only_in_pre_norm_mode():
    post = {name for name, _ in tiny_model(pre_norm=False).named_parameters()}
    pre = {name for name, _ in tiny_model(pre_norm=True).named_parameters()}
    assert not any("final_norm" in name for name in post)
    assert pre - post == {f"{part}.final_norm.{p}" for part in ("encoder", "decoder") for p in ("weight", "bias")}


def test_parameter_names_are_grouped_for_freezing():
    model = tiny_model(share_embeddings=False, tie_output=False)
    names = [name for name, _ in model.named_parameters()]
    assert {name.split(".")[0] for name in names} == {"src_embed", "tgt_embed", "encoder", "decoder", "output"}
    assert "decoder.layers.1.cross_attn.fn.attn.in_proj_weight" in names
    assert "encoder.layers.0.ffn.norm.weight" in names
    # Transformer and concatenation model share every name: checkpoints move between them.
    assert set(tiny_model("concat").state_dict()) == set(tiny_model().state_dict())


def test_initialisation_follows_the_documented_scheme():
    cfg = TransformerConfig(d_model=128, heads=4, ffn_dim=512, enc_layers=1, dec_layers=1,
                            share_embeddings=False, tie_output=False)
    model = TransformerSeq2Seq(cfg, 2000, 2000)
    for table in (model.src_embed.weight, model.tgt_embed.weight, model.output.weight):
        assert table.std().item() == pytest.approx(128 ** -0.5, rel=0.05)
    assert model.src_embed.weight[PAD_ID].abs().sum() == 0
    fc1 = model.encoder.layers[0]["ffn"].fn.fc1
    assert fc1.weight.abs().max() <= math.sqrt(6.0 / (128 + 512)) and fc1.bias.abs().sum() == 0
    norm = model.decoder.layers[0]["cross_attn"].norm
    assert torch.equal(norm.weight, torch.ones(128)) and torch.equal(norm.bias, torch.zeros(128))


def test_concatenation_layout():
    ctx = torch.tensor([[5, 6, SEP_ID, 7, EOS_ID],  # two previous sentences
                        [EOS_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID],  # empty context
                        [8, EOS_ID, PAD_ID, PAD_ID, PAD_ID]])
    src = torch.tensor([[9, 10, EOS_ID],
                        [11, EOS_ID, PAD_ID],
                        [12, 13, EOS_ID]])
    expected = padded([[5, 6, SEP_ID, 7, SEP_ID, 9, 10, EOS_ID],
                       [11, EOS_ID],
                       [8, SEP_ID, 12, 13, EOS_ID]])
    assert torch.equal(concatenate_context(ctx, src), expected)


def test_concat_model_is_the_transformer_over_the_concatenation():
    concat = tiny_model("concat")
    transformer = tiny_model("transformer", seed=1)
    transformer.load_state_dict(concat.state_dict())
    batch = random_batch([3, 4], [2, 5], [4, 0])
    ctx, src = batch["ctx_src"], batch["src"]
    joined = [ctx[0][ctx[0].ne(PAD_ID)].tolist()[:-1] + [SEP_ID] + src[0][src[0].ne(PAD_ID)].tolist(),
              src[1][src[1].ne(PAD_ID)].tolist()]  # the second context is empty
    expected = transformer({**batch, "src": padded(joined)})
    assert torch.allclose(concat(batch), expected, atol=1e-6)


def test_concat_model_needs_previous_sentences():
    with pytest.raises(DocMTInputError, match="context.prev_sentences"):
        tiny_model("concat")(random_batch([3], [2]))
