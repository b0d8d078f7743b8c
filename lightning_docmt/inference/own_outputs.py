"""The model's own translations as the target side of a split, for decoding in document order.

A model with target-side context reads `ctx_tgt`, which `data/collate.py` cuts from a split's
target side: the references in training. At test and translation time the previous sentences'
target side must be what the model output for them. `OutputTokens` holds those outputs in the
shape of a `TokenArray`, and `WithOwnTargets` is a split whose target side they are, so the same
collation builds `ctx_tgt` from them (`inference/document_order.py`). Sentence j's
context is complete once the batches of the sentences before it are decoded, which document-order
batches (`data/doc_sampler.py`) guarantee. `WithContextTargets` keeps the references as the target
side and reads only the context from the outputs: scoring the references (CXMI) with the previous
sentences the model itself translated, as its test BLEU reads them.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from lightning_docmt.data.cache import BinarizedSplit
from lightning_docmt.distributed import gather_objects


class OutputTokens:
    """The model's own translations so far, in the shape of a `TokenArray` (`ids`, `offsets`,
    `[i]`): sentence i is empty until it is translated. Read as the target side of a split, it
    makes `ctx_tgt` hold the model's previous translations instead of references."""

    def __init__(self, n_sentences: int):
        self._outputs = [np.zeros(0, dtype=np.int64)] * n_sentences
        self._joined: tuple[np.ndarray, np.ndarray] | None = None

    def record(self, index: int, ids: Sequence[int]) -> None:
        self._outputs[index] = np.asarray(ids, dtype=np.int64)
        self._joined = None

    def _join(self) -> tuple[np.ndarray, np.ndarray]:
        if self._joined is None:
            lengths = np.array([len(o) for o in self._outputs], dtype=np.int64)
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            self._joined = (np.concatenate(self._outputs) if self._outputs else np.zeros(0, np.int64), offsets)
        return self._joined

    @property
    def ids(self) -> np.ndarray:
        return self._join()[0]

    @property
    def offsets(self) -> np.ndarray:
        return self._join()[1]

    def __len__(self) -> int:
        return len(self._outputs)

    def __getitem__(self, i: int) -> np.ndarray:
        return self._outputs[i]


def gathered(outputs: OutputTokens) -> OutputTokens:
    """Every rank's translations in one `OutputTokens` (a collective under DDP: call it on every
    rank; `outputs` itself outside one). Each rank decodes its own documents, so a sentence is
    filled on the rank that translated it and empty on the others: the merge keeps what is filled."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return outputs
    merged = OutputTokens(len(outputs))
    for part in gather_objects([(i, outputs[i].tolist()) for i in range(len(outputs)) if len(outputs[i])]):
        for index, ids in part:
            merged.record(index, ids)
    return merged


class WithOwnTargets:
    """A split whose target side is the model's own translations (`OutputTokens`)."""

    def __init__(self, split: BinarizedSplit, outputs: OutputTokens):
        self._split, self.tgt = split, outputs

    def __getattr__(self, name: str):
        return getattr(self._split, name)


class WithContextTargets:
    """A split whose target side is the references, its target-side context cut from the model's
    own translations (`context_tgt`, read by `data/collate.context_tokens`)."""

    def __init__(self, split: BinarizedSplit, outputs: OutputTokens):
        self._split, self.context_tgt = split, outputs

    def __getattr__(self, name: str):
        return getattr(self._split, name)
