"""Tokenizers of the external context streams: `ctx_ext` and the named `context.streams`
(docs/design.md section 5).

A pretrained context encoder (BERT-like, PEGASUS) reads the context sentences tokenised its own
way: its own vocabulary, its own special ids and its own padding id, which need not be `PAD_ID`.
`ExternalTokenizer` is all the data pipeline needs from such a tokenizer, and
`load_tokenizer(spec)` builds one from `context.external.tokenizer`:

- `vocab:DIR` -- a vocabulary of this package saved in DIR by `Vocabulary.save` (for instance a
  `vocab/<key>/joint` cache entry, or a vocabulary trained separately). `vocab:DIR?pad_id=N`
  relabels it so that padding is id N: ids 0 and N swap places, so every id stays in use and a
  pipeline or model that silently assumed padding = 0 is caught by the tests that use it.
- `hf:NAME` -- a pretrained BERT-style encoder's own WordPiece tokenizer: NAME is a built-in name
  (`minilm`), a local directory or a name in the local Hugging Face cache, as for
  `model.pretrained_encoder` (`config/pretrained_files.py`; nothing is downloaded). Its ids are
  those of `data/vocab/wordpiece.WordPieceVocab` (the checkpoint's, with the contract's specials
  swapped in; `pretrained_ids` maps them back to the checkpoint's embedding rows), and a row reads
  `[CLS] s_1 [SEP] ... s_k [SEP]`: `bos_id` is [CLS] and both `sep_id` and `eos_id` are [SEP] for
  the encoder.

Further kinds plug in through `TOKENIZER_LOADERS` (prefix -> what ARGS names, loader).
"""

from __future__ import annotations

import hashlib
import importlib.util
import tempfile
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

from lightning_docmt.batch import BOS_ID, PAD_ID
from lightning_docmt.data.cachedir import content_key
from lightning_docmt.data.corpora import split_query
from lightning_docmt.data.vocab import Vocabulary
from lightning_docmt.data.vocab.wordpiece import WordPieceVocab
from lightning_docmt.errors import DocMTInputError

TOKENIZER_KEY = "context.external.tokenizer"


class ExternalTokenizer(Protocol):
    """Text -> ids of a second vocabulary, and the special ids that lay out a `ctx_ext` row.

    A row is `[bos_id] s_1 sep_id s_2 ... s_k eos_id` (`data/windows.ExternalWindow`), padded with
    `pad_id`. `fingerprint` keys the binarized caches: it must change whenever an id could.
    """

    pad_id: int  # fills a row beyond its length
    eos_id: int  # closes every row (BERT: [SEP], PEGASUS: </s>)
    sep_id: Optional[int]  # between two context sentences; None: sentences are concatenated
    bos_id: Optional[int]  # opens every row (BERT: [CLS]); None: nothing

    @property
    def fingerprint(self) -> str: ...

    def encode(self, text: str) -> list[int]:
        """Ids of one sentence, without any special id."""
        ...

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]: ...

    def __len__(self) -> int:
        """The number of ids: every id is in [0, len)."""
        ...


def _vocabulary_digest(vocab: Vocabulary) -> str:
    """sha256 of the files `vocab.save` writes: equal digests encode every text alike."""
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory() as tmp:
        vocab.save(tmp)
        for path in sorted(Path(tmp).iterdir()):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


class VocabularyTokenizer:
    """One of this package's vocabularies as an `ExternalTokenizer`.

    Its ids are the vocabulary's, with ids `PAD_ID` and `pad_id` swapped: the vocabulary never
    produces `<pad>`, so `pad_id` never appears in an encoded sentence while the token that had
    id `pad_id` now comes out as 0. `<s>` is not used (`bos_id` None); `</s>` and `<sep>` are the
    vocabulary's, relabelled the same way, so a row has the layout of `ctx_src`.
    """

    bos_id = None

    def __init__(self, vocab: Vocabulary, pad_id: int = PAD_ID):
        if not 0 <= pad_id < len(vocab):
            raise ValueError(f"pad_id {pad_id} is not an id of a {len(vocab)}-token vocabulary")
        self.vocab = vocab
        self.pad_id = pad_id
        self.eos_id = self._relabel(vocab.eos_id)
        self.sep_id = self._relabel(vocab.sep_id)

    def _relabel(self, i: int) -> int:
        return self.pad_id if i == PAD_ID else PAD_ID if i == self.pad_id else i

    @cached_property
    def fingerprint(self) -> str:
        return content_key({"kind": "vocab", "vocab": _vocabulary_digest(self.vocab),
                            "pad_id": self.pad_id})

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        ids = self.vocab.encode_batch(texts)
        if self.pad_id == PAD_ID:
            return ids
        return [[self._relabel(i) for i in row] for row in ids]

    def __len__(self) -> int:
        return len(self.vocab)


