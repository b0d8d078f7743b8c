"""METEOR with exact and Porter-stem matching only, printed as "METEOR (exact+stem)".

METEOR (Banerjee & Lavie 2005, "METEOR: An Automatic Metric for MT Evaluation with Improved Correlation
with Human Judgments"; parameters as in Lavie & Agarwal 2007) aligns the hypothesis words to the
reference words in stages (here: exact surface form, then Porter stem) and scores the alignment:

    P = matches / hypothesis words,  R = matches / reference words
    Fmean   = P * R / (alpha * P + (1 - alpha) * R)
    penalty = gamma * (chunks / matches) ** beta
    score   = Fmean * (1 - penalty)

with alpha = 0.9, beta = 3, gamma = 0.5 (METEOR 1.0, NLTK's defaults). A chunk is a maximal run of
matched words that are adjacent, in the same order, in both hypothesis and reference.

The scoring is NLTK's `single_meteor_score` with its WordNet synonym stage switched off (a stand-in
whose `synsets` is empty), so no NLTK data (WordNet, punkt) is ever loaded. This is not METEOR 1.5 and
not the Java METEOR tool: there are no synonym and no paraphrase matches and no language-specific
function-word weights, so the numbers are not comparable with papers that used WordNet synonyms.

Tokenisation: sacreBLEU's 13a tokenizer (words split from punctuation), after lowercasing when
`lowercase=True`; NLTK expects pre-tokenised input. With `lowercase=False` both the exact and the stem
stage are case-sensitive.
"""

from __future__ import annotations

from typing import Sequence

from nltk.stem.porter import PorterStemmer
from nltk.translate.meteor_score import single_meteor_score
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

METEOR_NAME = "METEOR (exact+stem)"
ALPHA, BETA, GAMMA = 0.9, 3.0, 0.5


class _NoSynonyms:
    """Stands in for NLTK's WordNet reader: no word has synonyms, so the synonym stage matches nothing."""

    def synsets(self, word: str) -> list:
        return []


class _CaseKeepingPorter(PorterStemmer):
    """Porter stemmer that does not lowercase (NLTK's does), so `lowercase=False` stays case-sensitive."""

    def stem(self, word: str, to_lowercase: bool = False) -> str:
        return super().stem(word, to_lowercase=to_lowercase)


_TOKENIZE = Tokenizer13a()
_STEMMER = _CaseKeepingPorter()
_NO_SYNONYMS = _NoSynonyms()


def _tokens(text: str, lowercase: bool) -> list[str]:
    return _TOKENIZE(text.lower() if lowercase else text).split()


def sentence_meteor(hypothesis: str, reference: str, lowercase: bool = True) -> float:
    """METEOR (exact+stem) of one hypothesis against one reference, in [0, 1]; 0.0 if either is empty."""
    return single_meteor_score(
        _tokens(reference, lowercase), _tokens(hypothesis, lowercase), preprocess=str,
        stemmer=_STEMMER, wordnet=_NO_SYNONYMS, alpha=ALPHA, beta=BETA, gamma=GAMMA)


def corpus_meteor(hyps: Sequence[str], refs: Sequence[str], lowercase: bool = True) -> float:
    """Corpus METEOR (exact+stem): the mean of the sentence scores (as NLTK-based scripts report it).

    This is not the Java tool's corpus score, which pools the match and chunk counts over the corpus.
    """
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        raise ValueError("no hypotheses to score")
    return sum(sentence_meteor(h, r, lowercase) for h, r in zip(hyps, refs)) / len(hyps)
