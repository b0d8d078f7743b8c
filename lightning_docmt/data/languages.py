"""The languages of a run's data, and the settings that follow from them.

A run's source and target languages are `data.src_lang` / `data.tgt_lang` when set, else those
that the corpus spec names (`bible:zh-en` -> zh, en), else unknown (None). They decide:

- the BLEU tokenizer of `eval.tokenize: auto`: sacreBLEU's `zh` for a Chinese target, `ja-mecab`
  (MeCab with the IPA dictionary, installed with the pinned stack) for a Japanese target, `13a`
  otherwise, as the WMT and IWSLT evaluations of the seed papers do; the resolved name is part of
  the stored sacreBLEU signature (`tok:zh`, `tok:ja-mecab-...`). `docmt stats` counts each side's
  tokens with the tokenizer of its language (`data/stats.py`).
- sentencepiece's `character_coverage` of `vocab.character_coverage: null`: 0.9995 for a side in a
  language with a large character set (Chinese, Japanese, Korean), as the sentencepiece authors
  recommend, 1.0 otherwise; a joint vocabulary takes the smaller of its two sides.

Raw CJK text needs no word segmentation before sentencepiece, which learns its pieces from the
characters; the `zh` and `ja-mecab` tokenizers only affect how BLEU counts n-grams.
"""

from __future__ import annotations

from typing import Optional

from lightning_docmt.config.schema import DataConfig, EvalConfig, VocabConfig
from lightning_docmt.data.corpora import bible

LARGE_CHARACTER_SETS = frozenset({"zh", "ja", "ko"})
CJK_COVERAGE = 0.9995
AUTO = "auto"
BLEU_TOKENIZER_OF_LANGUAGE = {"zh": "zh", "ja": "ja-mecab"}
DEFAULT_BLEU_TOKENIZER = "13a"


def spec_languages(spec: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """(source, target) language that a corpus spec names (`bible:SRC-TGT[?...]`, parsed by the
    Bible reader itself), or (None, None)."""
    scheme, _, args = (spec or "").partition(":")
    return bible.language_pair(args) if scheme == "bible" else (None, None)


def data_languages(data: DataConfig) -> tuple[Optional[str], Optional[str]]:
    """(source, target) language of the run: `data.src_lang` / `data.tgt_lang`, else those of the
    spec the test split comes from (`data.test`, else `data.corpus`), else None."""
    from_spec = spec_languages(data.test or data.corpus)
    return (data.src_lang or from_spec[0], data.tgt_lang or from_spec[1])


def language_bleu_tokenizer(language: Optional[str]) -> str:
    """The sacreBLEU tokenizer that BLEU counts text in `language` with (None: unknown), as a target."""
    return BLEU_TOKENIZER_OF_LANGUAGE.get(language, DEFAULT_BLEU_TOKENIZER)


def bleu_tokenizer(evaluation: EvalConfig, data: DataConfig) -> str:
    """The sacreBLEU tokenizer of `eval.tokenize`, `auto` resolved by the target language."""
    if evaluation.tokenize != AUTO:
        return evaluation.tokenize
    return language_bleu_tokenizer(data_languages(data)[1])


def character_coverages(vocab: VocabConfig, data: DataConfig) -> tuple[float, float]:
    """sentencepiece `character_coverage` of the (source, target) vocabulary: `vocab.character_coverage`
    when set, else by language; a joint vocabulary uses the smaller one on both sides."""
    if vocab.character_coverage is not None:
        return vocab.character_coverage, vocab.character_coverage
    src, tgt = (CJK_COVERAGE if lang in LARGE_CHARACTER_SETS else 1.0 for lang in data_languages(data))
    return (min(src, tgt),) * 2 if vocab.joint else (src, tgt)
