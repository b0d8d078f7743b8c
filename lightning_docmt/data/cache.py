"""Binarized, memory-mapped splits (docs/design.md section 5).

One directory per split, keyed by a content hash of (split source fingerprint, vocabulary key,
filter options, and the external tokenizer's fingerprint when there is one). All arrays are raw
little files opened with `np.memmap(mode="r")`, so every DDP rank and every DataLoader worker
shares one copy in the page cache:

| file                      | dtype          | content |
|---------------------------|----------------|---------|
| `{src,tgt}.ids`           | uint16 / int32 | token ids of all sentences, concatenated (no `<s>`/`</s>`) |
| `{src,tgt}.offsets`       | int64 (n+1)    | sentence i is `ids[offsets[i]:offsets[i+1]]` |
| `doc_offsets`             | int64 (d+1)    | document j holds sentences `doc_offsets[j]:doc_offsets[j+1]` |
| `targets`                 | int64          | sentences that are training targets (ascending) |
| `doc_ids.json`            | json list      | document ids, in order |
| `{src,tgt}.txt(.offsets)` | bytes, int64   | raw UTF-8 text (valid/test only: BLEU references) |
| `ext.ids`, `ext.offsets`  | own dtype, int64 | source sentences in the external tokenizer's ids (see below) |
| `<side>.<fp>.{ids,offsets}` | own dtype, int64 | one side in a stream tokenizer's ids (see below) |
| `meta.json`               | json           | counts (see `prepare.py`) and the token dtype |

The `ext.*` files exist only with `context.external` (docs/design.md section 5): the source
sentences encoded by the external tokenizer (`data/tokenizers.py`), whose id dtype is its own;
`meta.json` then also holds `ext_subwords` and `external` (the tokenizer's fingerprint and the
dtype of `ext.ids`). Without it a split is exactly what it was before the stream existed.

The named streams (`context.streams`, `data/streams.py`) read a side (`src` or `tgt`) in their
tokenizer's ids: each distinct (side, tokenizer) is one array `<side>.<fingerprint[:16]>`, with a
suffix for a target stream that reads a first-pass run's translations at valid and test
(`streams.retokenised_name`, `data/first_pass.py`), listed in `meta.json` under `retokenised` with
its side, tokenizer fingerprint, dtype and first-pass file, and opened as
`BinarizedSplit.retokenised[name]`.

Over-long training pairs (`data.max_len`, `data.max_len_ratio`) are not targets but stay in the
arrays as context of their neighbours, and are counted as `filtered`: nothing is dropped silently.
"""

from __future__ import annotations

import json
from array import array
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from pathlib import Path
from typing import BinaryIO, Iterable, Mapping

import numpy as np

from lightning_docmt.data.first_pass import Replacement
from lightning_docmt.data.tokenizers import ExternalTokenizer
from lightning_docmt.data.types import Document
from lightning_docmt.data.vocab import Vocabulary

CACHE_FORMAT = 1
_CHUNK_SENTENCES = 65_536
_SIDES = ("src", "tgt")
EXTERNAL_SIDE = "ext"


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.int32)


def _open(path: Path, dtype: np.dtype | str) -> np.ndarray:
    """Read-only memory map (an empty file, which mmap refuses, gives an empty array)."""
    if path.stat().st_size == 0:
        return np.empty(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


class _Mapped:
    """Base for lazily memory-mapped views: pickles as paths (DataLoader workers re-open)."""

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_map")}


class TokenArray(_Mapped):
    """Token ids of one side: `arr[i]` is sentence i as a read-only ndarray."""

    def __init__(self, directory: Path, side: str, dtype: str):
        self.directory, self.side, self.dtype = directory, side, dtype

    @property
    def ids(self) -> np.ndarray:
        if "_map_ids" not in self.__dict__:
            self._map_ids = _open(self.directory / f"{self.side}.ids", self.dtype)
        return self._map_ids

    @property
    def offsets(self) -> np.ndarray:
        if "_map_offsets" not in self.__dict__:
            self._map_offsets = _open(self.directory / f"{self.side}.offsets", np.int64)
        return self._map_offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i]:self.offsets[i + 1]]

    def lengths(self) -> np.ndarray:
        """Token count of every sentence, (n,) int64 (a fresh array, not a map)."""
        return np.diff(self.offsets)


