"""Vocabularies: sentencepiece subwords (BPE or unigram), whitespace words, and a pretrained
encoder's WordPiece vocabulary (docs/design.md section 5).

Every vocabulary shares the special ids of the batch contract (`batch.py`): `<pad>`=0,
`<unk>`=1, `<s>`=2, `</s>`=3, `<sep>`=4. `encode` never adds `<s>`/`</s>`; the collator does.
Word vocabularies serve the word-unit rows of Li & Feng (2019), Table 2 (30K words per side).
The paper segments Chinese with ICTCLAS, which is unavailable: `vocab.word_split=han` makes every
Han character a word of its own and splits other scripts on whitespace (reading L17 of
docs/papers/lifeng2019.md), so those rows are not comparable to the paper's word rows.
WordPiece vocabularies are the source side of a model whose encoder starts from a pretrained
BERT-style checkpoint (`vocab.src_pretrained`, Ma et al. 2020's "+BERT" rows, reading F11 of
docs/papers/flat2020.md); the target side then has a vocabulary of its own.
"""

from __future__ import annotations

import io
import json
import os
import re
from abc import ABC, abstractmethod
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm

from lightning_docmt.batch import BOS_ID, EOS_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS, UNK_ID
from lightning_docmt.config import pretrained_files
from lightning_docmt.data.cachedir import build_once, content_key
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.config.schema import VocabConfig

SRC_PRETRAINED_KEY = "vocab.src_pretrained"

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
        meta = {"kind": self.kind, "lowercase": self.lowercase, "size": len(self), **self._options()}
        (directory / _META).write_text(json.dumps(meta, indent=1))

    @staticmethod
    def load(directory: str | Path) -> Vocabulary:
        directory = Path(directory)
        meta = json.loads((directory / _META).read_text())
        cls = {c.kind: c for c in (SentencePieceVocab, WordVocab, WordPieceVocab)}[meta["kind"]]
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


_REQUIRED_CHARS = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


