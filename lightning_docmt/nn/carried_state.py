"""What a model with `carries_state` hands from each sentence to the next one of its document
(`CarriedState`), and the tensor-structure helpers it needs (`map_tensors`, `plain`).

Plain PyTorch: the training loop (`training/module.py`), the document-order walk of evaluation and
inference (`inference/document_order.py`) and contrastive scoring keep the state with the same class.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
from torch import Tensor

from lightning_docmt.nn.model_hooks import CARRY_KEY
from lightning_docmt.nn.seq2seq import select_rows


def map_tensors(fn: Callable[..., Tensor], value: Any, *others: Any) -> Any:
    """`fn` applied to the tensors of `value` (tensors, dataclasses, dicts, lists, tuples), each with
    the tensors at the same place in `others`, which have `value`'s structure (a dataclass's place
    may also hold its `plain` form, a dict of its fields)."""
    if isinstance(value, Tensor):
        return fn(value, *others)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        def field_of(other: Any, name: str) -> Any:
            return other[name] if isinstance(other, dict) else getattr(other, name)

        return dataclasses.replace(value, **{
            f.name: map_tensors(fn, getattr(value, f.name), *(field_of(o, f.name) for o in others))
            for f in dataclasses.fields(value) if f.init})
    if isinstance(value, dict):
        return {k: map_tensors(fn, v, *(o[k] for o in others)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(map_tensors(fn, *items) for items in zip(value, *others))
    return value


def plain(value: Any) -> Any:
    """`value` with every dataclass replaced by a dict of its fields, recursively: what a checkpoint
    may hold (`checkpoints.py` loads plain containers and tensors only)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    return value


class CarriedState:
    """What a model with `carries_state` hands from each sentence to the next one of its document,
    across the batches of one loop (training, or evaluation).

    Document-order batches (`data/doc_sampler.py`) put a document's next sentence in the next
    batch, but not always in the same row. In training, a row reads documents one after another
    (a new document starts where the last one ended) and rows keep their places. In evaluation,
    batch j holds sentence j of every document of a group, so a document that ends drops out and
    the rows after it move up, and a new group brings other documents. The state is therefore
    keyed by `doc_index`, not by row: a row receives the state
    that the previous batch's row of the same document, one position earlier (`pos_in_doc` - 1),
    produced; every other row receives the model's `initial_carry`. That resets the first sentence
    of each document (`pos_in_doc == 0`), a sentence whose previous sentence was not trained on
    (over-long, see `cache.py`), and whatever follows a `clear`. A document's sentences never
    follow each other across an epoch boundary or a replay (they restart at its first sentence),
    so the training state needs no clearing there. The state is kept detached: no gradient flows
    from one batch into the previous one.
    """

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self._docs: Tensor | None = None  # (B',) doc_index of the previous batch's rows
        self._positions: Tensor | None = None  # (B',) their pos_in_doc
        self._value: Any = None  # the state they produced, batch-first (B', ...)

    def rows(self, batch: dict[str, Tensor], initial: Any) -> Any:
        """The state for every row of `batch`; `initial`: the model's `initial_carry(batch)`."""
        if self._value is None:
            return initial
        docs, positions = batch["doc_index"], batch["pos_in_doc"]  # (B,)
        prev_docs, prev_positions, prev_value = map_tensors(  # from a checkpoint: on the CPU
            lambda t: t.to(docs.device), (self._docs, self._positions, self._value))
        follows = (docs[:, None].eq(prev_docs[None])
                   & positions[:, None].eq(prev_positions[None] + 1))  # (B, B'): row i follows row k
        found = follows.any(dim=1)  # (B,)
        carried = select_rows(prev_value, follows.int().argmax(dim=1))  # (B, ...) where found

        def where_found(reset: Tensor, kept: Tensor) -> Tensor:
            return torch.where(found.view(-1, *[1] * (kept.dim() - 1)), kept, reset)  # (B, ...)

        return map_tensors(where_found, initial, carried)  # the model's structure (from a checkpoint: plain)

    def attach(self, batch: dict[str, Tensor], model: Any) -> dict[str, Any]:
        """`batch` with every row's carried state under `CARRY_KEY` (`rows`, with the `model`'s
        `initial_carry` where none is carried): what the model reads."""
        return {**batch, CARRY_KEY: self.rows(batch, model.initial_carry(batch))}

    def keep(self, batch: dict[str, Tensor], value: Any) -> None:
        """Remember the state `value` that the rows of `batch` hand to their next sentences."""
        self._docs, self._positions = batch["doc_index"], batch["pos_in_doc"]
        self._value = map_tensors(Tensor.detach, value)

    def handed_on(self, doc_index: int, pos_in_doc: int) -> Any:
        """The state that sentence `pos_in_doc` of document `doc_index` handed on, one row
        (batch-first), when the batch kept last holds it; else None."""
        if self._value is None:
            return None
        found = (self._docs.eq(doc_index) & self._positions.eq(pos_in_doc)).nonzero().flatten()
        return select_rows(self._value, found[:1]) if found.numel() else None

    def hand_to(self, doc_index: int, pos_in_doc: int, value: Any) -> None:
        """Make `value` (one row, as `handed_on` gives it) the state that sentence `pos_in_doc` + 1
        of document `doc_index` reads, and forget any other: a walk that goes on where another
        one stopped (`docmt translate` reads a long document in pieces)."""
        self._docs, self._positions = torch.tensor([doc_index]), torch.tensor([pos_in_doc])
        self._value = map_tensors(Tensor.detach, value)

    def state_dict(self) -> dict[str, Any]:
        """The state on the CPU, dataclasses as plain dicts (for checkpoints)."""
        return plain(map_tensors(Tensor.cpu, {"docs": self._docs, "positions": self._positions,
                                              "value": self._value}))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._docs, self._positions, self._value = state["docs"], state["positions"], state["value"]
