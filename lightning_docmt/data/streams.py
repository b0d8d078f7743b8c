"""The layout of a named external stream's row: the sentences around sentence i in a pretrained
encoder's ids, with token types (Donato, Yu & Dyer 2021, docs/papers/donato2021.md readings D5,
D22).

A stream reads `prev` previous sentences, the current one (`current`) and `next` next ones of one
side of the document, and lays them out for its encoder:
- `pair` (BERT, two segments): `[CLS] A [SEP] B [SEP]`, token types 0 over `[CLS] A [SEP]` and 1
  over `B [SEP]`. The sentences form at most two groups in document order, previous | current |
  next, and the first group present is A, the second B: B_s(p,c) is `[CLS] p [SEP] c [SEP]`,
  B_s(c,n) is `[CLS] c [SEP] n [SEP]`, B_s(c) is `[CLS] c [SEP]`. The sentences of one group are
  concatenated (reading D22). A group with no sentence at a document's edge keeps its `[SEP]`, so
  the current sentence keeps its segment: B_s(p,c) of a document's first sentence is
  `[CLS] [SEP] c [SEP]`.
- `concat` (PEGASUS, one sequence): every sentence in document order, each closed by the
  tokenizer's `sep_id` when it has one (else concatenated), then `eos_id`; token types 0. A
  tokenizer whose separator is its end (BERT's `[SEP]`) closes the last sentence with that one
  `[SEP]`, not two.
Beyond `max_tokens` ids, the farthest neighbours lose their tokens first (the oldest previous
tokens, the last next tokens; at equal distance the previous side first), then the current
sentence its last tokens; the specials stay.

The layout takes the sentences as token-id lists, so a control can hand it other neighbours (the
no-context and random-context passes move only the neighbours; the current sentence stays).

`StreamSpec` is one configured stream (`context.streams.<name>`): its layout, the corpus side it
reads and the token array of that side in its tokenizer's ids (a split's `retokenised` array,
`data/cache.py`), and how it cuts the rows of a batch around an anchor sentence
(`data/context_anchors.py`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

from lightning_docmt.data.first_pass import RetokenisedSide, check_hypotheses, first_pass_file
from lightning_docmt.errors import DocMTInputError

if TYPE_CHECKING:
    from lightning_docmt.config.schema import StreamConfig
    from lightning_docmt.data.tokenizers import ExternalTokenizer

STREAM_FORMATS = ("pair", "concat")
STREAM_SIDES = {"source": "src", "target": "tgt"}  # `side` setting -> the corpus side it reads


@dataclass(frozen=True)
class StreamLayout:
    """How one stream lays out its row (see the module docstring); the ids are its tokenizer's."""

    prev: int
    current: bool
    next: int
    format: str
    max_tokens: int
    eos_id: int
    sep_id: Optional[int] = None  # pair: between the segments ([SEP]); concat: after each sentence
    bos_id: Optional[int] = None  # opens the row ([CLS]); None: nothing
    key: str = "context.streams"  # the setting an error names

    def __post_init__(self) -> None:
        if self.format not in STREAM_FORMATS:
            raise DocMTInputError(f"format must be one of {', '.join(STREAM_FORMATS)}, got {self.format!r}",
                                  key=self.key)
        if self.prev < 0 or self.next < 0 or not (self.prev or self.current or self.next):
            raise DocMTInputError(f"reads no sentence (prev={self.prev}, current={self.current}, "
                                  f"next={self.next})", key=self.key)
        if self.format == "pair" and self.groups > 2:
            raise DocMTInputError("a pair has two segments: previous, current and next sentences make three "
                                  "(the paper runs BERT twice, B_s(p,c) and B_s(c,n))", key=self.key)
        if self.format == "pair" and self.sep_id is None:
            raise DocMTInputError("a pair needs a tokenizer with a separator between its segments", key=self.key)
        if self.max_tokens < self.specials():
            raise DocMTInputError(f"max_tokens must be at least {self.specials()} (the row's specials)",
                                  key=self.key)

    @property
    def groups(self) -> int:
        """How many of previous | current | next the stream reads."""
        return [self.prev > 0, self.current, self.next > 0].count(True)

    def specials(self, sentences: int | np.ndarray = 0) -> int | np.ndarray:
        """The special ids of a row (`sentences`: how many a concat row holds; an array gives one
        count per row)."""
        opening = 0 if self.bos_id is None else 1
        if self.format == "pair":
            return opening + self.groups  # one [SEP] closing each segment
        if self.sep_id is None:
            return opening + 1
        return opening + 1 + (np.maximum(sentences - 1, 0) if self.sep_id == self.eos_id else sentences)

    def row(self, current: Sequence[int], previous: Sequence[Sequence[int]] = (),
            following: Sequence[Sequence[int]] = ()) -> tuple[list[int], list[int]]:
        """(ids, token types) of one row from the current sentence's ids, its previous sentences
        (oldest first, at most `prev` of them) and its next ones (nearest first, at most `next`)."""
        previous = [list(s) for s in previous][-self.prev:] if self.prev else []
        following = [list(s) for s in following][:self.next] if self.next else []
        mine = list(current) if self.current else None
        previous, mine, following = self._truncate(previous, mine, following)
        if self.format == "concat":
            sentences = [*previous, *([mine] if mine is not None else []), *following]
            ids = [] if self.bos_id is None else [self.bos_id]
            for sentence in sentences:
                ids += sentence + ([self.sep_id] if self.sep_id is not None else [])
            if sentences and self.sep_id == self.eos_id:
                ids.pop()  # the last separator is the end
            ids.append(self.eos_id)
            return ids, [0] * len(ids)
        groups = [g for g, present in ((_joined(previous), self.prev > 0), (mine, self.current),
                                       (_joined(following), self.next > 0)) if present]
        first = ([] if self.bos_id is None else [self.bos_id]) + groups[0] + [self.sep_id]
        second = groups[1] + [self.sep_id] if len(groups) > 1 else []
        return first + second, [0] * len(first) + [1] * len(second)

    def _truncate(self, previous: list[list[int]], mine: Optional[list[int]], following: list[list[int]]
                  ) -> tuple[list[list[int]], Optional[list[int]], list[list[int]]]:
        """The sentences cut to fit `max_tokens`: farthest neighbour tokens first, then the current
        sentence's last tokens."""
        count = len(previous) + (mine is not None) + len(following)
        room = self.max_tokens - self.specials(count)
        size = sum(map(len, previous)) + len(mine or []) + sum(map(len, following))
        excess = max(0, size - room)
        # (distance from the current sentence, group, index, side it loses tokens from); the sort is
        # stable, so at equal distance the previous side comes first
        order = [(len(previous) - k, previous, k, "left") for k in range(len(previous))]
        order += [(k + 1, following, k, "right") for k in range(len(following))]
        for _, group, k, side in sorted(order, key=lambda item: -item[0]):
            if excess <= 0:
                break
            cut = min(excess, len(group[k]))
            group[k] = group[k][cut:] if side == "left" else group[k][:len(group[k]) - cut]
            excess -= cut
        if excess > 0 and mine is not None:
            mine = mine[:len(mine) - excess]
        return previous, mine, following


