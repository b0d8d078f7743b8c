"""Whose context a sentence reads: its own, none, or that of a sentence of another document.

The context windows of sentence i (`data/windows.py`) are the neighbours of an *anchor* sentence
inside the anchor's document bounds. Training and testing use the sentence itself and its own
document (`own_context`). Two diagnostics of context usage (docs/design.md section 8) swap that:

- `no_context`: every sentence is the only sentence of its document, so every context side is
  empty, in the layout of a document's first sentence (`<eos>` alone; `[bos] eos` for `ctx_ext`).
  CXMI compares a model's log-probabilities with its real context and with this one (Fernandes et
  al. 2021).
- `random_context`: each sentence reads the context of a sentence drawn, seeded, from a document
  of *another collection* that has exactly as many previous and next neighbours (up to the window
  sizes), so the context has the same number of sentences and only its relevance changes. A model
  that uses its context should score and translate worse with it; one that only benefits from, say,
  more parameters or more training does not.

A collection (`document_groups`) is what documents that share names and story belong to: the
Bible's chapters (`<Book>.<chapter>`) belong to their book; any other document is a collection of
its own. Another chapter of the same book shares names and story with the real context, so drawing
from it would bias the control toward showing no content use (trap K10 in docs/design.md section 12).

The source sentence, its target and its position in the document (`pos_in_doc`, `doc_index`) stay
those of sentence i; only the context tensors change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from lightning_docmt.data.windows import neighbours

CHAPTER_ID = re.compile(r"^(?P<book>.+)\.(?P<chapter>\d+)$")  # `<Book>.<chapter>` (data/corpora/bible.py)
RANDOM_CONTEXT_SEED = 1  # the one draw of the random-context control (test split, suites), the
# same for every model of a table


@dataclass(frozen=True)
class ContextAnchors:
    """Per sentence of a split, (n_sentences,) int64 each: the anchor sentence whose neighbours
    form the context, and the first and one-past-last sentence of the anchor's document."""

    anchor: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def rows(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(anchor, start, end) of the given sentences."""
        return self.anchor[index], self.start[index], self.end[index]


def own_context(doc_offsets: np.ndarray) -> ContextAnchors:
    """Every sentence reads its own neighbours (training and testing)."""
    sentence = np.arange(int(doc_offsets[-1]), dtype=np.int64)
    doc = np.searchsorted(doc_offsets, sentence, side="right") - 1
    return ContextAnchors(sentence, doc_offsets[doc].astype(np.int64),
                          doc_offsets[doc + 1].astype(np.int64))


def no_context(n_sentences: int) -> ContextAnchors:
    """Every sentence alone in a document of its own: every context side empty."""
    sentence = np.arange(n_sentences, dtype=np.int64)
    return ContextAnchors(sentence, sentence, sentence + 1)


def document_groups(doc_ids: Sequence[str]) -> np.ndarray:
    """(n_documents,) int64: the collection of each document, numbered in order of first
    appearance. Ids of the form `<Book>.<chapter>` (the Bible's chapters) group by book when every
    id has that form; otherwise every document is its own collection."""
    matches = [CHAPTER_ID.match(d) for d in doc_ids]
    names = [m["book"] for m in matches] if matches and all(matches) else list(doc_ids)
    numbers: dict[str, int] = {}
    return np.array([numbers.setdefault(name, len(numbers)) for name in names], dtype=np.int64)


def random_context(doc_offsets: np.ndarray, prev_size: int, next_size: int, seed: int,
                   groups: np.ndarray | None = None) -> ContextAnchors:
    """Each sentence anchored at a sentence of a document of another collection (`groups`, one per
    document, `document_groups`; None: every document its own) with the same numbers of previous
    (up to `prev_size`) and next (up to `next_size`) neighbours, drawn uniformly with `seed`. A
    sentence without any context (no neighbour within the sizes, e.g. a one-sentence document)
    keeps its own anchor: its context is empty, whatever is drawn.

    Raises ValueError when some sentence with context has no such sentence in another collection
    (e.g. a corpus of one document, or of one book).
    """
    own = own_context(doc_offsets)
    sentence = own.anchor
    doc = np.searchsorted(doc_offsets, sentence, side="right") - 1
    collection = (np.arange(len(doc_offsets) - 1) if groups is None else np.asarray(groups))[doc]  # (n,)
    shape = np.stack([neighbours(sentence, own.start, own.end, -1, prev_size),
                      neighbours(sentence, own.start, own.end, +1, next_size)], axis=1)  # (n, 2)
    rng = np.random.default_rng(seed)
    anchor = sentence.copy()
    shapes = np.unique(shape, axis=0, return_inverse=True)[1].reshape(-1)  # (n,) shape per sentence
    for kind in range(int(shapes.max()) + 1 if len(shapes) else 0):
        # sentences with this neighbour shape, ordered by collection: each one's members contiguous
        members = np.flatnonzero(shapes == kind)  # (m,)
        if not shape[members[0]].any():
            continue  # no context to replace
        members = members[np.argsort(collection[members], kind="stable")]
        member_collection = collection[members]
        first = np.searchsorted(member_collection, member_collection, side="left")  # (m,) own block
        size = np.searchsorted(member_collection, member_collection, side="right") - first  # (m,)
        others = len(members) - size  # (m,) members of other collections
        if not others.all():
            i = members[np.argmin(others)]
            raise ValueError(f"sentence {i} has {shape[i, 0]} previous and {shape[i, 1]} next "
                             f"neighbours, and no sentence of another collection has the same")
        draw = rng.integers(0, others)  # (m,) uniform among the other collections' members ...
        draw = np.where(draw >= first, draw + size, draw)  # ... skipping the own block
        anchor[members] = members[draw]
    return ContextAnchors(anchor, own.start[anchor], own.end[anchor])
