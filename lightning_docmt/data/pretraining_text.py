"""Monolingual Bible text for the context encoders pretrained in the project, and their examples
(Donato, Yu & Dyer 2021, docs/papers/donato2021.md section 3, readings D20-D21).

No offline package ships Chinese, multilingual or PEGASUS weights, so the BERT and PEGASUS encoders
of the paper's configurations are pretrained here, on the Bible. The text is the *training books*
of one or more versions of a language: chapters as documents, cleaned verses as sentences, in
canonical order (`training_chapters`). Valid and test books are left out of every version, not
only of the versions a pair translates: another English version of Acts paraphrases the test
references, and an encoder pretrained on it would have read them.

Examples:
- `gap_sentence_examples`: PEGASUS's gap-sentence generation with one masked sentence per example
  and no masked-word objective (Donato et al.'s own PEGASUS models). A chapter is cut into windows
  of `window` consecutive verses (7: the three previous, the current and the three next sentences
  of P_s(3p,c,3n)); in each, one verse is replaced by `MASK_SENTENCE` in the source and is the
  target.
- `verse_pairs`: consecutive verses of a chapter as the two segments of BERT's input, for a masked
  language model with token types (BERT's `[CLS] a [SEP] b [SEP]`, as the stack reads (p,c), D5),
  corrupted by `mlm_masking` (BERT's 15%, 80/10/10).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import numpy as np

from lightning_docmt.config.pretraining import PretrainConfig
from lightning_docmt.data.corpora import read_corpus
from lightning_docmt.data.corpora.bible import BOOKS, SPLIT_OF_BOOK, cleaned_verses, load_versions
from lightning_docmt.data.corpora.bible_versions import LANGUAGES, versions_of
from lightning_docmt.errors import DocMTInputError

MASK_SENTENCE = "<mask_1>"  # PEGASUS's gap-sentence mask token
GAP_WINDOW = 7  # verses per gap-sentence example: 3 previous + current + 3 next (P_s(3p,c,3n))
MIN_WINDOW = 2  # a window needs a verse besides the masked one


@dataclass(frozen=True)
class Chapter:
    """One chapter of one version: `doc_id` `<Book>.<chapter>`, its cleaned non-empty verses."""

    version: str
    doc_id: str
    verses: tuple[str, ...]


@dataclass(frozen=True)
class GapSentenceExample:
    """`source`: the window's verses with the masked one replaced by `MASK_SENTENCE`; `target`: it."""

    doc_id: str
    source: tuple[str, ...]
    target: str
    masked: int  # the masked verse's index in the window


def training_chapters(lang: str, versions: list[str] | None = None) -> list[Chapter]:
    """The training books' chapters of `versions` of `lang` (default: every version of it)."""
    if lang not in LANGUAGES:
        raise DocMTInputError(f"unknown language {lang!r}; languages: {', '.join(LANGUAGES)}",
                              key="pretraining.lang")
    known = {v.name: v for v in versions_of(lang)}
    names = list(known) if versions is None else versions
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise DocMTInputError(f"versions of {lang}: {', '.join(known)}; got {names}", key="pretraining.versions")
    rows_per_version, _ = load_versions(*(known[name].code for name in names))
    chapters = []
    for name, rows in zip(names, rows_per_version):
        texts = cleaned_verses(known[name].code, rows, strip_titles=False, skipped={})
        current: dict[tuple[int, int], list[str]] = {}
        for (book, chapter, _, _), text in zip(rows, texts):
            if SPLIT_OF_BOOK.get(book, "train") == "train" and text:
                current.setdefault((book, chapter), []).append(text)
        chapters += [Chapter(name, f"{BOOKS[book - 1]}.{chapter}", tuple(verses))
                     for (book, chapter), verses in current.items()]
    return chapters


def corpus_chapters(spec: str, side: str) -> list[Chapter]:
    """The training documents of corpus `spec` (labelled `train`, or unlabelled), their `side`
    (source | target) as chapters: the text of an encoder pretrained for a synthetic corpus."""
    documents = [d for d in read_corpus(spec).documents if d.split in ("train", None)]
    return [Chapter(spec, d.doc_id, tuple(s for s in (d.src if side == "source" else d.tgt) if s))
            for d in documents]


def pretraining_chapters(cfg: PretrainConfig) -> list[Chapter]:
    """The text `cfg` pretrains on: its corpus' training documents, or the Bible's training books."""
    if cfg.corpus is not None:
        return corpus_chapters(cfg.corpus, cfg.side)
    return training_chapters(cfg.lang, cfg.versions)


def gap_sentence_examples(chapters: list[Chapter], seed: int, window: int = GAP_WINDOW,
                          mask: object = MASK_SENTENCE) -> Iterator[GapSentenceExample]:
    """One example per window of `window` consecutive verses of a chapter (reading D21: windows do
    not overlap or cross chapters; a last window shorter than MIN_WINDOW verses is left out), the
    masked verse drawn uniformly in the window (reading D20), from `seed`: another seed (epoch)
    masks other verses of the same windows. The verses may be texts or token-id tuples (chapters
    already tokenised, `pretraining/examples.py`); `mask` replaces the masked one."""
    rng = random.Random(seed)
    for chapter in chapters:
        for start in range(0, len(chapter.verses), window):
            verses = chapter.verses[start:start + window]
            if len(verses) < MIN_WINDOW:
                continue
            masked = rng.randrange(len(verses))
            source = verses[:masked] + (mask,) + verses[masked + 1:]
            yield GapSentenceExample(chapter.doc_id, source, verses[masked], masked)


def verse_pairs(chapters: list[Chapter]) -> Iterator[tuple[str, str]]:
    """Every two consecutive verses of a chapter, (a, b)."""
    for chapter in chapters:
        yield from zip(chapter.verses, chapter.verses[1:])


MLM_SHARE = 0.15  # BERT's share of positions predicted
MLM_SPLIT = (0.8, 0.1)  # of those: replaced by the mask id, by a random id; the rest kept


def mlm_masking(ids: Sequence[int], rng: np.random.Generator, *, mask_id: int, vocab_size: int,
                special_ids: Iterable[int]) -> tuple[list[int], list[int]]:
    """BERT's masked-language-model corruption of one row (Devlin et al. 2019, Sec. 3.1): 15% of
    the non-special positions (at least one) are predicted; of those 80% become `mask_id`, 10% a
    random id that is not special, 10% stay. Returns (input ids, labels), labels -1 where nothing
    is predicted."""
    ids = list(ids)
    special = set(special_ids)
    candidates = [p for p, i in enumerate(ids) if i not in special]
    labels = [-1] * len(ids)
    if not candidates:
        return ids, labels
    count = max(1, round(MLM_SHARE * len(candidates)))
    for position in rng.choice(candidates, size=count, replace=False):
        labels[position] = ids[position]
        draw = rng.random()
        if draw < MLM_SPLIT[0]:
            ids[position] = mask_id
        elif draw < MLM_SPLIT[0] + MLM_SPLIT[1]:
            ids[position] = _ordinary_id(rng, vocab_size, special)
    return ids, labels


def _ordinary_id(rng: np.random.Generator, vocab_size: int, special: set[int]) -> int:
    """A uniform id below `vocab_size` that is not special (redrawn while it is: the specials are few)."""
    while (drawn := int(rng.integers(vocab_size))) in special:
        pass
    return drawn
