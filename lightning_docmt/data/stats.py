"""Corpus statistics (the JSON printed by `docmt stats CORPUS_SPEC`).

Tokens are counted as BLEU counts them: each side with sacreBLEU's tokenizer of its language
(`languages.language_bleu_tokenizer`: `zh` for Chinese, `ja-mecab` for Japanese, `13a` otherwise or
when the spec names no language), before any subword segmentation, so the numbers describe the
corpus itself, do not depend on a vocabulary, and a Chinese or Japanese side is not counted in
whitespace-separated runs of characters. `src_tokenizer` and `tgt_tokenizer` name the tokenizers.
"""

from __future__ import annotations

from typing import Callable, Sequence

from sacrebleu import BLEU

from lightning_docmt.data.languages import language_bleu_tokenizer, spec_languages
from lightning_docmt.data.types import Corpus, Document

Tokenizer = Callable[[str], str]  # a sacreBLEU tokenizer: text -> its tokens joined by spaces


def side_tokenizers(spec: str) -> tuple[str, str]:
    """The sacreBLEU tokenizer names of the (source, target) language that `spec` names."""
    src, tgt = spec_languages(spec)
    return language_bleu_tokenizer(src), language_bleu_tokenizer(tgt)


def token_count(sentences: Sequence[str], tokenizer: Tokenizer) -> int:
    return sum(len(tokenizer(sentence).split()) for sentence in sentences)


def _counts(documents: list[Document], tokenizers: tuple[Tokenizer, Tokenizer]) -> dict[str, int | float]:
    sentences = sum(len(d) for d in documents)
    src, tgt = tokenizers
    return {
        "documents": len(documents),
        "sentences": sentences,
        "src_tokens": token_count([s for d in documents for s in d.src], src),
        "tgt_tokens": token_count([s for d in documents for s in d.tgt], tgt),
        "mean_sentences_per_document": sentences / len(documents) if documents else 0.0,
        "max_document_sentences": max((len(d) for d in documents), default=0),
    }


def corpus_stats(corpus: Corpus) -> dict:
    """Documents, sentences, tokens per side and the tokenizer that counted them, mean and max
    document length (sentences), what the reader skipped (reason -> count), and the same numbers per
    split when the corpus has its own splits (`splits` is empty otherwise)."""
    names = side_tokenizers(corpus.spec)
    tokenizers = tuple(BLEU(tokenize=name).tokenizer for name in names)
    return {
        "spec": corpus.spec,
        **_counts(corpus.documents, tokenizers),
        "src_tokenizer": names[0],
        "tgt_tokenizer": names[1],
        "skipped": dict(corpus.skipped),
        "splits": {name: _counts(corpus.split(name), tokenizers) for name in corpus.splits},
    }
