"""Context usage of a model that carries a state from sentence to sentence (`carries_state`, the
shared configurations of Yamagishi & Komachi), scored by its own document-order test loop: the
sentence-by-sentence passes of `evaluation/context_usage.py` would take its sentences out of their
documents (docs/design.md section 8).

Per test batch, whose rows hold one sentence of each of several documents with their carried states
attached (`inference/document_order.DocumentOrderWalk`, in `training/evaluation_loop.py`):
- the NLL sums with every row's state replaced by the initial one (no context: the layout of a
  document's first sentence) and by another row's (`other_documents`): a row of a document of
  another collection (another book of the Bible, `data/context_anchors.document_groups`; trap K10)
  where the batch has one, else of another document of the same collection. The share of rows
  that got another collection's state is reported (`random_ctx/other_collection`);
- when the loop decodes, the batch translated again with that other document's state, and once
  more with its own state, its rows in reverse order (the control's noise floor: what another batch
  layout and rounding alone change). Neither is handed on: the next sentence reads the state of
  what was output with the real one.

At the end of the loop these give the metrics of `context_usage.py`, meaning the same
(`METRIC_MEANINGS`): `cxmi`, `random_ctx/cxmi`, `random_ctx/bleu`, `random_ctx/bleu_delta` and
`random_ctx/bleu_floor`. The real and the control decode share the test loop's batches and
precision (trap K11), so a model that ignores its state gets a delta of exactly 0.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from lightning_docmt.nn.model_hooks import CARRY_KEY
from lightning_docmt.nn.seq2seq import Seq2SeqModel, select_rows

Record = tuple[int, int, str]  # (sent_index, doc_index, hypothesis)


def other_rows(groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For rows of collections `groups` (B,): the row whose state each row reads instead of its own
    (the nearest later row, cyclically, of another collection; the next row where every row shares
    one) and whether it is of another collection, both (B,)."""
    rows = groups.numel()
    shifts = torch.arange(1, rows, device=groups.device)  # (B - 1,)
    candidates = (torch.arange(rows, device=groups.device)[:, None] + shifts[None, :]) % rows  # (B, B - 1)
    differs = groups[candidates] != groups[:, None]  # (B, B - 1)
    found = differs.any(1)
    first = torch.where(found, differs.float().argmax(1), torch.zeros_like(found, dtype=torch.long))
    return candidates.gather(1, first[:, None])[:, 0], found


def other_documents(model: Seq2SeqModel, batch: dict[str, Any], groups: torch.Tensor) -> tuple[Any, torch.Tensor]:
    """Every row's carried state replaced by another row's (`other_rows`; a document-order batch
    holds one sentence per document), given each document's collection `groups` (n_documents,);
    the initial state in a batch of one. Also whether each row got another collection's state."""
    carried, rows = batch[CARRY_KEY], batch["src"].size(0)
    if rows == 1:
        return model.initial_carry(batch), torch.zeros(1, dtype=torch.bool)
    donors, other_collection = other_rows(groups.to(batch["doc_index"].device)[batch["doc_index"]])
    return select_rows(carried, donors), other_collection


class CarriedContextUsage:
    """The control passes of one test loop: each batch's NLL with no and with another document's
    state (`nll_sums`, which the loop sums over its batches and ranks), and the hypotheses decoded
    with another document's state."""

    def __init__(self, groups: torch.Tensor):
        self.groups = groups  # (n_documents,) the collection of each document of the split
        self.random_records: list[Record] = []  # decoded with another document's state
        self.again_records: list[Record] = []  # decoded with the real state, rows reversed

    def nll_sums(self, model: Seq2SeqModel, batch: dict[str, Any], output_loss: Callable
                 ) -> dict[str, torch.Tensor | int]:
        """Score `batch` (its real carried rows attached) with the initial and the other state:
        `blank_nll` and `other_nll`, the batch's NLL sums with each; `rows`, its rows, and
        `other_collection`, the rows that got another collection's state."""
        other_state, other_collection = other_documents(model, batch, self.groups)

        def nll(state: Any) -> torch.Tensor:
            return model.loss_terms({**batch, CARRY_KEY: state}, output_loss).nll_sum.detach()

        return {"blank_nll": nll(model.initial_carry(batch)), "other_nll": nll(other_state),
                "rows": other_collection.numel(), "other_collection": other_collection.sum()}

    def add_control_hypotheses(self, model: Seq2SeqModel, batch: dict[str, Any],
                               translate: Callable[[dict[str, Any]], list[str]]) -> None:
        """Translate `batch` (its real carried rows attached) again with another document's state,
        for `random_ctx/bleu`, and with its own state in reverse row order, for
        `random_ctx/bleu_floor` (`translate`: one detokenised hypothesis per row)."""
        rows = (batch["sent_index"].tolist(), batch["doc_index"].tolist())
        hypotheses = translate({**batch, CARRY_KEY: other_documents(model, batch, self.groups)[0]})
        self.random_records += zip(*rows, hypotheses)
        reverse = torch.arange(batch["src"].size(0) - 1, -1, -1, device=batch["src"].device)  # (B,)
        self.again_records += zip(*rows, translate(select_rows(batch, reverse))[::-1])
