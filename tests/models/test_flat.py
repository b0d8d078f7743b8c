"""Ma et al. 2020's Flat-Transformer (`models/flat.py`): input layout, segments, the cut after the
bottom blocks, the Transformer inside it, decoding and scoring, and a tiny `docmt fit`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from torch import Tensor

from lightning_docmt.batch import EOS_ID, PAD_ID, SEP_ID
from lightning_docmt.config import composition as config_lib
from lightning_docmt.config.registry import build_model, get_arch, model_config
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.evaluation.context_usage import context_usage_metrics
from lightning_docmt.evaluation.contrastive_scoring import score_suite
from lightning_docmt.inference.loaded_model import LoadedModel, load_checkpoint
from lightning_docmt.inference.translate import binarize_documents
from lightning_docmt.models.flat import CONTEXT_SEGMENT, CURRENT_SEGMENT, FlatConfig, FlatSeq2Seq
from lightning_docmt.models.transformer import TransformerConfig, TransformerSeq2Seq
from lightning_docmt.nn.concatenation import join_rows
from lightning_docmt.nn.layers import LayerInputs
from tests.helpers.cli_run import docmt, run_dir_of
from tests.helpers.corpus_fixtures import CONTEXT_DOCUMENTS as DOCUMENTS
from tests.helpers.corpus_fixtures import CONTEXT_REFERENCES as REFERENCES
from tests.helpers.corpus_fixtures import WORD_VOCAB
from tests.helpers.model_inputs import SIZES, VOCAB, context, padded, random_batch
from tests.helpers.run_checks import assert_test_bleu_rescores
from tests.helpers.run_env import single_process_run_env
from tests.helpers.stage_fits import tiny_config
from tests.models.model_checks import (
    assert_beam_scores_are_log_probs_and_batching_invisible,
    assert_incremental_matches_full,
    assert_packing_changes_nothing,
    assert_padding_and_batching_invisible,
    sinusoid,
)

D, LAYERS = SIZES["d_model"], SIZES["enc_layers"]
SEGMENT = "src_embed.segment.weight"


def flat_model(bottom: int = 1, seed: int = 0, **overrides) -> FlatSeq2Seq:
    """A small random model (2 encoder blocks) in eval mode."""
    torch.manual_seed(seed)
    cfg = FlatConfig(**{**SIZES, "dropout": 0.1, "attn_dropout": 0.1, "relu_dropout": 0.1,
                        "bottom_layers": bottom, **overrides})
    return FlatSeq2Seq(cfg, VOCAB, VOCAB).eval()


def transformer(seed: int = 5, **overrides) -> TransformerSeq2Seq:
    torch.manual_seed(seed)
    cfg = TransformerConfig(**{**SIZES, "dropout": 0.1, "attn_dropout": 0.1, "relu_dropout": 0.1, **overrides})
    return TransformerSeq2Seq(cfg, VOCAB, VOCAB).eval()


def doc_batch(seed: int = 0) -> dict[str, Tensor]:
    """Four sentences: previous and next context lengths (6, 0), (0, 4), (3, 2), (0, 0)."""
    batch = random_batch([5, 2, 7, 3], [4, 6, 1, 2], [6, 0, 3, 0], seed=seed)
    g = torch.Generator().manual_seed(seed + 100)
    batch["ctx_next"] = padded([context(n, g) for n in [0, 4, 2, 0]])
    return batch


def other_context(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """Every context word (not `<sep>`, `<eos>`, padding) replaced by another word: same lengths."""
    changed = dict(batch)
    for key in ("ctx_src", "ctx_next"):
        ctx = batch[key]
        shifted = (ctx - SEP_ID) % (VOCAB - SEP_ID - 1) + SEP_ID + 1  # another word id, never a special
        changed[key] = torch.where(ctx.gt(SEP_ID), shifted, ctx)
    return changed


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def with_transformer_weights(model: FlatSeq2Seq, reference: TransformerSeq2Seq) -> FlatSeq2Seq:
    result = model.load_state_dict(reference.state_dict(), strict=False)
    assert result.unexpected_keys == [] and set(result.missing_keys) <= {SEGMENT}
    return model


# Input layout (Eqs. 2-3, readings F2, F3, F8)


def hand_batch() -> dict[str, Tensor]:
    return {"ctx_src": padded([[5, 6, SEP_ID, 7, EOS_ID], [EOS_ID]]),  # two previous sentences / none
            "src": padded([[9, 10, EOS_ID], [11, EOS_ID]]),
            "ctx_next": padded([[12, 13, EOS_ID], [EOS_ID]])}  # one next sentence / none


@pytest.mark.parametrize("order, tokens, segments", [
    ("doc_order", [5, 6, SEP_ID, 7, 9, 10, EOS_ID, 12, 13], [0, 0, 0, 0, 1, 1, 1, 0, 0]),
    ("context_first", [5, 6, SEP_ID, 7, 12, 13, 9, 10, EOS_ID], [0, 0, 0, 0, 0, 0, 1, 1, 1])])
def test_input_layout_and_segment_ids(order, tokens, segments):
    model = flat_model(concat_order=order)
    joined, current = model.unified_input(hand_batch())
    assert joined.tokens.tolist() == padded([tokens, [11, EOS_ID]]).tolist()  # empty sides add nothing
    seg = model.segment_ids(joined, current)
    assert seg[0].tolist() == segments
    assert seg[1, :2].tolist() == [CURRENT_SEGMENT] * 2 and CONTEXT_SEGMENT != CURRENT_SEGMENT
    assert joined.starts[:, current].tolist() == [4 if order == "doc_order" else 6, 0]


def test_join_rows_reports_origins_and_starts():
    joined = join_rows([torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([[7, 8], [9, 0]])],
                       [torch.tensor([2, 0]), torch.tensor([2, 1])])
    assert joined.tokens.tolist() == [[1, 2, 7, 8], [9, PAD_ID, PAD_ID, PAD_ID]]
    assert joined.origin.tolist() == [[0, 0, 1, 1], [1, -1, -1, -1]]
    assert joined.starts.tolist() == [[0, 2], [0, 0]]


@pytest.mark.parametrize("segments", [True, False])
def test_encoder_input_is_words_positions_over_the_whole_sequence_and_segments(segments):
    model = flat_model(segment_embedding=segments)
    seen = []
    model.encoder.layers[0].register_forward_pre_hook(lambda module, args: seen.append(laid_out(*args)))
    batch = doc_batch()
    model.encode(batch)
    joined, current = model.unified_input(batch)
    tokens = joined.tokens
    expected = math.sqrt(D) * model.src_embed.weight[tokens] + sinusoid(tokens.size(1), D)[None]  # reading F1
    if segments:  # Eq. 3: S(context) on context tokens, S(current) on the current sentence
        table = model.src_embed.segment.weight
        expected = expected + torch.where(joined.origin.eq(current)[..., None], table[CURRENT_SEGMENT],
                                          table[CONTEXT_SEGMENT])
    real = tokens.ne(PAD_ID)
    assert torch.allclose(seen[0][real], expected[real], atol=1e-5)
    assert (SEGMENT in model.state_dict()) == segments
    assert (model.segment_ids(joined, current) is None) == (not segments)


def test_without_segment_embedding_no_segment_parameter_exists():
    names = {name for name, _ in flat_model(segment_embedding=False).named_parameters()}
    assert not any("segment" in name for name in names)
    assert names == {name for name, _ in transformer().named_parameters()}
    assert SEGMENT in {name for name, _ in flat_model().named_parameters()}


# Parameters: the Transformer's plus the segment table


@pytest.mark.parametrize("bottom, pre_norm, share", [(0, False, True), (1, False, True), (2, True, True),
                                                     (1, False, False), (1, True, False)])
def test_parameter_count_is_the_transformers_plus_the_segment_table(bottom, pre_norm, share):
    overrides = {"pre_norm": pre_norm, "share_embeddings": share, "tie_output": share}
    reference = count(transformer(**overrides))
    assert count(flat_model(bottom, **overrides)) == reference + 2 * D
    assert count(flat_model(bottom, segment_embedding=False, **overrides)) == reference


@pytest.mark.parametrize("segments", [True, False])
def test_a_transformer_checkpoint_loads_with_only_the_segment_table_missing(segments):
    reference = transformer()
    model = flat_model(segment_embedding=segments)
    result = model.load_state_dict(reference.state_dict(), strict=False)
    assert result.unexpected_keys == []
    assert result.missing_keys == ([SEGMENT] if segments else [])
    loaded = model.state_dict()
    assert all(torch.equal(loaded[name], value) for name, value in reference.state_dict().items())


def test_parameter_names_come_from_the_registry_without_building_weights():
    cfg = FlatConfig(**SIZES)
    assert get_arch("flat").model_class is FlatSeq2Seq
    assert FlatSeq2Seq.parameter_names(cfg) == [name for name, _ in flat_model().named_parameters()]


# The cut after the bottom blocks (Eqs. 4-5, trap 11)


def laid_out(x: Tensor, inputs: LayerInputs) -> Tensor:
    """A block's hidden states (B, L, D), also when the stack packed them (`nn/packing.py`)."""
    return x if inputs.packing is None else inputs.packing.unpack(x)


