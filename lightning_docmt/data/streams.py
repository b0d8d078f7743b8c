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
  tokenizer's `sep_id` when it has one (else concatenated), then `eos_id`; token types 0.
Beyond `max_tokens` ids, the farthest neighbours lose their tokens first (the oldest previous
tokens, the last next tokens; at equal distance the previous side first), then the current
sentence its last tokens; the specials stay.

The layout takes the sentences as token-id lists, so a control can hand it other neighbours (the
no-context and random-context passes move only the neighbours; the current sentence stays).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from lightning_docmt.errors import DocMTInputError

STREAM_FORMATS = ("pair", "concat")


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

    def specials(self, sentences: int = 0) -> int:
        """The special ids of a row (`sentences`: how many a concat row holds)."""
        opening = 0 if self.bos_id is None else 1
        if self.format == "pair":
            return opening + self.groups  # one [SEP] closing each segment
        return opening + 1 + (sentences if self.sep_id is not None else 0)

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
