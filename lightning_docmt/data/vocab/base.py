"""What every vocabulary is: text <-> ids with the batch contract's special ids (`batch.py`):
`<pad>`=0, `<unk>`=1, `<s>`=2, `</s>`=3, `<sep>`=4. `encode` never adds `<s>`/`</s>`; the collator
does. A vocabulary saves itself to a directory with its kind, and `Vocabulary.load` reads any kind.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from lightning_docmt.batch import BOS_ID, EOS_ID, PAD_ID, SEP_ID, UNK_ID

_META = "vocab.json"
_DROPPED_ON_DECODE = frozenset((PAD_ID, BOS_ID, SEP_ID))


def threads() -> int:
    """Threads for training and batch encoding: the cores, at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


class Vocabulary(ABC):
    """Text <-> ids. Subclasses implement `_encode_batch`, `_decode`, `__len__` and `_save`."""

    kind: str
    KINDS: dict[str, type[Vocabulary]] = {}  # kind -> class, filled as each kind's module is imported
    pad_id, unk_id, bos_id, eos_id, sep_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID, SEP_ID

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        Vocabulary.KINDS[cls.kind] = cls

    def __init__(self, *, lowercase: bool = False):
        self.lowercase = lowercase

    def normalize(self, text: str) -> str:
        return text.lower() if self.lowercase else text

    def encode(self, text: str) -> list[int]:
        """Ids of one sentence, without `<s>` or `</s>`."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self._encode_batch([self.normalize(t) for t in texts])

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids` up to the first `</s>`; `<pad>`, `<s>` and `<sep>` are dropped.

        `<unk>` is kept, rendered the vocabulary's own way (sentencepiece ` ⁇ `, words `<unk>`).
        """
        kept = []
        for i in (int(t) for t in ids):
            if i == EOS_ID:
                break
            if i not in _DROPPED_ON_DECODE:
                kept.append(i)
        return self._decode(kept)

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self._save(directory)
        meta = {"kind": self.kind, "lowercase": self.lowercase, "size": len(self), **self._options()}
        (directory / _META).write_text(json.dumps(meta, indent=1))

    @staticmethod
    def load(directory: str | Path) -> Vocabulary:
        directory = Path(directory)
        meta = json.loads((directory / _META).read_text())
        cls = Vocabulary.KINDS[meta["kind"]]
        options = {k: v for k, v in meta.items() if k not in ("kind", "size")}
        return cls._load(directory, **options)

    def _options(self) -> dict:
        """Keyword options of `_load` that `save` records in the metadata besides `lowercase`."""
        return {}

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def _encode_batch(self, texts: list[str]) -> list[list[int]]: ...

    @abstractmethod
    def _decode(self, ids: list[int]) -> str: ...

    @abstractmethod
    def _save(self, directory: Path) -> None: ...

    @classmethod
    @abstractmethod
    def _load(cls, directory: Path, *, lowercase: bool) -> Vocabulary: ...


def sample_sentences(sentences: Iterable[str], limit: int, seed: int = 0) -> list[str]:
    """At most `limit` non-empty sentences, a seeded uniform sample kept in corpus order."""
    pool = [s for s in sentences if s.strip()]
    if len(pool) <= limit:
        return pool
    keep = np.sort(np.random.default_rng(seed).choice(len(pool), size=limit, replace=False))
    return [pool[i] for i in keep]
