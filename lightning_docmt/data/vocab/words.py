"""Word vocabularies: the word-unit rows of Li & Feng (2019), Table 2 (30K words per side).

The paper segments Chinese with ICTCLAS, which is unavailable: `vocab.word_split=han` makes every
Han character a word of its own and splits other scripts on whitespace (reading L17 of
docs/papers/lifeng2019.md), so those rows are not comparable to the paper's word rows.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

from lightning_docmt.batch import SPECIAL_TOKENS, UNK_ID
from lightning_docmt.data.vocab.base import Vocabulary

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
