"""Vocabularies: sentencepiece subwords (BPE or unigram) and whitespace words (docs/design.md section 5).

Every vocabulary shares the special ids of the batch contract (`data/batch.py`): `<pad>`=0,
`<unk>`=1, `<s>`=2, `</s>`=3, `<sep>`=4. `encode` never adds `<s>`/`</s>`; the collator does.
Word vocabularies serve the word-unit rows of Li & Feng (2019), Table 2 (30K words per side).
"""

from __future__ import annotations

import io
import json
import os
from abc import ABC, abstractmethod
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm

from lightning_docmt.data.batch import BOS_ID, EOS_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS, UNK_ID
from lightning_docmt.data.cachedir import build_once, content_key
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.config.schema import VocabConfig

_META = "vocab.json"
_DROPPED_ON_DECODE = frozenset((PAD_ID, BOS_ID, SEP_ID))


def _threads() -> int:
    return max(1, min(8, os.cpu_count() or 1))


class Vocabulary(ABC):
    """Text <-> ids. Subclasses implement `_encode_batch`, `_decode`, `__len__` and `_save`."""

    kind: str
    pad_id, unk_id, bos_id, eos_id, sep_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID, SEP_ID

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
        meta = {"kind": self.kind, "lowercase": self.lowercase, "size": len(self)}
        (directory / _META).write_text(json.dumps(meta, indent=1))

    @staticmethod
    def load(directory: str | Path) -> Vocabulary:
        directory = Path(directory)
        meta = json.loads((directory / _META).read_text())
        cls = {c.kind: c for c in (SentencePieceVocab, WordVocab)}[meta["kind"]]
        return cls._load(directory, lowercase=meta["lowercase"])

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


class SentencePieceVocab(Vocabulary):
    """A sentencepiece model with the contract's special ids (`<sep>` a control symbol: never
    produced from raw text, so a literal "<sep>" in a corpus stays ordinary text)."""

    kind = "sentencepiece"
    _MODEL = "spm.model"

    def __init__(self, model_proto: bytes, *, lowercase: bool = False):
        super().__init__(lowercase=lowercase)
        self._proto = model_proto
        self._sp = spm.SentencePieceProcessor(model_proto=model_proto)

    @classmethod
    def train(cls, sentences: Iterable[str], *, model_type: str, size: int,
              character_coverage: float = 1.0, max_train_sentences: int = 2_000_000,
              lowercase: bool = False, seed: int = 0) -> SentencePieceVocab:
        """Train in-process on a seeded sample of at most `max_train_sentences` sentences.

        `size` is an upper bound: on a corpus too small to support it the model is smaller
        (sentencepiece's soft limit) instead of failing.
        """
        norm = (s.lower() for s in sentences) if lowercase else sentences
        sample = sample_sentences(norm, max_train_sentences, seed)
        buf = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sample), model_writer=buf, model_type=model_type,
            vocab_size=size, character_coverage=character_coverage, hard_vocab_limit=False,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            pad_piece=SPECIAL_TOKENS[PAD_ID], unk_piece=SPECIAL_TOKENS[UNK_ID],
            bos_piece=SPECIAL_TOKENS[BOS_ID], eos_piece=SPECIAL_TOKENS[EOS_ID],
            control_symbols=[SPECIAL_TOKENS[SEP_ID]], input_sentence_size=0,
            shuffle_input_sentence=False, num_threads=_threads(),
            minloglevel=2,
        )
        return cls(buf.getvalue(), lowercase=lowercase)

    def __len__(self) -> int:
        return self._sp.get_piece_size()

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._sp.encode(texts, num_threads=_threads())

    def _decode(self, ids: list[int]) -> str:
        return self._sp.decode(ids)

    def piece(self, i: int) -> str:
        return self._sp.id_to_piece(i)

    def _save(self, directory: Path) -> None:
        (directory / self._MODEL).write_bytes(self._proto)

    @classmethod
    def _load(cls, directory: Path, *, lowercase: bool) -> SentencePieceVocab:
        return cls((directory / cls._MODEL).read_bytes(), lowercase=lowercase)


