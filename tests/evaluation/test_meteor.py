"""METEOR (exact+stem): expected values are worked out by hand from the formula (alpha 0.9, beta 3, gamma 0.5):

    P = m / hyp_len, R = m / ref_len, Fmean = P*R / (0.9*P + 0.1*R),
    penalty = 0.5 * (chunks / m)**3, score = Fmean * (1 - penalty).
"""

from __future__ import annotations

import nltk.data
import pytest

from lightning_docmt.evaluation.meteor import METEOR_NAME, corpus_meteor, sentence_meteor


@pytest.fixture(autouse=True)
def no_nltk_data(monkeypatch):
    """Any attempt to load NLTK data (WordNet, punkt) fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"NLTK data was requested: {args}")
    monkeypatch.setattr(nltk.data, "find", refuse)
    monkeypatch.setattr(nltk.data, "load", refuse)


def test_name():
    assert METEOR_NAME == "METEOR (exact+stem)"


def test_exact_full_match_is_one_chunk():
    # 4 words, all matched in 1 chunk: P = R = Fmean = 1, penalty = 0.5 * (1/4)**3 = 0.5/64 = 0.0078125
    assert sentence_meteor("the cat sat down", "the cat sat down") == pytest.approx(0.9921875)
    # 2 words: penalty = 0.5 * (1/2)**3 = 0.0625 -> 0.9375
    assert sentence_meteor("good morning", "good morning") == pytest.approx(0.9375)


def test_tokenisation_splits_punctuation_and_lowercases():
    # 13a splits "Hello, world!" into hello , world ! -> 4 words matched in 1 chunk: 1 - 0.5/64 = 0.9921875
    assert sentence_meteor("Hello, world!", "hello , world !") == pytest.approx(0.9921875)


def test_lowercase_false_is_case_sensitive():
    # "The" no longer matches "the" (not even by stem): m = 1 ("cat"), P = R = 1/2, Fmean = 1/2,
    # penalty = 0.5 * (1/1)**3 = 0.5 -> 0.25. With lowercasing: 2 words, 1 chunk -> 1 - 0.5/8 = 0.9375.
    assert sentence_meteor("The cat", "the cat", lowercase=False) == pytest.approx(0.25)
    assert sentence_meteor("The cat", "the cat") == pytest.approx(0.9375)


def test_stem_only_matches_count():
    # Porter: cats -> cat, running -> run, runs -> run (checked). All 4 words match in 1 chunk:
    # 1 - 0.5/64 = 0.9921875. Exact matching alone would give m = 2 ("the", "are"), 2 chunks,
    # P = R = Fmean = 1/2, penalty 0.5 * (2/2)**3 = 0.5 -> 0.25.
    assert sentence_meteor("the cats are running", "the cat are runs") == pytest.approx(0.9921875)


@pytest.mark.parametrize("hyp, ref, expected", [
    # sat->2, the->0, cat->1: sorted by hypothesis (0,2)(1,0)(2,1) -> chunks [sat] [the cat] = 2,
    # P = R = 1, penalty = 0.5 * (2/3)**3 = 4/27 -> 23/27 = 0.851852
    ("sat the cat", "the cat sat", 23 / 27),
    # fully reversed: 4 chunks of 1 word, penalty = 0.5 * (4/4)**3 = 0.5 -> 0.5
    ("mat the on sat", "sat on the mat", 0.5),
])
def test_fragmentation_penalty(hyp, ref, expected):
    assert sentence_meteor(hyp, ref) == pytest.approx(expected)


def test_partial_match_weights_recall():
    # m = 3 ("the cat sat"), 1 chunk, penalty = 0.5 * (1/3)**3 = 1/54.
    # hyp 4 words, ref 6: P = 3/4, R = 1/2, Fmean = 0.375 / (0.675 + 0.05) = 15/29,
    # score = 15/29 * 53/54 = 795/1566 = 0.507663
    assert sentence_meteor("the cat sat quietly", "the cat sat on a mat") == pytest.approx(795 / 1566)
    # swapped: P = 1/2, R = 3/4, Fmean = 0.375 / (0.45 + 0.075) = 5/7, score = 5/7 * 53/54 = 265/378 = 0.701058
    assert sentence_meteor("the cat sat on a mat", "the cat sat quietly") == pytest.approx(265 / 378)


@pytest.mark.parametrize("hyp, ref", [("the cat", "a dog"), ("", "a dog"), ("the cat", ""), ("", "")])
def test_no_overlap_or_empty_is_zero(hyp, ref):
    assert sentence_meteor(hyp, ref) == 0.0


def test_corpus_is_mean_of_sentence_scores():
    # sentence scores by hand: 0.9921875 (full match, 4 words), 0 (no overlap), 23/27 (2 chunks of 3 words)
    hyps = ["the cat sat down", "the cat", "sat the cat"]
    refs = ["the cat sat down", "a dog", "the cat sat"]
    assert corpus_meteor(hyps, refs) == pytest.approx((0.9921875 + 0 + 23 / 27) / 3)


def test_corpus_length_mismatch_raises():
    with pytest.raises(ValueError, match="3 hypotheses but 2 references"):
        corpus_meteor(["a", "b", "c"], ["a", "b"])


def test_corpus_empty_raises():
    with pytest.raises(ValueError, match="no hypotheses"):
        corpus_meteor([], [])


def test_synonyms_do_not_match():
    # big / large are WordNet synonyms with different Porter stems (big, larg): only "a" and "house" match,
    # at hypothesis/reference positions 0 and 2 -> 2 chunks, P = R = Fmean = 2/3,
    # penalty = 0.5 * (2/2)**3 = 0.5 -> 1/3. (With synonyms: 3 words in 1 chunk, 1 - 0.5/27 = 0.981.)
    assert sentence_meteor("a big house", "a large house") == pytest.approx(1 / 3)
