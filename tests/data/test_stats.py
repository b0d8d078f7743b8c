"""Corpus statistics, computed by hand on small corpora and checked against raw files."""

from __future__ import annotations

from lightning_docmt.data.corpora import read_corpus
from lightning_docmt.data.stats import corpus_stats
from lightning_docmt.data.types import Corpus, Document
from tests.helpers.paths import SHARED_DATA

MARUF = SHARED_DATA / "maruf-ted-ende"


def test_hand_computed_corpus_with_splits():
    corpus = Corpus("hand", [
        Document("a", ["one two", "three"], ["un deux", "trois"], "train"),
        Document("b", ["four five six"], ["quatre cinq six sept"], "train"),
        Document("c", ["seven", "eight nine", "ten"], ["sept", "huit neuf", "dix"], "test"),
    ], skipped={"empty_pair": 2})
    stats = corpus_stats(corpus)
    assert stats == {
        "spec": "hand", "documents": 3, "sentences": 6, "src_tokens": 10, "tgt_tokens": 11,
        "mean_sentences_per_document": 2.0, "max_document_sentences": 3,
        "skipped": {"empty_pair": 2},
        "splits": {
            "train": {"documents": 2, "sentences": 3, "src_tokens": 6, "tgt_tokens": 7,
                      "mean_sentences_per_document": 1.5, "max_document_sentences": 2},
            "test": {"documents": 1, "sentences": 3, "src_tokens": 4, "tgt_tokens": 4,
                     "mean_sentences_per_document": 3.0, "max_document_sentences": 3},
        },
    }


def test_corpus_without_splits_has_no_split_entries():
    stats = corpus_stats(Corpus("x", [Document("d", ["a b"], ["c"])]))
    assert stats["splits"] == {} and stats["src_tokens"] == 2 and stats["tgt_tokens"] == 1


def test_maruf_test_set_against_the_raw_files():
    src, tgt = MARUF / "concatenated_en2de_test_en.txt", MARUF / "concatenated_en2de_test_de.txt"
    stats = corpus_stats(read_corpus(f"maruf:{src},{tgt}"))
    assert (stats["documents"], stats["sentences"]) == (23, 2271)
    for side, path in (("src_tokens", src), ("tgt_tokens", tgt)):
        lines = path.read_text(encoding="utf-8").splitlines()
        assert stats[side] == sum(len(line.split()) for line in lines if line.strip() != "<d>")
    assert stats["mean_sentences_per_document"] == 2271 / 23


def test_synthetic_splits_add_up():
    stats = corpus_stats(read_corpus("synthetic:tiny"))
    assert list(stats["splits"]) == ["train", "valid", "test"]
    for key in ("documents", "sentences", "src_tokens", "tgt_tokens"):
        assert sum(split[key] for split in stats["splits"].values()) == stats[key]
    assert stats["max_document_sentences"] == max(s["max_document_sentences"]
                                                  for s in stats["splits"].values())