def _load_vocabulary(args: str, spec: str, key: str) -> VocabularyTokenizer:
    try:
        directory, options = split_query(args, spec=spec, allowed=("pad_id",))
    except DocMTInputError as err:
        raise DocMTInputError(str(err), key=key) from None
    if not (Path(directory) / "vocab.json").is_file():
        raise DocMTInputError(f"no vocabulary saved in '{directory}' (expected its vocab.json)", key=key)
    pad = options.get("pad_id", str(PAD_ID))
    if not pad.isdigit():
        raise DocMTInputError(f"pad_id must be a non-negative integer, got {pad!r}", key=key)
    try:
        return VocabularyTokenizer(Vocabulary.load(directory), int(pad))
    except ValueError as err:
        raise DocMTInputError(f"'{spec}': {err}", key=key) from None


class WordPieceTokenizer(VocabularyTokenizer):
    """A pretrained encoder's `WordPieceVocab` as an `ExternalTokenizer` (`hf:NAME`): a row opens
    with [CLS] (`bos_id` = the contract's `<s>`, which the vocabulary maps to [CLS]), and both the
    separator and the end are the contract's `</s>`, which it maps to [SEP]: one id for one token,
    so a concatenation closes its last sentence with a single [SEP] (`data/streams.py`)."""

    def __init__(self, vocab: WordPieceVocab):
        super().__init__(vocab)
        self.bos_id = BOS_ID
        self.sep_id = self.eos_id


def _load_hugging_face(args: str, spec: str, key: str) -> ExternalTokenizer:
    if importlib.util.find_spec("transformers") is None:
        raise DocMTInputError(f"'{spec}' needs the 'transformers' package, which is not "
                              "installed (pip install transformers)", key=key)
    return WordPieceTokenizer(WordPieceVocab.from_pretrained(args, key=key))


TOKENIZER_LOADERS: dict[str, tuple[str, Callable[[str, str, str], ExternalTokenizer]]] = {
    "vocab": ("DIR", _load_vocabulary),
    "hf": ("NAME", _load_hugging_face),
}
"""Spec prefix -> (what ARGS names, the loader of `PREFIX:ARGS`, called with the setting an error names)."""


def load_tokenizer(spec: str, key: str = TOKENIZER_KEY) -> ExternalTokenizer:
    """The tokenizer named by `spec` (`PREFIX:ARGS`, see the module docstring); `key` is the
    setting that names it, for errors."""
    prefix, sep, args = spec.partition(":")
    if not sep or prefix not in TOKENIZER_LOADERS or not args:
        kinds = ", ".join(f"{p}:{what}" for p, (what, _) in TOKENIZER_LOADERS.items())
        raise DocMTInputError(f"expected one of {kinds}, got {spec!r}", key=key)
    return TOKENIZER_LOADERS[prefix][1](args, spec, key)


def external_tokenizer(context: Any) -> Optional[ExternalTokenizer]:
    """The tokenizer of `context.external`, or None when the stream is off.

    `context` is a `ContextConfig` or its DictConfig; a config without an `external` key (saved
    before the key existed) or no config at all means the stream is off.
    """
    external = getattr(context, "external", None)
    return None if external is None else load_tokenizer(external.tokenizer)


def stream_tokenizers(context: Any) -> dict[str, ExternalTokenizer]:
    """The tokenizer of each stream of `context.streams` by stream name (none for a config
    without the key, saved before it existed)."""
    streams = getattr(context, "streams", None) or {}
    return {name: load_tokenizer(stream.tokenizer, key=f"context.streams.{name}.tokenizer")
            for name, stream in streams.items()}