def layer_inputs(model: FlatSeq2Seq, batch: dict[str, Tensor]) -> list[Tensor]:
    """The hidden states each encoder block receives during `encode(batch)`, (B, L, D)."""
    seen: list[Tensor] = []
    hooks = [layer.register_forward_pre_hook(lambda module, args: seen.append(laid_out(*args)))
             for layer in model.encoder.layers]
    model.encode(batch)
    for hook in hooks:
        hook.remove()
    return seen


@pytest.mark.parametrize("bottom", [0, 1, 2])
def test_top_blocks_receive_only_the_current_sentences_positions(bottom):
    model = flat_model(bottom)
    batch = doc_batch()
    full = model.unified_input(batch)[0].tokens.size(1)
    src_len = batch["src"].size(1)
    assert full > src_len
    seen = layer_inputs(model, batch)
    assert [x.shape[1] for x in seen] == [full] * bottom + [src_len] * (LAYERS - bottom)
    state = model.encode(batch)
    assert state.memory.shape == (4, src_len, D) and torch.equal(state.memory_pad, batch["src"].eq(PAD_ID))


def test_the_cut_keeps_the_bottom_output_at_the_current_positions():
    model = flat_model(1)
    batch = doc_batch()
    outputs: list[Tensor] = []
    model.encoder.layers[0].register_forward_hook(lambda module, args, out: outputs.append(laid_out(out, args[1])))
    top_input = layer_inputs(model, batch)[1]  # (B, S, D)
    joined, current = model.unified_input(batch)
    for row in range(4):
        start, length = int(joined.starts[row, current]), int(batch["src"][row].ne(PAD_ID).sum())
        assert torch.equal(top_input[row, :length], outputs[0][row, start:start + length])
        assert top_input[row, length:].abs().sum() == 0  # padding of the cut sequence


def test_without_the_unified_structure_nothing_is_cut():
    model = flat_model(1, unified=False, segment_embedding=False)
    batch = doc_batch()
    full = model.unified_input(batch)[0]
    assert [x.shape[1] for x in layer_inputs(model, batch)] == [full.tokens.size(1)] * LAYERS
    state = model.encode(batch)
    assert torch.equal(state.memory_pad, full.tokens.eq(PAD_ID))  # the decoder reads every position


# What the context can change


def test_with_no_bottom_block_the_context_words_change_nothing():
    model = flat_model(0)
    batch, changed = doc_batch(), other_context(doc_batch())
    assert not torch.equal(batch["ctx_src"], changed["ctx_src"])
    assert torch.allclose(model.encode(batch).memory, model.encode(changed).memory, atol=1e-6)
    assert torch.allclose(model(batch), model(changed), atol=1e-6)


@pytest.mark.parametrize("bottom, unified", [(1, True), (2, True), (1, False)])
def test_with_bottom_blocks_the_context_changes_the_encoding_and_the_output(bottom, unified):
    model = flat_model(bottom, unified=unified)
    batch, changed = doc_batch(), other_context(doc_batch())
    state, changed_state = model.encode(batch), model.encode(changed)
    logits, changed_logits = model(batch), model(changed)
    real = batch["tgt_out"].ne(PAD_ID)
    src_real = batch["src"].ne(PAD_ID)
    for row in range(3):  # rows 0-2 have context (previous, next or both)
        if unified:
            assert not torch.allclose(state.memory[row][src_real[row]], changed_state.memory[row][src_real[row]],
                                      atol=1e-4)
        assert not torch.allclose(logits[row][real[row]], changed_logits[row][real[row]], atol=1e-4)
    assert torch.allclose(logits[3][real[3]], changed_logits[3][real[3]], atol=1e-5)  # no context at all


@pytest.mark.parametrize("side", ["ctx_src", "ctx_next"])
def test_each_context_side_reaches_the_output(side):
    model = flat_model(1)
    batch = doc_batch()
    changed = {**other_context(batch), **{k: batch[k] for k in ("ctx_src", "ctx_next") if k != side}}
    real = batch["tgt_out"].ne(PAD_ID)
    row = 0 if side == "ctx_src" else 1  # row 0 has previous context only, row 1 next context only
    assert not torch.allclose(model(batch)[row][real[row]], model(changed)[row][real[row]], atol=1e-4)