class TextArray(_Mapped):
    """Raw sentences of one side, decoded on access."""

    def __init__(self, directory: Path, side: str):
        self.directory, self.side = directory, side

    def _maps(self) -> tuple[np.ndarray, np.ndarray]:
        if "_map_bytes" not in self.__dict__:
            self._map_bytes = _open(self.directory / f"{self.side}.txt", np.uint8)
            self._map_offsets = _open(self.directory / f"{self.side}.txt.offsets", np.int64)
        return self._map_bytes, self._map_offsets

    def __len__(self) -> int:
        return len(self._maps()[1]) - 1

    def __getitem__(self, i: int) -> str:
        data, offsets = self._maps()
        return bytes(data[offsets[i]:offsets[i + 1]]).decode("utf-8")

    def all(self) -> list[str]:
        data, offsets = self._maps()
        blob = bytes(data)
        bounds = offsets.tolist()
        return [blob[a:b].decode("utf-8") for a, b in zip(bounds[:-1], bounds[1:])]


@dataclass
class BinarizedSplit(_Mapped):
    """A loaded split: memory-mapped arrays plus metadata (nothing per sentence in Python)."""

    path: Path
    meta: dict = field(repr=False)

    def __post_init__(self) -> None:
        self.src = TokenArray(self.path, "src", self.meta["dtype"])
        self.tgt = TokenArray(self.path, "tgt", self.meta["dtype"])
        external = self.meta.get("external")
        self.ext = (TokenArray(self.path, EXTERNAL_SIDE, external["dtype"]) if external
                    else None)  # the source sentences in the external tokenizer's ids
        self.retokenised = {name: TokenArray(self.path, name, entry["dtype"])
                            for name, entry in self.meta.get("retokenised", {}).items()}

    @property
    def doc_offsets(self) -> np.ndarray:
        if "_map_doc_offsets" not in self.__dict__:
            self._map_doc_offsets = _open(self.path / "doc_offsets", np.int64)
        return self._map_doc_offsets

    @property
    def targets(self) -> np.ndarray:
        if "_map_targets" not in self.__dict__:
            self._map_targets = _open(self.path / "targets", np.int64)
        return self._map_targets

    @cached_property
    def doc_ids(self) -> list[str]:
        return json.loads((self.path / "doc_ids.json").read_text(encoding="utf-8"))

    @property
    def n_sentences(self) -> int:
        return self.meta["sentences"]

    @property
    def n_documents(self) -> int:
        return self.meta["documents"]

    def doc_index(self, sentences: np.ndarray) -> np.ndarray:
        """Document index of each given sentence index."""
        return np.searchsorted(self.doc_offsets, sentences, side="right") - 1

    def references(self) -> list[str]:
        """Raw target sentences in sentence order (valid/test splits)."""
        return self._text("tgt").all()

    def source_texts(self) -> list[str]:
        return self._text("src").all()

    def _text(self, side: str) -> TextArray:
        if not self.meta["has_text"]:
            raise ValueError(f"split '{self.meta['split']}' was binarized without raw text")
        return TextArray(self.path, side)


def load_cache(directory: str | Path) -> BinarizedSplit:
    directory = Path(directory)
    return BinarizedSplit(directory, json.loads((directory / "meta.json").read_text()))


@dataclass
class LengthFilter:
    """Which training pairs are targets: at most `max_len` subwords per side and, when
    `max_len_ratio` > 0, a longer/shorter side ratio of at most `max_len_ratio`."""

    max_len: int
    max_len_ratio: float = 0.0

    def keep(self, src_len: np.ndarray, tgt_len: np.ndarray) -> np.ndarray:
        ok = (src_len <= self.max_len) & (tgt_len <= self.max_len)
        if self.max_len_ratio > 0:
            longer = np.maximum(src_len, tgt_len)
            shorter = np.maximum(np.minimum(src_len, tgt_len), 1)
            ok &= longer <= self.max_len_ratio * shorter
        return ok


