"""Corpus statistics (the JSON printed by `docmt stats CORPUS_SPEC`).

Tokens are whitespace tokens (before any subword segmentation), so the numbers describe the corpus
itself and do not depend on a vocabulary.
"""

from __future__ import annotations

from lightning_docmt.data.types import Corpus, Document


def _counts(documents: list[Document]) -> dict[str, int | float]:
    sentences = sum(len(d) for d in documents)
    return {
        "documents": len(documents),
        "sentences": sentences,
        "src_tokens": sum(len(s.split()) for d in documents for s in d.src),
        "tgt_tokens": sum(len(s.split()) for d in documents for s in d.tgt),
        "mean_sentences_per_document": sentences / len(documents) if documents else 0.0,
        "max_document_sentences": max((len(d) for d in documents), default=0),
    }


def corpus_stats(corpus: Corpus) -> dict:
    """Documents, sentences, whitespace tokens per side, mean and max document length (sentences),
    what the reader skipped (reason -> count), and the same numbers per split when the corpus has
    its own splits (`splits` is empty otherwise)."""
    return {
        "spec": corpus.spec,
        **_counts(corpus.documents),
        "skipped": dict(corpus.skipped),
        "splits": {name: _counts(corpus.split(name)) for name in corpus.splits},
    }
