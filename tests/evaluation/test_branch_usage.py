"""A parallel attention stack's branches scored alone (`evaluation/branch_usage.py`): on an untrained
tiny `pas` model (a stack over a BERT with random frozen weights, reading the previous sentence), R
alone in every layer is the sentence Transformer with the same weights, hypothesis for hypothesis;
S alone is another model; the three rules are scored in one path and the mean rule stays the
model's own afterwards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from lightning_docmt.config.registry import build_model
from lightning_docmt.data.context_anchors import own_context
from lightning_docmt.evaluation.branch_usage import BRANCH_METRIC_MEANINGS, branch_usage_metrics
from lightning_docmt.evaluation.context_usage import decode_bleu, sentence_log_probs
from lightning_docmt.inference import decoding
from lightning_docmt.inference.loaded_model import LoadedModel
from lightning_docmt.inference.translate import binarize_documents
from tests.helpers.corpus_fixtures import CONTEXT_DOCUMENTS as DOCUMENTS
from tests.helpers.corpus_fixtures import CONTEXT_REFERENCES as REFERENCES
from tests.helpers.corpus_fixtures import WORD_VOCAB as VOCAB
from tests.helpers.stage_fits import tiny_config

PAS = ["model.arch=pas", "model.context_encoders.bert.checkpoint=minilm",
       "model.context_encoders.bert.random_weights=true", "model.stack=[{stream: bert_pc, encoder: bert}]",
       "context.streams.bert_pc.prev=1"]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def loaded(tmp_path: Path, *overrides: str) -> LoadedModel:
    cfg = tiny_config(tmp_path, *overrides)
    torch.manual_seed(0)
    return LoadedModel(build_model(cfg.model, len(VOCAB), len(VOCAB)).eval(), cfg, VOCAB, VOCAB)


def recorded_hypotheses(monkeypatch) -> list[dict[int, list[int]]]:
    """One mapping sent_index -> hypothesis ids per decode of the whole split (a new one each time
    sentence 0 comes again)."""
    decodes: list[dict[int, list[int]]] = []
    translate = decoding.best_tokens

    def record(network, batch, decode, beam, len_penalty=None):
        best = translate(network, batch, decode, beam, len_penalty)
        indices = batch["sent_index"].tolist()
        if not decodes or any(i in decodes[-1] for i in indices):
            decodes.append({})
        decodes[-1].update(zip(indices, best))
        return best

    monkeypatch.setattr(decoding, "best_tokens", record)
    return decodes


def test_r_alone_is_the_transformer_with_the_same_weights_and_s_alone_another_model(tmp_path, monkeypatch):
    pas = loaded(tmp_path, *PAS)
    (tmp_path / "pas").mkdir()
    split = binarize_documents(DOCUMENTS, pas, tmp_path / "pas")
    transformer = loaded(tmp_path, "model.arch=transformer")
    missing = transformer.model.load_state_dict(pas.model.state_dict(), strict=False)
    assert not missing.missing_keys  # every Transformer tensor is the pas model's own
    (tmp_path / "sentence").mkdir()
    sentence_split = binarize_documents(DOCUMENTS, transformer, tmp_path / "sentence")
    default_nll = sentence_log_probs(pas, split, [own_context(split.doc_offsets)], 4096)[0]

    decodes = recorded_hypotheses(monkeypatch)
    scores = branch_usage_metrics(pas, split, REFERENCES, "13a")
    assert set(scores) == set(BRANCH_METRIC_MEANINGS)  # every score is explained under the tables
    original, stack = decodes
    assert len(original) == len(stack) == split.n_sentences
    everything = [np.arange(split.n_sentences)]
    decode_bleu(transformer, sentence_split, own_context(split.doc_offsets), REFERENCES, "13a", everything)
    assert original == decodes[2]  # R alone: the Transformer's own translations
    assert original != stack
    sentence = sentence_log_probs(transformer, sentence_split, [own_context(sentence_split.doc_offsets)], 4096)[0]
    assert scores["branch/original/nll"] == pytest.approx(-sentence.total.sum() / sentence.tokens.sum(), rel=1e-6)
    assert abs(scores["branch/stack/nll"] - scores["branch/original/nll"]) > 1e-3
    assert scores["branch/mean/nll"] == pytest.approx(-default_nll.total.sum() / default_nll.tokens.sum(), rel=1e-6)
    after = sentence_log_probs(pas, split, [own_context(split.doc_offsets)], 4096)[0]
    assert np.array_equal(after.total, default_nll.total)  # the model evaluates by the mean again


def test_a_model_without_a_stack_has_no_branch_to_score(tmp_path):
    transformer = loaded(tmp_path, "model.arch=transformer")
    (tmp_path / "split").mkdir()
    split = binarize_documents(DOCUMENTS, transformer, tmp_path / "split")
    with pytest.raises(ValueError, match="model.arch=transformer has no DropBranch"):
        branch_usage_metrics(transformer, split, REFERENCES, "13a")
