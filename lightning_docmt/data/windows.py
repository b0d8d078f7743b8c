"""Document windows around sentence i (docs/design.md section 5; layout in `batch.py`).

Pure functions over the flat token arrays of `cache.TokenArray` (`ids`, `offsets`): the sentences
of a document are contiguous, so the k previous sentences of sentence i are one slice
`ids[offsets[i-k]:offsets[i]]` and nothing per sentence is kept in Python.

Layout of one context side (k' = the number of neighbours that exist inside the document):
previous sentences oldest first / next sentences nearest first, joined by `<sep>` when
`separator` is on, then `<eos>`. Segment ids are the distance d of a token's sentence from
sentence i (a `<sep>` takes the id of the sentence it closes); the final `<eos>` gets 1, or 0 for
an empty context, which is the single token `<eos>` (Zhang et al. 2018 reference pipeline,
reading Z4 in docs/papers/zhang2018.md). A side longer than `max_tokens` (`<eos>` included) loses its oldest
tokens first: the left of a previous-context, the right of a next-context.

The external stream `ctx_ext` (`context.external`, docs/design.md section 5) has the window of
`ctx_src` (the k previous source sentences, oldest first, inside the document, truncated from the
oldest side) in the ids of a second tokenizer, laid out with that tokenizer's own specials
(`ExternalWindow`). The named streams (`context.streams`) have layouts of their own
(`data/streams.StreamSpec`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from lightning_docmt.batch import EOS_ID, SEP_ID
from lightning_docmt.config.schema import ContextConfig
from lightning_docmt.data.streams import StreamSpec
from lightning_docmt.data.tokenizers import ExternalTokenizer, external_tokenizer, stream_tokenizers
from lightning_docmt.errors import DocMTInputError

CONTEXT_SIDES = ("source", "target", "mix")


@dataclass(frozen=True)
class ExternalWindow:
    """Layout of a `ctx_ext` row: the `size` previous source sentences in a second tokenizer's ids.

    `[bos_id] s_{i-k} sep_id ... s_{i-1} eos_id`: no `bos_id` when it is None, the sentences
    concatenated when `sep_id` is None; an empty context is `[bos_id] eos_id`, so a row always has
    a key to attend to. At most `max_tokens` ids, the oldest dropped first (`context_window`).
    """

    size: int
    max_tokens: int
    pad_id: int
    eos_id: int
    sep_id: Optional[int] = None
    bos_id: Optional[int] = None

    @classmethod
    def from_config(cls, cfg: ContextConfig, tokenizer: ExternalTokenizer) -> ExternalWindow:
        """`context.external` read by `tokenizer`; `context.separator` decides whether the
        tokenizer's `sep_id` joins the sentences."""
        if cfg.prev_sentences < 1:
            raise DocMTInputError("needs context.prev_sentences >= 1 (the sentences it encodes)",
                                  key="context.external")
        window = cls(size=cfg.prev_sentences, max_tokens=cfg.external.max_tokens,
                     pad_id=tokenizer.pad_id, eos_id=tokenizer.eos_id,
                     sep_id=tokenizer.sep_id if cfg.separator else None, bos_id=tokenizer.bos_id)
        if window.max_tokens < window.prefix + 1:
            raise DocMTInputError(f"must be >= {window.prefix + 1} (the tokenizer's specials)",
                                  key="context.external.max_tokens")
        return window

    @property
    def prefix(self) -> int:
        """Ids before the sentences: 1 (`bos_id`) or 0."""
        return 0 if self.bos_id is None else 1

    def window(self, ids: np.ndarray, offsets: np.ndarray, i: int, doc_start: int, doc_end: int
               ) -> np.ndarray:
        """The row of sentence i, (L,) int64: `context_window` under the cap less the prefix."""
        tokens, _ = context_window(ids, offsets, i, doc_start, doc_end, -1, self.size,
                                   self.max_tokens - self.prefix, self.sep_id is not None,
                                   eos_id=self.eos_id, sep_id=self.sep_id)
        return tokens if self.bos_id is None else np.insert(tokens, 0, self.bos_id)

    def lengths(self, offsets: np.ndarray, anchor: np.ndarray, doc_start: np.ndarray,
                doc_end: np.ndarray) -> np.ndarray:
        """Length of `window` for each of the `anchor` sentences at once, (len(anchor),) int64."""
        return self.prefix + context_lengths(offsets, anchor, doc_start, doc_end, -1, self.size,
                                             self.max_tokens - self.prefix,
                                             self.sep_id is not None)


