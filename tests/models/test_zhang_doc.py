"""Zhang et al. 2018's document Transformer: gate, switches, parameter partition, decoding invariances."""

from __future__ import annotations

import itertools
import math
from fnmatch import fnmatchcase

import pytest
import torch
from omegaconf import OmegaConf
from torch import Tensor

from lightning_docmt.batch import PAD_ID, SEP_ID
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.inference.decoding import beam_search, greedy_search
from lightning_docmt.models.transformer import TransformerConfig, TransformerSeq2Seq
from lightning_docmt.models.zhang_doc import (
    THETA_D_GLOBS,
    THETA_S_GLOBS,
    ContextAttnConfig,
    ZhangDocConfig,
    ZhangDocSeq2Seq,
    ZhangEncoderState,
)
from lightning_docmt.nn.attention import AttentionMemory
from lightning_docmt.nn.gating import ContextGate, gate_stats
from lightning_docmt.nn.layers import LayerInputs
from lightning_docmt.nn.residual import LAYER_NORM_EPS, Residual
from tests.helpers.model_inputs import SIZES, VOCAB, random_batch
from tests.models.model_checks import (
    assert_beam_scores_are_log_probs_and_batching_invisible,
    assert_incremental_matches_full,
    assert_packing_changes_nothing,
    assert_padding_and_batching_invisible,
    sinusoid,
)

D, FFN, LAYERS = SIZES["d_model"], SIZES["ffn_dim"], SIZES["enc_layers"]
SWITCHES = list(itertools.product([False, True], repeat=2))  # (context_attn.encoder, context_attn.decoder)
WITH_CONTEXT = [s for s in SWITCHES if any(s)]


def zhang_model(encoder: bool = True, decoder: bool = True, gating: bool = True, seed: int = 0,
                **overrides) -> ZhangDocSeq2Seq:
    """A small random model in eval mode."""
    torch.manual_seed(seed)
    cfg = ZhangDocConfig(**{**SIZES, "dropout": 0.1, "attn_dropout": 0.1, "relu_dropout": 0.1, **overrides},
                         context_attn=ContextAttnConfig(encoder=encoder, decoder=decoder), context_gating=gating)
    return ZhangDocSeq2Seq(cfg, VOCAB, VOCAB).eval()


def doc_batch(seed: int = 0) -> dict[str, Tensor]:
    """Three sentences; the second has the empty context `<eos>`."""
    return random_batch([5, 2, 7], [4, 6, 1], [6, 0, 3], seed=seed)


def other_context(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """The same batch with every real context token except the final `<eos>` replaced by another word."""
    ctx = batch["ctx_src"]
    words = ctx.gt(SEP_ID)
    shifted = (ctx - SEP_ID) % (VOCAB - SEP_ID - 1) + SEP_ID + 1  # another word id, never a special
    return {**batch, "ctx_src": torch.where(words, shifted, ctx)}


def layer_norm(x: Tensor) -> Tensor:
    """LayerNorm with unit gain and zero bias (the initial LN parameters)."""
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + LAYER_NORM_EPS)


def sigmoid(value: float) -> float:
    return 1.0 / (1.0 + math.exp(-value))


# Context gate (Eqs. 21-22, reading Z2)


def test_context_gate_on_a_hand_example():
    gate = ContextGate(2)
    with torch.no_grad():
        gate.input_proj.weight.copy_(torch.tensor([[0.5, 0.0], [0.0, 1.0]]))  # W_i
        gate.context_proj.weight.copy_(torch.tensor([[0.0, 1.0], [-1.0, 0.0]]))  # W_s
    h, u = [1.0, -2.0], [3.0, 0.5]
    # W_i h = (0.5, -2), W_s u = (0.5, -3): lambda = (sigmoid(1), sigmoid(-5)), one value per channel.
    lam = [sigmoid(1.0), sigmoid(-5.0)]
    expected = [lam[0] * h[0] + (1 - lam[0]) * u[0], lam[1] * h[1] + (1 - lam[1]) * u[1]]
    got = gate(torch.tensor([[h]]), torch.tensor([[u]]))
    assert got.flatten().tolist() == pytest.approx(expected, abs=1e-6)
    assert [name for name, _ in gate.named_parameters()] == ["input_proj.weight", "context_proj.weight"]


def test_a_held_gate_mixes_with_its_constant_and_records_what_it_used():
    """Reading Z15: lambda is the constant, whatever W_i and W_s say; `last_gate` keeps it."""
    gate = ContextGate(2, hold=0.25)
    h, u = torch.tensor([[[1.0, -2.0]]]), torch.tensor([[[3.0, 0.5]]])
    assert gate(h, u).flatten().tolist() == pytest.approx([0.25 * 1.0 + 0.75 * 3.0, 0.25 * -2.0 + 0.75 * 0.5])
    assert gate.last_gate.flatten().tolist() == [0.25, 0.25]
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        ContextGate(2, hold=1.0)


def test_gate_stats_count_real_positions_only():
    """Padding is left out: two real entries (0.5, 1.0) and two padded ones (0.0): mean 0.75,
    half of them shut (above 0.99)."""
    gate = torch.tensor([[[0.5], [1.0], [0.0], [0.0]]])  # (1, 4, 1)
    real = torch.tensor([[True, True, False, False]])
    stats = gate_stats([(gate, real)])
    assert stats["gate_mean"].item() == pytest.approx(0.75) and stats["gate_shut"].item() == pytest.approx(0.5)
    assert gate_stats([]) == {}


def test_gate_stats_are_summed_in_float32():
    """A bf16 lambda (as under bf16 autocast): 9,999 entries of 0.99609375 (bf16's nearest to 0.998)
    summed and divided in bf16 give a mean of exactly 1, every gate seemingly shut for good."""
    gate = torch.full((1, 9999, 1), 0.998, dtype=torch.bfloat16)
    stats = gate_stats([(gate, torch.ones(1, 9999, dtype=torch.bool))])
    assert stats["gate_mean"].item() == pytest.approx(0.99609375, abs=1e-6)


def test_the_loss_reports_how_open_every_gate_was():
    """`gate_mean` and `gate_shut` over every encoder and decoder gate's real positions; a held
    gate reports its constant; the residual variant has no gate to report."""
    batch = doc_batch()
    model = zhang_model()
    loss = lambda hidden, target: (hidden.sum(), hidden.sum(), target.ne(PAD_ID).sum())  # noqa: E731
    stats = model.loss_terms(batch, loss).stats
    opened = model.gate_openings(batch["src"].eq(PAD_ID), batch["tgt_in"].eq(PAD_ID))
    assert len(opened) == 2 * LAYERS and 0.0 < stats["gate_mean"].item() < 1.0
    assert stats["gate_mean"].item() == pytest.approx(gate_stats(opened)["gate_mean"].item())
    held = zhang_model(gate_hold=0.3).loss_terms(batch, loss).stats
    assert held["gate_mean"].item() == pytest.approx(0.3) and held["gate_shut"].item() == 0.0
    assert zhang_model(gating=False).loss_terms(batch, loss).stats == {}
    with pytest.raises(DocMTInputError, match="model.gate_hold"):
        zhang_model(gating=False, gate_hold=0.5)


def context_inputs(context: Tensor) -> LayerInputs:
    return LayerInputs(memories={"context": AttentionMemory.from_padding(context, torch.zeros(context.shape[:2],
                                                                                              dtype=torch.bool))})


def test_gated_context_attention_is_layer_norm_of_the_gate_without_dropout():
    model = zhang_model(dropout=0.5, attn_dropout=0.0)
    block = model.encoder.layers[0]["context_attn"]
    with torch.no_grad():
        block.norm.weight.fill_(1.0)
        block.norm.bias.fill_(0.0)
    x, inputs = torch.randn(2, 3, D), context_inputs(torch.randn(2, 4, D))
    u = block.fn(x, inputs)  # MultiHead(H, C, C), deterministic without attention dropout
    w_i, w_s = block.integrate.input_proj.weight, block.integrate.context_proj.weight
    lam = torch.sigmoid(x @ w_i.T + u @ w_s.T)
    expected = layer_norm(lam * x + (1 - lam) * u)
    block.train()  # residual dropout 0.5 would show if it were applied to U
    assert torch.allclose(block(x, inputs), expected, atol=1e-5)


