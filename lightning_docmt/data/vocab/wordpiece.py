"""A pretrained encoder's WordPiece vocabulary: the source side of a model whose encoder starts from
a BERT-style checkpoint (`vocab.src_pretrained`, Ma et al. 2020's "+BERT" rows, reading F11 of
docs/papers/ma2020.md); the target side then has a vocabulary of its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

from lightning_docmt.batch import BOS_ID, EOS_ID, PAD_ID, SEP_ID, UNK_ID
from lightning_docmt.config import pretrained_files
from lightning_docmt.data.vocab.base import Vocabulary
from lightning_docmt.errors import DocMTInputError

SRC_PRETRAINED_KEY = "vocab.src_pretrained"


class WordPieceVocab(Vocabulary):
    """A pretrained encoder's own tokenizer and vocabulary (reading F11 of docs/papers/ma2020.md).

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
    def from_pretrained(cls, name: str, key: str = SRC_PRETRAINED_KEY) -> WordPieceVocab:
        """The vocabulary of the checkpoint `name` (a name or directory, `config/pretrained_files.py`);
        an error names `key`, the setting that named it."""
        directory = pretrained_files.pretrained_dir(name, key)
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        except Exception as err:
            raise DocMTInputError(f"'{name}': cannot load its tokenizer ({type(err).__name__})",
                                  key=key) from None
        specials = {"pad": tokenizer.pad_token_id, "unk": tokenizer.unk_token_id,
                    "cls": tokenizer.cls_token_id, "sep": tokenizer.sep_token_id,
                    "mask": tokenizer.mask_token_id}
        missing = [role for role, i in specials.items() if i is None]
        if missing or not getattr(tokenizer, "is_fast", False):
            what = f"no {', '.join(missing)} token" if missing else "no fast (tokenizer.json) version"
            raise DocMTInputError(f"'{name}': its tokenizer has {what}; a BERT-style WordPiece tokenizer "
                                  "is needed", key=key)
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