def _too_small_for_characters(err: RuntimeError, size: int, coverage: float) -> Exception:
    """sentencepiece's hard failure when the characters it must keep (those covering
    `character_coverage` of the text, each a piece of its own) outnumber `size` (a Chinese or
    Japanese side at a small vocabulary): the user's error, named by key. Any other error is
    returned unchanged."""
    found = _REQUIRED_CHARS.search(str(err))
    if found is None:
        return err
    return DocMTInputError(f"{size} pieces cannot hold the {found.group(2)} characters that "
                           f"character_coverage={coverage} keeps; raise vocab.size or lower "
                           "vocab.character_coverage", key="vocab.size")


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
        (sentencepiece's soft limit) instead of failing. Fewer pieces than the characters that
        `character_coverage` keeps is a `DocMTInputError` on `vocab.size`.
        """
        norm = (s.lower() for s in sentences) if lowercase else sentences
        sample = sample_sentences(norm, max_train_sentences, seed)
        buf = io.BytesIO()
        try:
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
        except RuntimeError as err:
            raise _too_small_for_characters(err, size, character_coverage) from None
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


# Han characters (CJK Unified Ideographs, Extension A, Compatibility Ideographs), CJK punctuation
# and fullwidth forms. U+3000, the ideographic space, is whitespace: it separates, as in `str.split`.
_HAN = "\u3001-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_HAN_WORDS = re.compile(f"[{_HAN}]|[^\\s{_HAN}]+")
WORD_SPLITS = ("whitespace", "han")


def split_words(text: str, word_split: str = "whitespace") -> list[str]:
    """The words of `text`: whitespace-separated tokens, or with `han` every Han character (and CJK
    punctuation or fullwidth form) a word of its own and runs of other non-space characters split
    on whitespace ("耶稣说：Hello world" -> 耶 稣 说 ： Hello world; reading L17 of
    docs/papers/lifeng2019.md)."""
    return _HAN_WORDS.findall(text) if word_split == "han" else text.split()


class WordVocab(Vocabulary):
    """Words (`split_words`) ranked by frequency (ties alphabetical), capped at `size` entries
    including the five specials; anything else is `<unk>`.

    `decode` joins words with spaces whatever the split, so a `han` vocabulary's output has a space
    between Han characters: `han` is meant for the source side.
    """

    kind = "word"
    _TOKENS = "tokens.txt"

    def __init__(self, words: Sequence[str], *, lowercase: bool = False, word_split: str = "whitespace"):
        super().__init__(lowercase=lowercase)
        self.word_split = word_split
        self._tokens = list(SPECIAL_TOKENS) + list(words)
        self._index = {w: i for i, w in enumerate(words, start=len(SPECIAL_TOKENS))}

    @classmethod
    def train(cls, sentences: Iterable[str], *, size: int, lowercase: bool = False,
              word_split: str = "whitespace") -> WordVocab:
        counts: Counter[str] = Counter()
        for s in sentences:
            counts.update(split_words(s.lower() if lowercase else s, word_split))
        for special in SPECIAL_TOKENS:
            counts.pop(special, None)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        kept = ranked[: max(0, size - len(SPECIAL_TOKENS))]
        return cls([w for w, _ in kept], lowercase=lowercase, word_split=word_split)

    def __len__(self) -> int:
        return len(self._tokens)

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        get = self._index.get
        return [[get(w, UNK_ID) for w in split_words(t, self.word_split)] for t in texts]

    def _decode(self, ids: list[int]) -> str:
        return " ".join(self._tokens[i] for i in ids)

    def piece(self, i: int) -> str:
        return self._tokens[i]

    def _save(self, directory: Path) -> None:
        words = self._tokens[len(SPECIAL_TOKENS):]
        (directory / self._TOKENS).write_text("".join(w + "\n" for w in words), encoding="utf-8")

    def _options(self) -> dict:
        # The default is not written, so whitespace vocabularies save the files they always did.
        return {} if self.word_split == "whitespace" else {"word_split": self.word_split}

    @classmethod
    def _load(cls, directory: Path, *, lowercase: bool, word_split: str = "whitespace") -> WordVocab:
        text = (directory / cls._TOKENS).read_text(encoding="utf-8")
        return cls(text.splitlines(), lowercase=lowercase, word_split=word_split)


class WordPieceVocab(Vocabulary):
    """A pretrained encoder's own tokenizer and vocabulary (reading F11 of docs/papers/flat2020.md).

    Text goes through the checkpoint's tokenizer as it is (`tokenizers`, from its `tokenizer.json`),
    normalisation included: an uncased model's lower-cases and strips accents, so `lowercase` is not
    used. Special tokens written in raw text (a literal "[SEP]") are ordinary text. Ids are the
    tokenizer's, relabelled by a permutation that gives the contract's specials their ids: `<pad>`,
    `<unk>`, `<s>`, `</s>` swap places with the tokenizer's pad, unk, cls and sep tokens ([PAD]=0,
    [UNK]=100, [CLS]=101, [SEP]=102 in BERT), and `<sep>` with its mask token ([MASK]=103), which
    text never produces. Every other id keeps its number unless a swap moved it (BERT's
    `[unused0]`..`[unused3]` land on 100..103), so the vocabulary has exactly the tokenizer's size.

    `pretrained_ids[i]` is the checkpoint's embedding row for id i: the permutation, except that
    `<sep>` (between two context sentences) reads [SEP], BERT's sentence separator. A model copies
    those rows into its source table (`nn/pretrained.load_pretrained_encoder`), so `</s>` is [SEP],
    `<s>` [CLS] and `<unk>` [UNK] for the encoder.
    """

    kind = "wordpiece"
    _TOKENIZER = "tokenizer.json"
    _SPECIALS = "specials.json"
    SPECIAL_ROLES = ((PAD_ID, "pad"), (UNK_ID, "unk"), (BOS_ID, "cls"), (EOS_ID, "sep"), (SEP_ID, "mask"))

    def __init__(self, tokenizer_json: str, specials: dict[str, int]):
        super().__init__(lowercase=False)
        from tokenizers import Tokenizer

        self._json = tokenizer_json
        self.specials = {role: int(specials[role]) for _, role in self.SPECIAL_ROLES}
        self._tok = Tokenizer.from_str(tokenizer_json)
        self._tok.no_padding()  # a checkpoint's tokenizer.json may pad or truncate (MiniLM's: 128)
        self._tok.no_truncation()
        self._tok.encode_special_tokens = True  # "[SEP]" in raw text is text
        size = self._tok.get_vocab_size(with_added_tokens=True)
        if len(set(self.specials.values())) != len(self.specials) or not all(
                0 <= i < size for i in self.specials.values()):
            raise ValueError(f"the tokenizer's special ids {self.specials} are not distinct ids below {size}")
        to_tokenizer = np.arange(size)  # contract id -> tokenizer id
        for contract, role in self.SPECIAL_ROLES:
            at = int(np.flatnonzero(to_tokenizer == self.specials[role])[0])
            to_tokenizer[[contract, at]] = to_tokenizer[[at, contract]]
        self._to_tokenizer = to_tokenizer
        self._from_tokenizer = np.argsort(to_tokenizer)  # tokenizer id -> contract id

    @classmethod
    def from_pretrained(cls, name: str) -> WordPieceVocab:
        """The vocabulary of the checkpoint `name` (a name or directory, `config/pretrained_files.py`)."""
        directory = pretrained_files.pretrained_dir(name, SRC_PRETRAINED_KEY)
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        except Exception as err:
            raise DocMTInputError(f"'{name}': cannot load its tokenizer ({type(err).__name__})",
                                  key=SRC_PRETRAINED_KEY) from None
        specials = {"pad": tokenizer.pad_token_id, "unk": tokenizer.unk_token_id,
                    "cls": tokenizer.cls_token_id, "sep": tokenizer.sep_token_id,
                    "mask": tokenizer.mask_token_id}
        missing = [role for role, i in specials.items() if i is None]
        if missing or not getattr(tokenizer, "is_fast", False):
            what = f"no {', '.join(missing)} token" if missing else "no fast (tokenizer.json) version"
            raise DocMTInputError(f"'{name}': its tokenizer has {what}; a BERT-style WordPiece tokenizer "
                                  "is needed", key=SRC_PRETRAINED_KEY)
        return cls(tokenizer.backend_tokenizer.to_str(), specials)

    @property
    def pretrained_ids(self) -> np.ndarray:
        """(V,) the checkpoint's embedding row of every id (`<sep>` -> the sep token's row)."""
        ids = self._to_tokenizer.copy()
        ids[SEP_ID] = self.specials["sep"]
        return ids

    def tokenizer_ids(self, ids: Sequence[int]) -> list[int]:
        """The tokenizer's own ids of contract ids `ids` (the permutation, `<sep>` included as the mask id)."""
        return self._to_tokenizer[np.asarray(ids, dtype=np.int64)].tolist()

    def __len__(self) -> int:
        return len(self._to_tokenizer)

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        encodings = self._tok.encode_batch(texts, add_special_tokens=False)
        return [self._from_tokenizer[np.asarray(e.ids, dtype=np.int64)].tolist() for e in encodings]

    def _decode(self, ids: list[int]) -> str:
        return self._tok.decode(self.tokenizer_ids(ids), skip_special_tokens=False)

    def piece(self, i: int) -> str:
        return self._tok.id_to_token(int(self._to_tokenizer[i]))

    def _save(self, directory: Path) -> None:
        (directory / self._TOKENIZER).write_text(self._json, encoding="utf-8")
        (directory / self._SPECIALS).write_text(json.dumps(self.specials, indent=1, sort_keys=True))

    @classmethod
    def _load(cls, directory: Path, *, lowercase: bool) -> WordPieceVocab:
        return cls((directory / cls._TOKENIZER).read_text(encoding="utf-8"),
                   json.loads((directory / cls._SPECIALS).read_text()))


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
    if cfg.word_split not in WORD_SPLITS:
        raise DocMTInputError(f"must be one of {', '.join(WORD_SPLITS)}, got {cfg.word_split!r}",
                              key="vocab.word_split")
    if cfg.word_split != "whitespace" and cfg.type != "word":
        raise DocMTInputError(f"{cfg.word_split!r} applies to word vocabularies (vocab.type=word), "
                              f"not {cfg.type!r}", key="vocab.word_split")
    if cfg.src_pretrained is not None and cfg.joint:
        raise DocMTInputError("a pretrained encoder's WordPiece source vocabulary (vocab.src_pretrained) "
                              "leaves the target side a vocabulary of its own; set vocab.joint=false",
                              key="vocab.joint")


