"""Sentencepiece subword vocabularies, BPE or unigram (docs/design.md section 5)."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Iterable

import sentencepiece as spm

from lightning_docmt.batch import BOS_ID, EOS_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS, UNK_ID
from lightning_docmt.data.vocab.base import Vocabulary, sample_sentences, threads
from lightning_docmt.errors import DocMTInputError

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
                shuffle_input_sentence=False, num_threads=threads(),
                minloglevel=2,
            )
        except RuntimeError as err:
            raise _too_small_for_characters(err, size, character_coverage) from None
        return cls(buf.getvalue(), lowercase=lowercase)

    def __len__(self) -> int:
        return self._sp.get_piece_size()

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._sp.encode(texts, num_threads=threads())

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