class _SplitWriter:
    """Appends encoded chunks of sentences to the raw files of one split directory.

    `dtypes` maps each token side to its id dtype: `src` and `tgt`, plus `ext` for the external
    stream and the streams' retokenised arrays (which have ids, but no text and no whitespace-token
    count).
    """

    def __init__(self, out: Path, files: ExitStack, dtypes: dict[str, np.dtype], keep_text: bool):
        self.dtypes, self.keep_text = dtypes, keep_text
        names = [f"{s}.ids" for s in dtypes] + [f"{s}.offsets" for s in dtypes] + ["targets"]
        if keep_text:
            names += [f"{s}.txt" for s in _SIDES] + [f"{s}.txt.offsets" for s in _SIDES]
        self.f: dict[str, BinaryIO] = {n: files.enter_context(open(out / n, "wb")) for n in names}
        streams = tuple(dtypes) + (("src.txt", "tgt.txt") if keep_text else ())
        self.base = {stream: 0 for stream in streams}  # items written so far, per stream
        for stream in streams:
            self.f[f"{stream}.offsets"].write(np.zeros(1, np.int64).tobytes())
        self.n_sentences = 0
        self.truncated: list[int] = []  # sentences cut by `add`'s max_tokens
        self.counts = {"src_tokens": 0, "tgt_tokens": 0, "src_subwords": 0, "tgt_subwords": 0,
                       "filtered": 0, "targets": 0}
        self.counts.update({f"{s}_subwords": 0 for s in dtypes if s not in _SIDES})

    def _append(self, stream: str, lengths: np.ndarray, payload: bytes) -> None:
        self.f[f"{stream}.offsets"].write((self.base[stream] + np.cumsum(lengths)).tobytes())
        self.base[stream] += int(lengths.sum())
        self.f[stream if stream.endswith(".txt") else f"{stream}.ids"].write(payload)

    def add_ids(self, side: str, ids: list[list[int]]) -> np.ndarray:
        """Append the ids of one side of a chunk; returns its subword lengths."""
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(chain.from_iterable(ids), dtype=self.dtypes[side],
                           count=int(lengths.sum()))
        self._append(side, lengths, flat.tobytes())
        self.counts[f"{side}_subwords"] += int(lengths.sum())
        return lengths

    def add(self, side: str, texts: list[str], vocab: Vocabulary, max_tokens: int | None = None) -> np.ndarray:
        """Encode and append one side (`src`/`tgt`) of a chunk, each sentence cut to its first
        `max_tokens` subwords when given (recorded in `truncated`); returns its subword lengths."""
        ids = vocab.encode_batch(texts)
        if max_tokens is not None:
            for k, row in enumerate(ids):
                if len(row) > max_tokens:
                    self.truncated.append(self.n_sentences + k)
                    ids[k] = row[:max_tokens]
        lengths = self.add_ids(side, ids)
        self.counts[f"{side}_tokens"] += sum(len(t.split()) for t in texts)
        if self.keep_text:
            raw = [t.encode("utf-8") for t in texts]
            byte_lengths = np.fromiter(map(len, raw), dtype=np.int64, count=len(raw))
            self._append(f"{side}.txt", byte_lengths, b"".join(raw))
        return lengths

    def add_targets(self, keep: np.ndarray) -> None:
        chosen = np.flatnonzero(keep).astype(np.int64) + self.n_sentences
        self.f["targets"].write(chosen.tobytes())
        self.counts["targets"] += len(chosen)
        self.counts["filtered"] += len(keep) - len(chosen)
        self.n_sentences += len(keep)