@dataclass(frozen=True)
class WindowSpec:
    """Which context sides a batch carries and how they are laid out.

    `context.side`: source -> `ctx_src` (k previous source sentences); target -> `ctx_tgt`
    (k previous reference target sentences); mix -> both. `ctx_next` (m next source sentences)
    is independent of the side. `external` (from `context.external`, whatever the side) adds
    `ctx_ext` and `ctx_ext_pad`; each of `streams` (`context.streams`) its three keys
    (`StreamSpec.keys`).
    """

    prev_src: int = 0
    next_src: int = 0
    prev_tgt: int = 0
    max_tokens: int = 256
    separator: bool = True
    external: Optional[ExternalWindow] = None
    streams: tuple[StreamSpec, ...] = ()

    @classmethod
    def from_config(cls, cfg: ContextConfig, tokenizer: Optional[ExternalTokenizer] = None,
                    streams: Optional[dict[str, ExternalTokenizer]] = None) -> WindowSpec:
        """`tokenizer` is the one of `context.external` and `streams` those of `context.streams`
        (by name, `tokenizers.stream_tokenizers`) when the caller has them loaded already; else
        they are loaded here (and ignored when the stream is off)."""
        if cfg.side not in CONTEXT_SIDES:
            raise DocMTInputError(f"must be one of {', '.join(CONTEXT_SIDES)}, got {cfg.side!r}",
                                  key="context.side")
        for key in ("prev_sentences", "next_sentences"):
            if getattr(cfg, key) < 0:
                raise DocMTInputError("must be >= 0", key=f"context.{key}")
        if cfg.max_tokens < 1:
            raise DocMTInputError("must be >= 1 (the final <eos>)", key="context.max_tokens")
        external = None
        if getattr(cfg, "external", None) is not None:
            tokenizer = tokenizer if tokenizer is not None else external_tokenizer(cfg)
            external = ExternalWindow.from_config(cfg, tokenizer)
        configured = getattr(cfg, "streams", None) or {}
        streams = streams if streams is not None else stream_tokenizers(cfg)
        k = cfg.prev_sentences
        return cls(prev_src=k if cfg.side in ("source", "mix") else 0, next_src=cfg.next_sentences,
                   prev_tgt=k if cfg.side in ("target", "mix") else 0, max_tokens=cfg.max_tokens,
                   separator=cfg.separator, external=external,
                   streams=tuple(StreamSpec.from_config(name, stream, streams[name])
                                 for name, stream in configured.items()))

    def sides(self) -> dict[str, tuple[str, int, int]]:
        """Batch key -> (token side, direction, size) of every context side present."""
        wanted = {"ctx_src": ("src", -1, self.prev_src), "ctx_next": ("src", +1, self.next_src),
                  "ctx_tgt": ("tgt", -1, self.prev_tgt)}
        return {key: v for key, v in wanted.items() if v[2] > 0}

    @property
    def reach(self) -> tuple[int, int]:
        """(previous, next): the most neighbours any context tensor reads on each side (the
        random-context control draws anchors with as many, `context_anchors.random_context`)."""
        previous = [self.prev_src, self.prev_tgt, self.external.size if self.external else 0]
        following = [self.next_src]
        for stream in self.streams:
            previous.append(stream.layout.prev)
            following.append(stream.layout.next)
        return max(previous), max(following)

    @property
    def reads_context(self) -> bool:
        """Whether a batch carries any context tensor (a stream of the current sentence alone
        carries no context: its rows are the same under every anchor)."""
        return bool(self.sides()) or self.external is not None or self.reach != (0, 0)


def neighbours(i: np.ndarray | int, doc_start: np.ndarray | int, doc_end: np.ndarray | int,
               direction: int, size: int) -> np.ndarray | int:
    """How many of the `size` previous (direction -1) or next (+1) sentences exist in the doc."""
    room = (i - doc_start) if direction < 0 else (doc_end - 1 - i)
    return np.minimum(size, room)


def context_window(ids: np.ndarray, offsets: np.ndarray, i: int, doc_start: int, doc_end: int,
                   direction: int, size: int, max_tokens: int, separator: bool, *,
                   eos_id: int = EOS_ID, sep_id: Optional[int] = SEP_ID
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, segment ids) of one context side of sentence i, both (L,) int64.

    `eos_id`/`sep_id` are the vocabulary's specials (`sep_id` is read only with `separator`):
    the batch contract's by default, a second tokenizer's for `ExternalWindow`.
    """
    n = int(neighbours(i, doc_start, doc_end, direction, size))
    if n == 0:
        return np.array([eos_id], dtype=np.int64), np.zeros(1, dtype=np.int64)
    first = i - n if direction < 0 else i + 1  # sentences first .. first+n-1, document order
    bounds = offsets[first:first + n + 1] - offsets[first]
    tokens = np.asarray(ids[offsets[first]:offsets[first + n]], dtype=np.int64)
    distance = np.arange(n, 0, -1) if direction < 0 else np.arange(1, n + 1)
    segments = np.repeat(distance, np.diff(bounds))
    if separator and n > 1:
        tokens = np.insert(tokens, bounds[1:-1], sep_id)
        segments = np.insert(segments, bounds[1:-1], distance[:-1])
    body = max_tokens - 1
    if len(tokens) > body:  # drop the oldest tokens: far left (previous) or far right (next)
        keep = slice(len(tokens) - body, None) if direction < 0 else slice(0, body)
        tokens, segments = tokens[keep], segments[keep]
    return np.append(tokens, eos_id), np.append(segments, 1)


def context_lengths(offsets: np.ndarray, anchor: np.ndarray, doc_start: np.ndarray,
                    doc_end: np.ndarray, direction: int, size: int, max_tokens: int,
                    separator: bool) -> np.ndarray:
    """Length of `context_window` for each of the `anchor` sentences (with their document bounds)
    at once, (len(anchor),) int64."""
    i = np.asarray(anchor, dtype=np.int64)
    n = neighbours(i, doc_start, doc_end, direction, size)
    if direction < 0:
        body = offsets[i] - offsets[i - n]
    else:
        body = offsets[i + 1 + n] - offsets[i + 1]
    if separator:
        body += np.maximum(n - 1, 0)
    return np.minimum(body, max_tokens - 1) + 1