class WordVocab(Vocabulary):
    """Whitespace tokens ranked by frequency (ties alphabetical), capped at `size` entries
    including the five specials; anything else is `<unk>`."""

    kind = "word"
    _TOKENS = "tokens.txt"

    def __init__(self, words: Sequence[str], *, lowercase: bool = False):
        super().__init__(lowercase=lowercase)
        self._tokens = list(SPECIAL_TOKENS) + list(words)
        self._index = {w: i for i, w in enumerate(words, start=len(SPECIAL_TOKENS))}

    @classmethod
    def train(cls, sentences: Iterable[str], *, size: int, lowercase: bool = False) -> WordVocab:
        counts: Counter[str] = Counter()
        for s in sentences:
            counts.update((s.lower() if lowercase else s).split())
        for special in SPECIAL_TOKENS:
            counts.pop(special, None)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        kept = ranked[: max(0, size - len(SPECIAL_TOKENS))]
        return cls([w for w, _ in kept], lowercase=lowercase)

    def __len__(self) -> int:
        return len(self._tokens)

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        get = self._index.get
        return [[get(w, UNK_ID) for w in t.split()] for t in texts]

    def _decode(self, ids: list[int]) -> str:
        return " ".join(self._tokens[i] for i in ids)

    def piece(self, i: int) -> str:
        return self._tokens[i]

    def _save(self, directory: Path) -> None:
        words = self._tokens[len(SPECIAL_TOKENS):]
        (directory / self._TOKENS).write_text("".join(w + "\n" for w in words), encoding="utf-8")

    @classmethod
    def _load(cls, directory: Path, *, lowercase: bool) -> WordVocab:
        text = (directory / cls._TOKENS).read_text(encoding="utf-8")
        return cls(text.splitlines(), lowercase=lowercase)


VOCAB_TYPES = ("bpe", "unigram", "word")
_FORMAT = 1  # bump when the trained artefact changes for the same inputs


def check_vocab_config(cfg: VocabConfig) -> None:
    if cfg.type not in VOCAB_TYPES:
        raise DocMTInputError(f"must be one of {', '.join(VOCAB_TYPES)}, got {cfg.type!r}",
                              key="vocab.type")
    if cfg.size <= len(SPECIAL_TOKENS):
        raise DocMTInputError(f"must exceed the {len(SPECIAL_TOKENS)} special tokens, "
                              f"got {cfg.size}", key="vocab.size")
    if cfg.character_coverage is not None and not 0.0 < cfg.character_coverage <= 1.0:
        raise DocMTInputError(f"must be in (0, 1], got {cfg.character_coverage}",
                              key="vocab.character_coverage")
    if cfg.max_train_sentences < 1:
        raise DocMTInputError("must be positive", key="vocab.max_train_sentences")


Coverages = tuple[float, float]  # sentencepiece character_coverage of the (source, target) side


def vocab_key(cfg: VocabConfig, fingerprint: str, coverages: Coverages) -> str:
    """Hash of the training data fingerprint and every option that changes the trained model
    (`coverages`: the resolved character coverage of each side, `data/languages.py`)."""
    return content_key({
        "format": _FORMAT, "fingerprint": fingerprint, "type": cfg.type, "size": cfg.size,
        "joint": cfg.joint, "character_coverage": list(coverages),
        "max_train_sentences": cfg.max_train_sentences, "lowercase": cfg.lowercase,
    })


def train_vocabulary(cfg: VocabConfig, sentences: Iterable[str], character_coverage: float) -> Vocabulary:
    if cfg.type == "word":
        return WordVocab.train(sentences, size=cfg.size, lowercase=cfg.lowercase)
    return SentencePieceVocab.train(
        sentences, model_type=cfg.type, size=cfg.size, character_coverage=character_coverage,
        max_train_sentences=cfg.max_train_sentences, lowercase=cfg.lowercase,
    )


def vocab_dir(cache_dir: str | Path, cfg: VocabConfig, fingerprint: str, coverages: Coverages) -> Path:
    return Path(cache_dir) / "vocab" / vocab_key(cfg, fingerprint, coverages)


def build_vocabularies(cfg: VocabConfig, src_sentences: Iterable[str], tgt_sentences: Iterable[str],
                       cache_dir: str | Path, fingerprint: str, coverages: Coverages = (1.0, 1.0)
                       ) -> tuple[Vocabulary, Vocabulary]:
    """(source, target) vocabularies, trained once per (fingerprint, options) and then loaded.

    Joint: one model trained on both sides, returned twice (the same object). The sentence
    iterables are consumed only when the vocabulary is not cached yet. `coverages`: sentencepiece's
    `character_coverage` of each side (a joint vocabulary uses the source side's; the caller gives
    both the same value then).
    """
    check_vocab_config(cfg)
    final = vocab_dir(cache_dir, cfg, fingerprint, coverages)

    def build(tmp: Path) -> None:
        if cfg.joint:
            both = (s for side in (src_sentences, tgt_sentences) for s in side)
            train_vocabulary(cfg, both, coverages[0]).save(tmp / "joint")
        else:
            train_vocabulary(cfg, src_sentences, coverages[0]).save(tmp / "src")
            train_vocabulary(cfg, tgt_sentences, coverages[1]).save(tmp / "tgt")

    build_once(final, build)
    return load_vocabularies(final)


def load_vocabularies(directory: str | Path) -> tuple[Vocabulary, Vocabulary]:
    directory = Path(directory)
    if (directory / "joint").is_dir():
        joint = Vocabulary.load(directory / "joint")
        return joint, joint
    return Vocabulary.load(directory / "src"), Vocabulary.load(directory / "tgt")