def build_cache(documents: Iterable[Document], src_vocab: Vocabulary, tgt_vocab: Vocabulary,
                out: str | Path, *, length_filter: LengthFilter | None = None,
                keep_text: bool = False, extra_meta: dict | None = None,
                chunk_sentences: int = _CHUNK_SENTENCES,
                external: ExternalTokenizer | None = None,
                retokenised: Mapping[str, tuple[str, ExternalTokenizer, Replacement | None]] | None = None,
                src_max_tokens: int | None = None) -> dict:
    """Binarize `documents` into the (empty, existing) directory `out`; returns its meta.

    Sentences are encoded `chunk_sentences` at a time with the vocabulary's batch encoder and
    appended to the raw files, so memory stays bounded by one chunk whatever the corpus size.
    `external` also writes the source sentences in that tokenizer's ids (`ext.*`); without it
    the files are exactly those of a build that knows nothing of the external stream.
    `retokenised` (array name -> (side, tokenizer, replacement), `streams.retokenised_name`) also
    writes each named array: that side's sentences in that tokenizer's ids, or the replacement's
    lines (`data/first_pass.py`: a first-pass translation per sentence) when there is one.
    `src_max_tokens` (translation, `inference/translate.py`) cuts every source sentence to its
    first that many subwords, for the sentence and as context alike; `meta["truncated"]` then
    lists the sentences it cut. Without it nothing is cut and the key is absent.
    """
    retokenised = dict(retokenised or {})
    out = Path(out)
    dtype = token_dtype(max(len(src_vocab), len(tgt_vocab)))
    dtypes = {side: dtype for side in _SIDES}
    if external is not None:
        dtypes[EXTERNAL_SIDE] = token_dtype(len(external))
    for name, (_, tokenizer, _) in retokenised.items():
        dtypes[name] = token_dtype(len(tokenizer))
    doc_ids: list[str] = []
    doc_offsets = array("q", [0])
    with ExitStack() as files:
        writer = _SplitWriter(out, files, dtypes, keep_text)
        src_buf: list[str] = []
        tgt_buf: list[str] = []

        def flush() -> None:
            src_len = writer.add("src", src_buf, src_vocab, src_max_tokens)
            tgt_len = writer.add("tgt", tgt_buf, tgt_vocab)
            if external is not None:
                writer.add_ids(EXTERNAL_SIDE, external.encode_batch(src_buf))
            for name, (side, tokenizer, replacement) in retokenised.items():
                texts = (src_buf if side == "src" else tgt_buf) if replacement is None else (
                    replacement.lines[writer.n_sentences:writer.n_sentences + len(src_buf)])
                writer.add_ids(name, tokenizer.encode_batch(texts))
            keep = (length_filter.keep(src_len, tgt_len) if length_filter is not None
                    else np.ones(len(src_len), dtype=bool))
            writer.add_targets(keep)
            src_buf.clear()
            tgt_buf.clear()

        for doc in documents:
            doc_ids.append(doc.doc_id)
            doc_offsets.append(doc_offsets[-1] + len(doc.src))
            src_buf.extend(doc.src)
            tgt_buf.extend(doc.tgt)
            if len(src_buf) >= chunk_sentences:
                flush()
        flush()
    (out / "doc_offsets").write_bytes(doc_offsets.tobytes())
    (out / "doc_ids.json").write_text(json.dumps(doc_ids, ensure_ascii=False), encoding="utf-8")
    meta = {"format": CACHE_FORMAT, **(extra_meta or {}), "documents": len(doc_ids),
            "sentences": writer.n_sentences, **writer.counts, "dtype": dtype.name,
            "has_text": keep_text}
    if src_max_tokens is not None:
        meta["truncated"] = writer.truncated
    if external is not None:
        meta["external"] = {"fingerprint": external.fingerprint,
                            "dtype": dtypes[EXTERNAL_SIDE].name}
    for replacement in [r for _, _, r in retokenised.values() if r is not None]:
        replacement.check_count(writer.n_sentences)
    if retokenised:
        meta["retokenised"] = {name: {"side": side, "fingerprint": tokenizer.fingerprint,
                                      "dtype": dtypes[name].name,
                                      "first_pass": None if replacement is None else str(replacement.path)}
                               for name, (side, tokenizer, replacement) in retokenised.items()}
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta
