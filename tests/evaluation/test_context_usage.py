"""Context anchors (`data/context_anchors.py`) and the context-usage diagnostics
(`evaluation/context_usage.py`): CXMI and the random-context control.

Models here are untrained tiny ones (random weights): a model whose output cannot depend on the
context must get a CXMI of exactly 0, one that reads its context a CXMI that is not 0, and every
model exactly 0 on the first sentences of documents (empty context either way). That CXMI is clearly
positive for a *trained* context model is checked in `test_learning.py` (slow).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from lightning_docmt.batch import EOS_ID
from lightning_docmt.config.registry import build_model
from lightning_docmt.data.collate import collate, row_lengths
from lightning_docmt.data.context_anchors import document_groups, no_context, own_context, random_context
from lightning_docmt.evaluation.context_usage import METRIC_MEANINGS, context_usage_metrics
from lightning_docmt.evaluation.contrastive_scoring import score_suite
from lightning_docmt.inference import decoding
from lightning_docmt.inference.loaded_model import LoadedModel
from lightning_docmt.inference.own_outputs import OutputTokens, WithContextTargets
from lightning_docmt.inference.translate import binarize_documents
from tests.helpers.corpus_fixtures import CONTEXT_DOCUMENTS as DOCUMENTS
from tests.helpers.corpus_fixtures import CONTEXT_REFERENCES as REFERENCES
from tests.helpers.corpus_fixtures import WORD_VOCAB as VOCAB
from tests.helpers.stage_fits import tiny_config

DOC_OFFSETS = np.array([0, 4, 5, 9, 15, 18])  # documents of 4, 1, 4, 6 and 3 sentences


def test_random_context_comes_from_another_document_with_as_many_neighbours():
    anchors = random_context(DOC_OFFSETS, prev_size=2, next_size=1, seed=3)
    own = own_context(DOC_OFFSETS)
    doc = np.searchsorted(DOC_OFFSETS, np.arange(18), side="right") - 1
    anchor_doc = np.searchsorted(DOC_OFFSETS, anchors.anchor, side="right") - 1
    alone = np.arange(18) == 4  # the one-sentence document: no context, so nothing to replace
    assert (anchor_doc[~alone] != doc[~alone]).all() and anchors.anchor[4] == 4
    assert (anchors.start == DOC_OFFSETS[anchor_doc]).all() and (anchors.end == DOC_OFFSETS[anchor_doc + 1]).all()
    for size, before, after in ((2, own.anchor - own.start, anchors.anchor - anchors.start),
                                (1, own.end - 1 - own.anchor, anchors.end - 1 - anchors.anchor)):
        assert (np.minimum(before, size) == np.minimum(after, size)).all()


def test_random_context_draws_uniformly_among_the_other_documents():
    # three documents of four sentences; with one previous sentence, sentences 1-3 of each share a
    # shape: sentence 1 (document 0) draws among the six of documents 1 and 2, equally often.
    offsets = np.array([0, 4, 8, 12])
    drawn = Counter(int(random_context(offsets, 1, 0, seed=seed).anchor[1]) for seed in range(3000))
    assert sorted(drawn) == [5, 6, 7, 9, 10, 11]
    assert all(400 < n < 600 for n in drawn.values())  # 500 expected each; sd about 20


def test_random_context_is_seeded():
    first, again = (random_context(DOC_OFFSETS, 2, 0, seed=5) for _ in range(2))
    other = random_context(DOC_OFFSETS, 2, 0, seed=6)
    assert (first.anchor == again.anchor).all() and not (first.anchor == other.anchor).all()


def test_random_context_needs_another_document():
    assert (random_context(np.array([0, 1]), 1, 0, seed=1).anchor == [0]).all()  # nothing to replace
    with pytest.raises(ValueError, match="no sentence of another collection"):
        random_context(np.array([0, 5]), prev_size=1, next_size=0, seed=1)


def test_bible_chapters_group_by_book_and_other_documents_stand_alone():
    assert document_groups(["Acts.1", "Acts.2", "1 Corinthians.1", "Acts.3"]).tolist() == [0, 0, 1, 0]
    assert document_groups(["talk.7", "1801", "maruf-2"]).tolist() == [0, 1, 2]  # not every id a chapter
    assert document_groups(["syn-test-000001", "syn-test-000002"]).tolist() == [0, 1]


def test_random_context_comes_from_another_collection():
    """Five documents in two collections (0, 0, 1, 1, 0): every sentence with context reads one
    of the other collection, never another document of its own, whatever the seed."""
    groups = np.array([0, 0, 1, 1, 0])
    doc = np.searchsorted(DOC_OFFSETS, np.arange(18), side="right") - 1
    for seed in range(200):
        anchors = random_context(DOC_OFFSETS, prev_size=1, next_size=0, seed=seed, groups=groups)
        anchor_doc = np.searchsorted(DOC_OFFSETS, anchors.anchor, side="right") - 1
        has_context = np.arange(18) != DOC_OFFSETS[doc]  # not a document's first sentence
        assert (groups[anchor_doc[has_context]] != groups[doc[has_context]]).all(), seed
    with pytest.raises(ValueError, match="another collection"):
        random_context(DOC_OFFSETS, 1, 0, seed=1, groups=np.zeros(5, dtype=np.int64))


@pytest.fixture
def split(tmp_path: Path):
    documents = DOCUMENTS
    model = LoadedModel(None, tiny_config(tmp_path, "context.prev_sentences=2"), VOCAB, VOCAB)
    (tmp_path / "split").mkdir()
    return binarize_documents(documents, model, tmp_path / "split")


def test_own_anchors_give_the_ordinary_batch_and_no_context_the_first_sentence_layout(tmp_path, split):
    cfg = tiny_config(tmp_path, "model.arch=zhang_doc", "context.prev_sentences=2", "context.next_sentences=1")
    spec = LoadedModel(None, cfg, VOCAB, VOCAB).window
    index = np.arange(split.n_sentences)
    plain = collate(split, index, spec)
    own = collate(split, index, spec, own_context(split.doc_offsets))
    assert plain.keys() == own.keys() and all((plain[k] == own[k]).all() for k in plain)
    empty = collate(split, index, spec, no_context(split.n_sentences))
    for key in ("ctx_src", "ctx_next"):
        assert empty[key].tolist() == [[EOS_ID]] * split.n_sentences
        assert empty[f"{key}_seg"].tolist() == [[0]] * split.n_sentences
    for key in ("src", "tgt_in", "tgt_out", "sent_index", "doc_index", "pos_in_doc"):
        assert (empty[key] == plain[key]).all()


def test_row_lengths_follow_the_anchors(tmp_path, split):
    cfg = tiny_config(tmp_path, "model.arch=zhang_doc", "context.prev_sentences=2")
    spec = LoadedModel(None, cfg, VOCAB, VOCAB).window
    index = np.arange(split.n_sentences)
    anchors = random_context(split.doc_offsets, 2, 0, seed=1)
    lengths = row_lengths(split, spec, index, anchors)
    for i in index:
        batch = collate(split, [i], spec, anchors)
        assert lengths[2, i] == batch["ctx_src"].size(1)


def loaded_model(tmp_path: Path, *overrides: str) -> LoadedModel:
    cfg = tiny_config(tmp_path, *overrides)
    return LoadedModel(build_model(cfg.model, len(VOCAB), len(VOCAB)).eval(), cfg, VOCAB, VOCAB)


def usage(model: LoadedModel, split) -> dict[str, float]:
    return context_usage_metrics(model, split, REFERENCES, "13a", decode=False)


def test_cxmi_is_exactly_zero_for_models_that_cannot_use_their_context(tmp_path, split):
    for overrides in (["model.arch=transformer"],
                      ["model.arch=zhang_doc", "context.prev_sentences=2",
                       "model.context_attn.encoder=false", "model.context_attn.decoder=false"]):
        scores = usage(loaded_model(tmp_path, *overrides), split)
        assert scores["cxmi"] == 0.0 and scores["random_ctx/cxmi"] == 0.0, overrides


def test_cxmi_of_a_context_model_differs_from_zero_except_on_first_sentences(tmp_path, split):
    model = loaded_model(tmp_path, "model.arch=zhang_doc", "context.prev_sentences=2")
    scores = usage(model, split)
    assert abs(scores["cxmi/first"]) < 1e-6  # empty context either way; rounding: see context_usage
    assert abs(scores["cxmi/rest"]) > 1e-4 and abs(scores["random_ctx/cxmi"]) > 1e-4
    tokens = split.tgt.offsets[1:] - split.tgt.offsets[:-1] + 1  # target tokens and <eos>
    is_first = np.zeros(split.n_sentences, dtype=bool)
    is_first[split.doc_offsets[:-1]] = True
    rest_share = tokens[~is_first].sum() / tokens.sum()
    assert scores["cxmi"] == pytest.approx(rest_share * scores["cxmi/rest"], rel=1e-9)


DECODED = {"random_ctx/bleu", "random_ctx/bleu_delta", "random_ctx/bleu_floor"}


def recording_decodes(monkeypatch, model: LoadedModel) -> list[dict]:
    """Record every batch the model decodes: its context tensor and whether autocast was on."""
    calls: list[dict] = []
    translate = decoding.best_tokens

    def record(network, batch, decode, beam, len_penalty=None):
        assert network is model.model
        calls.append({"index": batch["sent_index"].tolist(), "ctx_src": batch["ctx_src"].clone(),
                      "autocast": torch.is_autocast_enabled("cpu")})
        return translate(network, batch, decode, beam, len_penalty)

    monkeypatch.setattr(decoding, "best_tokens", record)
    return calls


def test_random_context_bleu_decodes_real_and_random_context_in_one_path(tmp_path, split, monkeypatch):
    """Three decodes of every sentence: the real context and the random one in the same batches,
    the real one again in other batches (the floor); the random pass reads other contexts."""
    model = loaded_model(tmp_path, "model.arch=zhang_doc", "context.prev_sentences=2")
    calls = recording_decodes(monkeypatch, model)
    scores = context_usage_metrics(model, split, REFERENCES, "13a", decode=True)
    assert DECODED <= set(scores) <= set(METRIC_MEANINGS)  # every score is explained under the tables
    order = [c["index"] for c in calls]
    count = sum(len(i) for i in order)
    assert count == 3 * split.n_sentences
    real, rest = calls[:len(calls) // 3], calls[len(calls) // 3:]
    batches = [c["index"] for c in real]
    random = rest[:len(real)]
    assert [c["index"] for c in random] == batches  # the same batches for the real and the random context
    changed = sum(not torch.equal(a["ctx_src"], b["ctx_src"]) for a, b in zip(real, random))
    assert changed == len(real)  # every batch holds a sentence with context: it reads another
    assert not any(c["autocast"] for c in calls)  # the default precision: float32


def test_random_context_bleu_runs_under_the_test_loops_precision(tmp_path, split, monkeypatch):
    model = loaded_model(tmp_path, "model.arch=zhang_doc", "context.prev_sentences=2")
    calls = recording_decodes(monkeypatch, model)
    context_usage_metrics(model, split, REFERENCES, "13a", decode=True, precision="bf16-mixed")
    assert calls and all(c["autocast"] for c in calls)


def test_a_model_blind_to_its_context_loses_exactly_nothing_with_another_one(tmp_path, split):
    """Same batches, same precision: a model whose context attention is off decodes the same
    hypotheses whatever the context (before, test BLEU in bf16 against a float32 control decode
    moved such rows by up to 0.24 BLEU); its CXMI is 0 too."""
    model = loaded_model(tmp_path, "model.arch=zhang_doc", "context.prev_sentences=2",
                         "model.context_attn.encoder=false", "model.context_attn.decoder=false")
    scores = context_usage_metrics(model, split, REFERENCES, "13a", decode=True, precision="bf16-mixed")
    assert scores["random_ctx/bleu_delta"] == 0.0 and scores["cxmi"] == 0.0, scores


def test_target_context_is_cut_from_the_models_own_translations(tmp_path, split):
    """`WithContextTargets`: the target side stays the references, `ctx_tgt` comes from the
    outputs; CXMI with them differs from the CXMI with the references (`cxmi/gold_context`)."""
    settings = ("model.arch=yk_rnn", "model.context=separated", "context.side=target", "context.prev_sentences=1")
    spec = LoadedModel(None, tiny_config(tmp_path, *settings), VOCAB, VOCAB).window
    token = VOCAB.encode("DOG")[0]
    outputs = OutputTokens(split.n_sentences)
    for i in range(split.n_sentences):
        outputs.record(i, [token] * (i % 3 + 1))
    read = WithContextTargets(split, outputs)
    index = np.arange(split.n_sentences)
    own, gold = collate(read, index, spec), collate(split, index, spec)
    assert torch.equal(own["tgt_out"], gold["tgt_out"]) and not torch.equal(own["ctx_tgt"], gold["ctx_tgt"])
    second = int(split.doc_offsets[0]) + 1  # the second sentence of document 0 reads the first's output
    assert own["ctx_tgt"][second, :1].tolist() == [token]
    assert (row_lengths(read, spec, index)[2] == own["ctx_tgt"].ne(0).sum(1).numpy()).all()
    model = loaded_model(tmp_path, *settings)
    scores = context_usage_metrics(model, split, REFERENCES, "13a", decode=False, own_targets=outputs)
    assert scores["cxmi"] != scores["cxmi/gold_context"]
    assert scores["cxmi/gold_context"] == usage(model, split)["cxmi"]


def test_a_suite_line_with_source_context_only_is_scored_by_a_model_reading_both_sides(tmp_path):
    """Public suites often give no target context: the model reads empty target sentences there."""
    model = loaded_model(tmp_path, "model.arch=zhang_doc", "context.prev_sentences=2", "context.side=mix")
    example = {"id": "e", "src": "the cat runs", "src_context": ["a dog", "the river"],
               "tgt_context": [], "candidates": ["RUNS CAT THE", "RUNS DOG THE"], "label": 0,
               "phenomenon": "test"}
    scores = score_suite(model, [example])
    assert len(scores[0]) == 2 and all(np.isfinite(scores[0])) and scores[0][0] != scores[0][1]


@pytest.mark.parametrize("stream, reads_neighbours", [("{format: pair}", False), ("{format: pair, prev: 1}", True)])
def test_a_stack_over_the_current_sentence_alone_has_a_cxmi_of_exactly_zero(tmp_path, stream, reads_neighbours):
    """Donato et al.'s B_s(c) (and so Multi-source) reads the current sentence only: its stream keeps
    that sentence under the no-context and random-context passes, so CXMI is exactly 0; B_s(p,c),
    over the same frozen encoder, is not (the check can fail)."""
    model = loaded_model(tmp_path, "model.arch=pas", "model.context_encoders.bert.checkpoint=minilm",
                         f"context.streams.s={stream}", "model.stack=[{stream: s, encoder: bert}]")
    (tmp_path / "stream_split").mkdir()
    scores = usage(model, binarize_documents(DOCUMENTS, model, tmp_path / "stream_split"))
    if reads_neighbours:
        assert abs(scores["cxmi/rest"]) > 1e-4 and abs(scores["random_ctx/cxmi"]) > 1e-4, scores
    else:
        assert scores["cxmi"] == 0.0 and scores["random_ctx/cxmi"] == 0.0, scores
