from __future__ import annotations

import numpy as np
import pytest
import torch

from lightning_docmt.batch import BOS_ID, EOS_ID, PAD_ID, SEP_ID
from lightning_docmt.config.schema import ContextConfig
from lightning_docmt.data.cache import build_cache, load_cache
from lightning_docmt.data.collate import collate, row_lengths
from lightning_docmt.data.types import Document
from lightning_docmt.data.vocab import WordVocab
from lightning_docmt.data.windows import WindowSpec, context_lengths, context_window
from lightning_docmt.errors import DocMTInputError
from tests.helpers.corpus_fixtures import random_documents

E, S = EOS_ID, SEP_ID
# doc 0: sentences [10 11] [12] [13 14 15]; doc 1: [20] [21 22]
SENTENCES = [[10, 11], [12], [13, 14, 15], [20], [21, 22]]
IDS = np.array([t for s in SENTENCES for t in s], dtype=np.uint16)
OFFSETS = np.concatenate(([0], np.cumsum([len(s) for s in SENTENCES])))
DOC_OFFSETS = np.array([0, 3, 5])
DOC_OF = [(0, 3), (0, 3), (0, 3), (3, 5), (3, 5)]


def window(i, direction, size, max_tokens=100, separator=True):
    start, end = DOC_OF[i]
    tokens, segments = context_window(IDS, OFFSETS, i, start, end, direction, size, max_tokens,
                                      separator)
    return tokens.tolist(), segments.tolist()


def test_previous_context_oldest_first_with_separators_and_distances():
    assert window(2, -1, 2) == ([10, 11, S, 12, E], [2, 2, 2, 1, 1])
    assert window(1, -1, 2) == ([10, 11, E], [1, 1, 1])


def test_first_sentence_of_a_document_has_the_empty_context():
    assert window(0, -1, 3) == ([E], [0])
    assert window(3, -1, 3) == ([E], [0])  # never reaches back into document 0


def test_k_larger_than_available_takes_what_the_document_has():
    assert window(2, -1, 10) == window(2, -1, 2)
    assert window(4, -1, 10) == ([20, E], [1, 1])


def test_next_context_nearest_first_and_bounded_by_the_document():
    assert window(0, +1, 1) == ([12, E], [1, 1])
    assert window(0, +1, 2) == ([12, S, 13, 14, 15, E], [1, 1, 2, 2, 2, 1])
    assert window(2, +1, 2) == ([E], [0])  # last sentence of document 0
    assert window(3, +1, 5) == ([21, 22, E], [1, 1, 1])


def test_separator_off_concatenates_sentences():
    assert window(2, -1, 2, separator=False) == ([10, 11, 12, E], [2, 2, 1, 1])


def test_truncation_removes_the_oldest_tokens_and_keeps_eos():
    assert window(2, -1, 2, max_tokens=3) == ([S, 12, E], [2, 1, 1])
    assert window(0, +1, 2, max_tokens=3) == ([12, S, E], [1, 1, 1])
    assert window(2, -1, 2, max_tokens=1) == ([E], [1])


@pytest.mark.parametrize("direction,size,max_tokens,separator",
                         [(-1, 1, 50, True), (-1, 3, 7, True), (+1, 2, 50, False),
                          (+1, 3, 4, True)])
def test_vectorised_lengths_match_the_windows(direction, size, max_tokens, separator):
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 6, size=40)
    doc_offsets = np.concatenate(([0], np.cumsum(sizes)))
    offsets = np.concatenate(([0], np.cumsum(rng.integers(0, 9, size=doc_offsets[-1]))))
    ids = rng.integers(5, 100, size=offsets[-1])
    index = np.arange(doc_offsets[-1])
    doc = np.searchsorted(doc_offsets, index, side="right") - 1
    lengths = context_lengths(offsets, index, doc_offsets[doc], doc_offsets[doc + 1], direction,
                              size, max_tokens, separator)
    for d in range(len(sizes)):
        for i in range(doc_offsets[d], doc_offsets[d + 1]):
            tokens, segments = context_window(ids, offsets, i, doc_offsets[d], doc_offsets[d + 1],
                                              direction, size, max_tokens, separator)
            assert lengths[i] == len(tokens) == len(segments)


def test_window_spec_maps_the_context_side():
    def sides(side):
        return set(WindowSpec.from_config(ContextConfig(prev_sentences=2, next_sentences=1,
                                                        side=side)).sides())

    assert sides("source") == {"ctx_src", "ctx_next"}
    assert sides("target") == {"ctx_tgt", "ctx_next"}
    assert sides("mix") == {"ctx_src", "ctx_tgt", "ctx_next"}
    assert WindowSpec.from_config(ContextConfig()).sides() == {}
    with pytest.raises(DocMTInputError, match="context.side"):
        WindowSpec.from_config(ContextConfig(side="both"))


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    docs = random_documents(6, seed=5) + [Document("one", ["x y"], ["Y X"])]
    vocab = WordVocab.train([s for d in docs for s in d.src + d.tgt], size=500)
    out = tmp_path_factory.mktemp("split")
    build_cache(docs, vocab, vocab, out)
    return load_cache(out), docs, vocab


def test_collate_builds_the_contract_tensors(split):
    cache, docs, vocab = split
    spec = WindowSpec(prev_src=2, next_src=1, prev_tgt=1, max_tokens=64)
    sentences = [(d, j) for d, doc in enumerate(docs) for j in range(len(doc))]
    index = [len(sentences) - 1, 4, 0, 7]
    batch = collate(cache, index, spec)
    assert set(batch) == {"src", "tgt_in", "tgt_out", "sent_index", "doc_index", "pos_in_doc",
                          "ctx_src", "ctx_src_seg", "ctx_next", "ctx_next_seg", "ctx_tgt",
                          "ctx_tgt_seg"}
    for b, i in enumerate(index):
        d, j = sentences[i]
        src, tgt = vocab.encode(docs[d].src[j]), vocab.encode(docs[d].tgt[j])

        def row(key: str, n: int, b: int = b) -> list[int]:
            return batch[key][b, :n].tolist()

        assert row("src", len(src) + 1) == src + [EOS_ID]
        assert row("tgt_in", len(tgt) + 1) == [BOS_ID] + tgt
        assert row("tgt_out", len(tgt) + 1) == tgt + [EOS_ID]
        assert (batch["src"][b, len(src) + 1:] == PAD_ID).all()
        assert (batch["sent_index"][b], batch["doc_index"][b], batch["pos_in_doc"][b]) == (i, d, j)
        previous_tgt = vocab.encode(docs[d].tgt[j - 1]) + [EOS_ID] if j > 0 else [EOS_ID]
        assert row("ctx_tgt", len(previous_tgt)) == previous_tgt
        assert row("ctx_tgt_seg", len(previous_tgt)) == [1 if j > 0 else 0] * len(previous_tgt)
        assert (batch["ctx_tgt_seg"][b, len(previous_tgt):] == 0).all()
    assert all(t.dtype == torch.int64 for t in batch.values())


def test_row_lengths_are_the_unpadded_tensor_lengths(split):
    cache, _, _ = split
    spec = WindowSpec(prev_src=2, next_src=1, prev_tgt=1, max_tokens=6, separator=False)
    index = np.arange(cache.n_sentences)[::-1]
    lengths = row_lengths(cache, spec, index, chunk=4)
    batch = collate(cache, index, spec)
    for r, key in enumerate(["src", "tgt_in", "ctx_src", "ctx_next", "ctx_tgt"]):
        assert ((batch[key] != PAD_ID).sum(1).numpy() == lengths[r]).all()  # no id is PAD