Coverages = tuple[float, float]  # sentencepiece character_coverage of the (source, target) side


def vocab_key(cfg: VocabConfig, fingerprint: str, coverages: Coverages) -> str:
    """Hash of the training data fingerprint and every option that changes the trained model
    (`coverages`: the resolved character coverage of each side, `data/languages.py`). With
    `src_pretrained`, the checkpoint's files are part of the key, and a `word_split` other than
    whitespace is too (without them the key is what it always was)."""
    inputs = {
        "format": _FORMAT, "fingerprint": fingerprint, "type": cfg.type, "size": cfg.size,
        "joint": cfg.joint, "character_coverage": list(coverages),
        "max_train_sentences": cfg.max_train_sentences, "lowercase": cfg.lowercase,
    }
    if cfg.word_split != "whitespace":
        inputs["word_split"] = cfg.word_split
    if cfg.src_pretrained is not None:
        inputs["src_pretrained"] = pretrained_files.fingerprint(pretrained_files.pretrained_dir(cfg.src_pretrained,
                                                                                            SRC_PRETRAINED_KEY))
    return content_key(inputs)


def train_vocabulary(cfg: VocabConfig, sentences: Iterable[str], character_coverage: float) -> Vocabulary:
    if cfg.type == "word":
        return WordVocab.train(sentences, size=cfg.size, lowercase=cfg.lowercase,
                               word_split=cfg.word_split)
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
        if cfg.src_pretrained is not None:  # the checkpoint's WordPiece; the target side its own
            WordPieceVocab.from_pretrained(cfg.src_pretrained).save(tmp / "src")
            train_vocabulary(cfg, tgt_sentences, coverages[1]).save(tmp / "tgt")
        elif cfg.joint:
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