# Empty context: the Transformer (reading F8)


def empty_context_batch() -> dict[str, Tensor]:
    return random_batch([5, 2, 7], [4, 6, 1], [0, 0, 0], seed=2) | {"ctx_next": padded([[EOS_ID]] * 3)}


@pytest.mark.parametrize("bottom, unified, pre_norm", [(0, True, False), (1, True, False), (2, True, True),
                                                       (1, False, False)])
def test_empty_context_without_segments_is_the_transformer(bottom, unified, pre_norm):
    reference = transformer(pre_norm=pre_norm)
    model = with_transformer_weights(flat_model(bottom, segment_embedding=False, unified=unified,
                                                pre_norm=pre_norm), reference)
    batch = empty_context_batch()
    real = batch["src"].ne(PAD_ID)
    assert torch.allclose(model.encode(batch).memory[real], reference.encode(batch).memory[real], atol=1e-6)
    assert torch.allclose(model(batch), reference(batch), atol=1e-6)
    # a row without context inside a batch with context: the same, up to the wider padding
    mixed = doc_batch()
    alone = {key: value[3:4, : int(value[3].ne(PAD_ID).sum())] for key, value in mixed.items()}
    length = int(alone["tgt_out"].size(1))
    assert torch.allclose(model(mixed)[3, :length], reference(alone)[0], atol=1e-5)


def test_empty_context_with_segments_adds_only_the_current_segment_vector():
    reference = transformer()
    model = with_transformer_weights(flat_model(1), reference)
    batch = empty_context_batch()
    assert not torch.allclose(model(batch), reference(batch), atol=1e-4)  # S(current) is added everywhere
    with torch.no_grad():
        model.src_embed.segment.weight[CURRENT_SEGMENT].zero_()
        model.src_embed.segment.weight[CONTEXT_SEGMENT].normal_()  # never read without context
    assert torch.allclose(model(batch), reference(batch), atol=1e-6)


# Decoding and scoring


@pytest.mark.parametrize("bottom, unified, pre_norm", [(1, True, False), (1, True, True), (0, True, False),
                                                       (1, False, False)])
def test_incremental_decoding_equals_full_forward(bottom, unified, pre_norm):
    assert_incremental_matches_full(flat_model(bottom, unified=unified, pre_norm=pre_norm), doc_batch())


@pytest.mark.parametrize("order", ["doc_order", "context_first"])
def test_padding_and_batching_do_not_change_outputs(order):
    model = flat_model(1, concat_order=order)
    assert_padding_and_batching_invisible(model, doc_batch(), ("ctx_src", "ctx_next"))


def test_beam_search_scores_are_the_models_log_probs_and_batching_is_invisible():
    batch = doc_batch(seed=3)
    assert_beam_scores_are_log_probs_and_batching_invisible(
        flat_model(1), {key: value for key, value in batch.items() if key not in ("tgt_in", "tgt_out")})


def loaded_flat(tmp_path: Path, *overrides: str) -> LoadedModel:
    cfg = tiny_config(tmp_path, "model.arch=flat", "model.enc_layers=2", *overrides)
    return LoadedModel(build_model(cfg.model, len(WORD_VOCAB), len(WORD_VOCAB)).eval(), cfg, WORD_VOCAB, WORD_VOCAB)


def test_context_usage_scores_and_contrastive_suites_take_the_flat_model(tmp_path):
    model = loaded_flat(tmp_path)
    assert isinstance(model.model, FlatSeq2Seq)
    (tmp_path / "split").mkdir()
    split = binarize_documents(DOCUMENTS, model, tmp_path / "split")
    scores = context_usage_metrics(model, split, REFERENCES, "13a", decode=False)
    # the next sentence is context too: first sentences of documents are not context-free here
    assert abs(scores["cxmi/rest"]) > 1e-4 and abs(scores["cxmi/first"]) > 1e-4
    tokens = split.tgt.offsets[1:] - split.tgt.offsets[:-1] + 1  # target tokens and <eos>
    first = np.zeros(split.n_sentences, dtype=bool)
    first[split.doc_offsets[:-1]] = True
    weighted = (tokens[first].sum() * scores["cxmi/first"] + tokens[~first].sum() * scores["cxmi/rest"]) / tokens.sum()
    assert scores["cxmi"] == pytest.approx(weighted, rel=1e-9)  # one pass, split two ways
    example = {"id": "e", "src": "the cat runs", "src_context": ["a dog", "the river"], "tgt_context": [],
               "candidates": ["RUNS CAT THE", "RUNS DOG THE"], "label": 0, "phenomenon": "test"}
    swapped = {**example, "src_context": ["the river", "a dog"]}
    [scores], [again] = score_suite(model, [example]), score_suite(model, [swapped])
    assert all(s < 0 for s in scores) and scores[0] != scores[1]  # log-probabilities of two candidates
    assert scores != again  # the previous sentence is read: another one changes the scores