def test_residual_context_attention_keeps_layer_norm_and_dropout():
    model = zhang_model(gating=False, dropout=0.5, attn_dropout=0.0)
    block = model.decoder.layers[1]["context_attn"]
    assert isinstance(block.integrate, Residual) and not list(block.integrate.parameters())
    x, inputs = torch.randn(2, 3, D), context_inputs(torch.randn(2, 4, D))
    expected = layer_norm(x + block.fn(x, inputs))
    assert torch.allclose(block(x, inputs), expected, atol=1e-5)
    block.train()
    assert not torch.allclose(block(x, inputs), expected, atol=1e-3)


def test_other_sublayers_keep_the_plain_residual():
    model = zhang_model()
    for stack in (model.encoder, model.decoder, model.context_encoder):
        for layer in stack.layers:
            for name, block in layer.items():
                assert isinstance(block.integrate, ContextGate if name == "context_attn" else Residual), name


# Table 8 switches: sublayers, parameters, forward path


@pytest.mark.parametrize("encoder,decoder", SWITCHES)
def test_switches_insert_context_attention_in_the_papers_order(encoder, decoder):
    model = zhang_model(encoder, decoder)
    for layer in model.encoder.layers:
        assert list(layer) == ["self_attn"] + ["context_attn"] * encoder + ["ffn"]
    for layer in model.decoder.layers:
        assert list(layer) == ["self_attn"] + ["context_attn"] * decoder + ["cross_attn", "ffn"]
    assert (model.context_encoder is None) == (not (encoder or decoder))


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("encoder,decoder,gating,pre_norm,context_layers",
                         [(e, d, g, False, 1) for (e, d) in SWITCHES for g in (False, True)]
                         + [(True, True, True, True, 1), (True, False, False, False, 2)])
def test_parameter_counts_follow_the_sublayers(encoder, decoder, gating, pre_norm, context_layers):
    attention, norm, gate = 4 * D * D + 4 * D, 2 * D, 2 * D * D  # W^Q, W^K, W^V, W^O and their biases
    ffn = 2 * D * FFN + FFN + D
    context_attn = attention + norm + gate * gating
    context_encoder = context_layers * (attention + norm + ffn + norm) + norm * pre_norm  # final LN if pre-LN
    expected = (context_encoder * (encoder or decoder) + encoder * LAYERS * context_attn
                + decoder * LAYERS * context_attn)
    transformer = TransformerSeq2Seq(TransformerConfig(**SIZES, pre_norm=pre_norm), VOCAB, VOCAB)
    model = zhang_model(encoder, decoder, gating, pre_norm=pre_norm, context_layers=context_layers)
    assert count(model) - count(transformer) == expected


def test_without_context_attention_the_output_ignores_the_context():
    model = zhang_model(encoder=False, decoder=False)
    batch = doc_batch()
    reference = model(batch)
    assert torch.equal(model(other_context(batch)), reference)
    assert torch.equal(model({k: v for k, v in batch.items() if k != "ctx_src"}), reference)


@pytest.mark.parametrize("encoder,decoder", WITH_CONTEXT)
def test_the_context_reaches_exactly_the_switched_on_sides(encoder, decoder):
    model = zhang_model(encoder, decoder)
    batch, changed = doc_batch(), other_context(doc_batch())
    state, changed_state = model.encode(batch), model.encode(changed)
    assert torch.allclose(state.memory, changed_state.memory) == (not encoder)
    real = batch["tgt_out"].ne(PAD_ID)
    logits, changed_logits = model(batch), model(changed)
    # Row 1 has the empty context in both batches; the others change.
    for row in (0, 2):
        assert not torch.allclose(logits[row][real[row]], changed_logits[row][real[row]], atol=1e-4)
    assert torch.allclose(logits[1][real[1]], changed_logits[1][real[1]], atol=1e-6)


# theta_s / theta_d


def matches(name: str, globs: list[str]) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in globs)


@pytest.mark.parametrize("encoder,decoder,gating,pre_norm,share",
                         [(e, d, g, False, True) for (e, d) in SWITCHES for g in (False, True)]
                         + [(True, True, True, True, True), (True, True, False, True, False)])