def _joined(sentences: list[list[int]]) -> list[int]:
    return [i for sentence in sentences for i in sentence]


def stream_keys(name: str) -> tuple[str, str, str]:
    """The batch keys of stream `name`: its ids, token types and padding mask."""
    return f"stream_{name}", f"stream_{name}_types", f"stream_{name}_pad"


def retokenised_name(side: str, tokenizer: ExternalTokenizer, hypotheses: Optional[str] = None) -> str:
    """The name of a split's token array holding corpus side `side` (src/tgt) in `tokenizer`'s ids
    (at valid and test, the first-pass translations in `hypotheses` where it has them,
    `data/first_pass.py`): streams that read one side with one tokenizer share it."""
    name = f"{side}.{tokenizer.fingerprint[:16]}"
    if hypotheses is None:
        return name
    return f"{name}.{hashlib.sha256(str(Path(hypotheses).resolve()).encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class StreamSpec:
    """One named stream of a batch (`context.streams.<name>`): batch keys `stream_<name>` (ids,
    padded with `pad_id`), `stream_<name>_types` (token types, padded with 0) and
    `stream_<name>_pad` (True on padding)."""

    name: str
    side: str  # the corpus side read: src | tgt
    array: str  # the split's retokenised array of that side (`retokenised_name`)
    layout: StreamLayout
    pad_id: int
    hypotheses: Optional[str] = None  # a target stream's first-pass run directory (`data/first_pass.py`)

    @classmethod
    def from_config(cls, name: str, cfg: StreamConfig, tokenizer: ExternalTokenizer) -> StreamSpec:
        key = f"context.streams.{name}"
        if not name.isidentifier():
            raise DocMTInputError("a stream's name must be an identifier (it names batch keys)", key=key)
        if cfg.side not in STREAM_SIDES:
            raise DocMTInputError(f"must be one of {', '.join(STREAM_SIDES)}, got {cfg.side!r}",
                                  key=f"{key}.side")
        layout = StreamLayout(prev=cfg.prev, current=cfg.current, next=cfg.next, format=cfg.format,
                              max_tokens=cfg.max_tokens, eos_id=tokenizer.eos_id, sep_id=tokenizer.sep_id,
                              bos_id=tokenizer.bos_id, key=key)
        side = STREAM_SIDES[cfg.side]
        hypotheses = getattr(cfg, "hypotheses", None)
        check_hypotheses(hypotheses, side, f"{key}.hypotheses")
        return cls(name, side, retokenised_name(side, tokenizer, hypotheses), layout, tokenizer.pad_id, hypotheses)

    def reads_references(self, split: str) -> bool:
        """Whether the stream reads the references of `split` (valid or test), i.e. is an oracle there."""
        return self.side == "tgt" and first_pass_file(self.hypotheses, split) is None

    def retokenised(self, tokenizer: ExternalTokenizer) -> RetokenisedSide:
        """What its array holds (`tokenizer`: the stream's)."""
        return RetokenisedSide(self.side, tokenizer, self.hypotheses, f"context.streams.{self.name}.hypotheses")

    @property
    def keys(self) -> tuple[str, str, str]:
        """The batch keys: ids, token types, padding mask (`stream_keys`)."""
        return stream_keys(self.name)

    def row(self, ids: np.ndarray, offsets: np.ndarray, i: int, anchor: int, start: int, end: int
            ) -> tuple[list[int], list[int]]:
        """(ids, token types) of sentence i's row: its own sentence, and the neighbours of `anchor`
        inside the document [start, end) (`anchor` = i and its own document, except under a control)."""
        def sentence(j: int) -> np.ndarray:
            return ids[offsets[j]:offsets[j + 1]].tolist()

        before = range(max(start, anchor - self.layout.prev), anchor)
        after = range(anchor + 1, min(end, anchor + 1 + self.layout.next))
        return self.layout.row(sentence(i), [sentence(j) for j in before], [sentence(j) for j in after])

    def lengths(self, offsets: np.ndarray, index: np.ndarray, anchor: np.ndarray, start: np.ndarray,
                end: np.ndarray) -> np.ndarray:
        """The length of `row` for each given sentence at once, (len(index),) int64."""
        layout = self.layout
        before = np.minimum(layout.prev, anchor - start)  # (n,) previous neighbours present
        after = np.minimum(layout.next, end - 1 - anchor)  # (n,) next neighbours present
        text = (offsets[anchor] - offsets[anchor - before]) + (offsets[anchor + 1 + after] - offsets[anchor + 1])
        if layout.current:
            text = text + offsets[index + 1] - offsets[index]
        sentences = before + after + int(layout.current)  # (n,)
        specials = layout.specials(sentences)  # (n,) or one count for every row
        return (specials + np.minimum(text, layout.max_tokens - specials)).astype(np.int64)


def retokenised_arrays(streams: Sequence[StreamSpec], tokenizers: dict[str, ExternalTokenizer]
                       ) -> dict[str, RetokenisedSide]:
    """The arrays the splits must hold for `streams` (`prepare.build_caches`): array name -> what it
    holds, one per distinct side, tokenizer and first-pass directory; `tokenizers` by stream name."""
    return {stream.array: stream.retokenised(tokenizers[stream.name]) for stream in streams}