# Configuration


def test_config_defaults_and_the_paper_preset():
    cfg = FlatConfig()
    assert (cfg.arch, cfg.bottom_layers, cfg.segment_embedding, cfg.unified, cfg.concat_order) == \
        ("flat", 1, True, True, "doc_order")
    run = config_lib.compose(None, ["model.arch=flat"], profile="paper")
    model = model_config(run.model)
    assert isinstance(model, FlatConfig)
    assert (model.bottom_layers, model.enc_layers - model.bottom_layers, model.dec_layers) == (1, 5, 6)
    assert (model.d_model, model.ffn_dim, model.heads, model.dropout) == (512, 1024, 4, 0.3)
    assert (run.context.prev_sentences, run.context.next_sentences, run.context.side) == (1, 1, "source")
    optim = run.train.optim
    assert (optim.schedule, optim.lr, optim.warmup_steps, optim.eps) == ("linear_warmup_inverse_sqrt", 5e-4,
                                                                         4000, 1e-8)
    assert (run.train.early_stop_patience, run.eval.valid_bleu, run.data.max_tokens) == (10, False, 4000)
    ablation = model_config(config_lib.compose(
        None, ["model.arch=flat", "model.unified=false", "model.segment_embedding=false"]).model)
    assert (ablation.unified, ablation.segment_embedding) == (False, False)


def test_bad_settings_and_missing_context_are_reported():
    with pytest.raises(DocMTInputError, match="model.bottom_layers"):
        flat_model(3)
    with pytest.raises(DocMTInputError, match="model.bottom_layers"):
        flat_model(-1)
    with pytest.raises(DocMTInputError, match="model.concat_order"):
        flat_model(concat_order="current_first")
    with pytest.raises(DocMTInputError, match="context.prev_sentences"):
        flat_model()(random_batch([3], [2]))
    only_next = {**random_batch([3], [2]), "ctx_next": padded([[7, EOS_ID]])}
    assert flat_model()(only_next).shape == (1, 3, VOCAB)


# A tiny fit through `docmt fit`, then beam search from the checkpoint


@pytest.mark.fit
def test_a_tiny_fit_trains_tests_and_translates(tmp_path, monkeypatch):
    config = tmp_path / "flat.yaml"
    config.write_text(f"data:\n  corpus: synthetic:tiny\n  cache_dir: {tmp_path / 'cache'}\n"
                      f"logging:\n  runs_dir: {tmp_path / 'runs'}\n"
                      "model:\n  arch: flat\n  enc_layers: 2\n"  # 1 bottom + 1 top block
                      "train:\n  max_steps: 6\n  val_every_steps: 6\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with single_process_run_env():
        run_dir = run_dir_of(docmt("fit", config, "--profile", "tiny"))
        resolved = OmegaConf.load(run_dir / "config.yaml")
        assert (resolved.model.arch, resolved.model.bottom_layers, resolved.context.next_sentences) == ("flat", 1, 1)
        record = json.loads((run_dir / "run.json").read_text())
        assert record["stages"]["main"]["global_step"] == 6
        assert_test_bleu_rescores(run_dir, "synthetic:tiny")  # the test split beam-searched and scored

        loaded = load_checkpoint(record["checkpoint"])
        assert isinstance(loaded.model, FlatSeq2Seq) and loaded.model.top_layers == 1
        docs = tmp_path / "docs.jsonl"
        docs.write_text(json.dumps({"doc_id": "d", "src": ["the cat sleeps", "it runs", "the dog"]}) + "\n",
                        encoding="utf-8")
        outcome = docmt("translate", "--ckpt", record["checkpoint"], "--input", docs, "--output", "out.jsonl",
                        "--beam", "3")
        assert outcome.code == 0, outcome.err
        [row] = [json.loads(line) for line in Path("out.jsonl").read_text(encoding="utf-8").splitlines()]
        assert row["doc_id"] == "d" and len(row["hyp"]) == 3


def test_packed_rows_change_nothing(monkeypatch):
    assert_packing_changes_nothing(flat_model, doc_batch(), monkeypatch)