def test_theta_globs_partition_the_parameters(encoder, decoder, gating, pre_norm, share):
    overrides = {"pre_norm": pre_norm, "share_embeddings": share, "tie_output": share}
    model = zhang_model(encoder, decoder, gating, **overrides)
    transformer = TransformerSeq2Seq(TransformerConfig(**SIZES, **overrides), VOCAB, VOCAB)
    names = set(model.state_dict()) | {name for name, _ in model.named_parameters()}
    for name in names:
        assert matches(name, THETA_S_GLOBS) != matches(name, THETA_D_GLOBS), name
    new = names - set(transformer.state_dict())
    assert {name for name in names if matches(name, THETA_D_GLOBS)} == new
    assert bool(new) == (encoder or decoder)


@pytest.mark.parametrize("encoder,decoder,gating", [(e, d, g) for (e, d) in SWITCHES for g in (False, True)])
def test_a_transformer_checkpoint_loads_with_only_theta_d_missing(encoder, decoder, gating):
    torch.manual_seed(5)
    transformer = TransformerSeq2Seq(TransformerConfig(**SIZES), VOCAB, VOCAB)
    model = zhang_model(encoder, decoder, gating)
    result = model.load_state_dict(transformer.state_dict(), strict=False)
    assert result.unexpected_keys == []
    assert set(result.missing_keys) == {name for name in model.state_dict() if matches(name, THETA_D_GLOBS)}
    loaded = model.state_dict()
    assert all(torch.equal(loaded[name], value) for name, value in transformer.state_dict().items())


def test_without_context_attention_it_is_the_transformer():
    torch.manual_seed(5)
    transformer = TransformerSeq2Seq(TransformerConfig(**SIZES), VOCAB, VOCAB).eval()
    model = zhang_model(encoder=False, decoder=False)
    model.load_state_dict(transformer.state_dict())  # strict: nothing missing, nothing unexpected
    batch = doc_batch()
    assert torch.equal(model(batch), transformer(batch))


@pytest.mark.parametrize("encoder,decoder,gating", [(e, d, g) for (e, d) in WITH_CONTEXT for g in (False, True)])
def test_an_intact_start_leaves_the_sentence_model_s_outputs_unchanged(encoder, decoder, gating):
    """Reading Z17: with `context_init: intact` a step-2 model loaded from the Transformer scores every
    token as the Transformer does (LN(0.5 H) = LN(H) up to LayerNorm's epsilon); the paper's
    initialisation moves the logits by far more (the initial damage of reading Z16)."""
    torch.manual_seed(5)
    transformer = TransformerSeq2Seq(TransformerConfig(**SIZES), VOCAB, VOCAB).eval()
    batch = doc_batch()
    reference = transformer(batch)
    gaps = {}
    for init in ("paper", "intact"):
        model = zhang_model(encoder, decoder, gating, context_init=init)
        model.load_state_dict(transformer.state_dict(), strict=False)
        gaps[init] = (model(batch) - reference).abs().max().item()
    assert gaps["intact"] < 1e-4 < 0.1 < gaps["paper"], gaps
    model = zhang_model(encoder, decoder, gating, context_init="intact").train()
    model.load_state_dict(transformer.state_dict(), strict=False)
    model(batch).logsumexp(-1).sum().backward()  # the context read learns from the first update
    out_proj = [p.grad for n, p in model.named_parameters() if n.endswith("context_attn.fn.attn.out_proj.weight")]
    assert out_proj and all(g is not None and g.abs().sum() > 0 for g in out_proj)


def test_an_unknown_context_init_is_refused_with_its_key():
    with pytest.raises(DocMTInputError, match="model.context_init"):
        zhang_model(context_init="zeros")


# Context encoder input (reading Z3) and configuration


@pytest.mark.parametrize("share", [True, False])
def test_context_is_embedded_with_the_source_table_from_position_zero(share):
    model = zhang_model(share_embeddings=share, tie_output=share)
    with torch.no_grad():
        model.tgt_embed.weight.add_(0.0 if share else 1.0)  # distinct tables must not be confused
    seen = []
    model.context_encoder.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    batch = doc_batch()
    model.encode(batch)
    ctx = batch["ctx_src"]
    expected = math.sqrt(D) * model.src_embed.weight[ctx] + sinusoid(ctx.size(1), D)[None]
    assert torch.allclose(seen[0], expected, atol=1e-5)
    assert not any(name.startswith("context_encoder.") and "embed" in name for name in model.state_dict())


