"""Corpus statistics, computed by hand on small corpora and checked against raw files; tokens are
counted by the BLEU tokenizer of each side's language."""

from __future__ import annotations

import re

import pytest
from sacrebleu import BLEU

from lightning_docmt.config.schema import DataConfig, EvalConfig
from lightning_docmt.data.corpora import read_corpus
from lightning_docmt.data.languages import bleu_tokenizer
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
        "src_tokenizer": "13a", "tgt_tokenizer": "13a",  # no language known: BLEU's default
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


def test_punctuation_is_a_token_as_bleu_counts_it():
    stats = corpus_stats(Corpus("x", [Document("d", ["Hello, world."], ["Bonjour le monde !"])]))
    assert (stats["src_tokens"], stats["tgt_tokens"]) == (4, 4)


def test_maruf_test_set_against_the_raw_files():
    """Counted as sacreBLEU's 13a counts the raw lines (English and German: no language in the spec)."""
    src, tgt = MARUF / "concatenated_en2de_test_en.txt", MARUF / "concatenated_en2de_test_de.txt"
    stats = corpus_stats(read_corpus(f"maruf:{src},{tgt}"))
    assert (stats["documents"], stats["sentences"]) == (23, 2271)
    tokenize = BLEU(tokenize="13a").tokenizer
    for side, path in (("src_tokens", src), ("tgt_tokens", tgt)):
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip() != "<d>"]
        assert stats[side] == sum(len(tokenize(line).split()) for line in lines)
        assert stats[side] > sum(len(line.split()) for line in lines)  # punctuation is split off
    assert stats["mean_sentences_per_document"] == 2271 / 23


HAN = re.compile(r"[\u4e00-\u9fff]")
CHINESE = ["起初，神创造天地。", "地是空虚混沌，渊面黑暗；神的灵运行在水面上。"]
JAPANESE = ["初めに、神が天と地を創造した。", "地は茫漠として何もなかった。"]
ENGLISH = ["In the beginning, God created the heavens and the earth.", "The earth was formless and empty."]


@pytest.mark.parametrize("spec, src, tokenizer", [("bible:zh-en?src=cnv", CHINESE, "zh"),
                                                  ("bible:ja-en?src=shinkaiyaku", JAPANESE, "ja-mecab")])
def test_a_chinese_or_japanese_side_is_counted_by_its_bleu_tokenizer(spec, src, tokenizer):
    stats = corpus_stats(Corpus(spec, [Document("d", src, ENGLISH)]))
    assert (stats["src_tokenizer"], stats["tgt_tokenizer"]) == (tokenizer, "13a")
    # the tokenizer BLEU scores this language with as a target
    language = spec.split(":")[1][:2]
    assert stats["src_tokenizer"] == bleu_tokenizer(EvalConfig(), DataConfig(corpus=f"bible:en-{language}"))
    whitespace = sum(len(s.split()) for s in src)
    assert whitespace == len(src) and stats["src_tokens"] > 3 * whitespace  # not one token per sentence
    assert stats["src_tokens"] <= sum(len(s) for s in src)  # no more tokens than characters
    assert stats["tgt_tokens"] == sum(len(s.split()) for s in ENGLISH) + 3  # a comma and two periods split off


def test_chinese_counts_one_token_per_han_character():
    """sacreBLEU's `zh` tokenizer splits every Han character and every punctuation mark off."""
    stats = corpus_stats(Corpus("bible:zh-en?src=cnv", [Document("d", CHINESE, ENGLISH)]))
    punctuation = 5  # ，。 and ，；。
    han = sum(len(HAN.findall(s)) for s in CHINESE)
    assert stats["src_tokens"] == han + punctuation == sum(len(s) for s in CHINESE)


def test_synthetic_splits_add_up():
    stats = corpus_stats(read_corpus("synthetic:tiny"))
    assert list(stats["splits"]) == ["train", "valid", "test"]
    for key in ("documents", "sentences", "src_tokens", "tgt_tokens"):
        assert sum(split[key] for split in stats["splits"].values()) == stats[key]
    assert stats["max_document_sentences"] == max(s["max_document_sentences"]
                                                  for s in stats["splits"].values())
