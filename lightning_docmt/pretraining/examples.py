"""The rows an in-project encoder is pretrained on, in its WordPiece tokenizer's own ids
(docs/papers/donato2021.md, readings D20, D21, D23).

The chapters are tokenised once (`tokenised`); each epoch draws its own corruption from
(seed, epoch), so a resumed run sees what the uninterrupted one saw:
- `masked_lm_rows`: BERT's input over two consecutive verses, `[CLS] a [SEP] b [SEP]` with token
  types 0 over `[CLS] a [SEP]` and 1 over `b [SEP]` (the layout the stack reads as B_s(p,c)), then
  BERT's masking (`mlm_masking`); beyond `max_tokens` the longer verse loses its last tokens first.
- `gap_sentence_rows`: a window of verses with one verse replaced by the single `[MASK]` id,
  `[CLS] v_1 [SEP] ... v_k [SEP]` (the layout the stack reads as P_s(3p,c,3n), `data/streams.py`),
  and the masked verse as the target, `[CLS] verse` in, `verse [SEP]` out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from lightning_docmt.data.pretraining_text import Chapter, gap_sentence_examples, mlm_masking, verse_pairs


@dataclass(frozen=True)
class Specials:
    """The tokenizer's special ids (`bert_files.SPECIAL_TOKENS` order)."""

    pad: int = 0
    unk: int = 1
    cls: int = 2
    sep: int = 3
    mask: int = 4

    @property
    def all(self) -> tuple[int, ...]:
        return self.pad, self.unk, self.cls, self.sep, self.mask


@dataclass(frozen=True)
class MaskedRow:
    tokens: list[int]
    types: list[int]
    labels: list[int]  # -1 where nothing is predicted


@dataclass(frozen=True)
class GapRow:
    source: list[int]
    target: list[int]  # the masked verse's ids, without specials


def tokenised(chapters: list[Chapter], tokenizer) -> list[Chapter]:
    """The chapters with every verse as a tuple of the tokenizer's ids (no specials)."""
    verses = [v for c in chapters for v in c.verses]
    encoded = iter(tokenizer.encode_batch(verses, add_special_tokens=False))
    return [replace(c, verses=tuple(tuple(next(encoded).ids) for _ in c.verses)) for c in chapters]


def held_out_split(chapters: list[Chapter], share: float, seed: int) -> tuple[list[Chapter], list[Chapter]]:
    """(pretraining chapters, held-out chapters): a seeded draw of `share` of the chapters (at least
    one each side), to measure the encoder on text it never read."""
    draw = np.random.default_rng(seed).random(len(chapters)) < share
    if draw.all() or not draw.any():
        draw = np.zeros(len(chapters), dtype=bool)
        draw[len(chapters) // 2] = True
    return ([c for c, out in zip(chapters, draw) if not out], [c for c, out in zip(chapters, draw) if out])


def _fit_pair(a: list[int], b: list[int], room: int) -> tuple[list[int], list[int]]:
    while len(a) + len(b) > room:
        if len(a) >= len(b):
            a = a[:-1]
        else:
            b = b[:-1]
    return a, b


def masked_lm_rows(chapters: list[Chapter], specials: Specials, vocab_size: int, max_tokens: int,
                   seed: int) -> list[MaskedRow]:
    """Every pair of consecutive verses as a masked row; the masking drawn from `seed`."""
    rng = np.random.default_rng(seed)
    rows = []
    for a, b in verse_pairs(chapters):
        a, b = _fit_pair(list(a), list(b), max_tokens - 3)
        tokens = [specials.cls, *a, specials.sep, *b, specials.sep]
        types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        inputs, labels = mlm_masking(tokens, rng, mask_id=specials.mask, vocab_size=vocab_size,
                                     special_ids=specials.all)
        rows.append(MaskedRow(inputs, types, labels))
    return rows


def gap_sentence_rows(chapters: list[Chapter], specials: Specials, max_tokens: int, seed: int) -> list[GapRow]:
    """One row per window of verses (`gap_sentence_examples`), the masked verse drawn from `seed`."""
    rows = []
    for example in gap_sentence_examples(chapters, seed, mask=(specials.mask,)):
        verses = [list(v) for v in example.source]
        while sum(map(len, verses)) + len(verses) + 1 > max_tokens:  # [CLS] + a [SEP] after each verse
            longest = max(range(len(verses)), key=lambda k: len(verses[k]))
            verses[longest] = verses[longest][:-1]
        source = [specials.cls] + [i for v in verses for i in (*v, specials.sep)]
        rows.append(GapRow(source, list(example.target)[:max_tokens - 1]))
    return rows