def test_config_keys_and_defaults():
    cfg = ZhangDocConfig()
    assert (cfg.arch, cfg.context_layers, cfg.context_gating) == ("zhang_doc", 1, True)
    assert (cfg.context_attn.encoder, cfg.context_attn.decoder) == (True, True)
    merged = OmegaConf.merge(OmegaConf.structured(ZhangDocConfig),
                             OmegaConf.from_dotlist(["context_attn.encoder=false", "context_gating=false"]))
    cfg = OmegaConf.to_object(merged)
    assert isinstance(cfg.context_attn, ContextAttnConfig)
    assert (cfg.context_attn.encoder, cfg.context_attn.decoder, cfg.context_gating) == (False, True, False)


def test_bad_settings_and_missing_context_are_reported():
    with pytest.raises(DocMTInputError, match="at least one layer"):
        zhang_model(context_layers=0)
    with pytest.raises(DocMTInputError, match="context.prev_sentences"):
        zhang_model()(random_batch([3], [2]))


# Decoding: invariances, caches, beam search


@pytest.mark.parametrize("encoder,decoder,pre_norm", [(e, d, p) for (e, d) in WITH_CONTEXT for p in (False, True)])
def test_incremental_decoding_equals_full_forward(encoder, decoder, pre_norm):
    model = zhang_model(encoder, decoder, pre_norm=pre_norm)
    assert_incremental_matches_full(model, doc_batch())


@pytest.mark.parametrize("encoder,decoder", WITH_CONTEXT)
def test_padding_and_batching_do_not_change_outputs(encoder, decoder):
    assert_padding_and_batching_invisible(zhang_model(encoder, decoder), doc_batch(), ("ctx_src",))


def test_decoder_context_attention_has_a_static_cache_and_reorders_with_the_state():
    model = zhang_model()
    batch = random_batch([5, 3, 4], [5, 5, 5], [4, 7, 0])
    state = model.encode(batch)
    width, heads = batch["ctx_src"].size(1), SIZES["heads"]
    assert isinstance(state, ZhangEncoderState) and state.context.states.shape == (3, width, D)
    cache = model.init_cache(state)
    for layer in cache.layers:
        assert layer["context_attn"].static and layer["context_attn"].key.shape == (3, heads, width, D // heads)
    for t in range(3):
        model.decode_step(batch["tgt_in"][:, t:t + 1], state, cache)
    order = torch.tensor([2, 0, 0, 1])
    state, cache = state.index_select(order), cache.index_select(order)
    assert torch.equal(state.context.mask, model.encode(batch).context.mask[order])
    step = model.decode_step(batch["tgt_in"][order, 3:4], state, cache)
    assert torch.allclose(step, model(batch)[order, 3], atol=1e-5)


def search_batch() -> dict[str, Tensor]:
    return random_batch([4, 7, 2, 5], [1, 1, 1, 1], [3, 0, 5, 2], seed=3)


def test_context_is_encoded_once_per_search():
    model = zhang_model()
    calls = []
    model.context_encoder.register_forward_hook(lambda module, args, out: calls.append(out.size(0)))
    greedy_search(model, search_batch(), max_len_a=1.0, max_len_b=3)
    beam_search(model, search_batch(), beam=3, max_len_a=1.0, max_len_b=3)
    assert calls == [4, 4]  # one call per search, over the sentences, not the beams


def test_beam_search_scores_are_the_models_log_probs_and_batching_is_invisible():
    assert_beam_scores_are_log_probs_and_batching_invisible(zhang_model(), search_batch())


@pytest.mark.parametrize("gating", [True, False])
def test_packed_context_rows_change_nothing(monkeypatch, gating):
    """The context encoder packs; a gated context attention in the encoder is laid out padded."""
    assert_packing_changes_nothing(lambda: zhang_model(gating=gating), doc_batch(), monkeypatch)
