"""Context usage of a model that carries a state from sentence to sentence (`carries_state`, the
shared configurations of Yamagishi & Komachi), scored by its own document-order test loop: the
sentence-by-sentence passes of `evaluation/context_usage.py` would take its sentences out of their
documents (docs/design.md section 8).

Per test batch, whose rows hold one sentence of each of several documents with their carried states
attached (`DocMTModule.batch_terms`):
- the NLL sums with every row's state replaced by the initial one (no context: the layout of a
  document's first sentence) and by another row's, i.e. another document's (`other_documents`);
- when the loop decodes, the batch translated again with that other document's state. The control
  is not handed on: the next sentence reads the state of what was output with the real one.

At the end of the loop these give the metrics of `context_usage.py`, meaning the same
(`METRIC_MEANINGS`): `cxmi`, `random_ctx/cxmi`, `random_ctx/bleu` and `random_ctx/bleu_delta`.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from lightning_docmt.nn.seq2seq import Seq2SeqModel, select_rows
from lightning_docmt.nn.training_hooks import CARRY_KEY

Record = tuple[int, int, str]  # (sent_index, doc_index, hypothesis)


def other_documents(model: Seq2SeqModel, batch: dict[str, Any]) -> Any:
    """Every row's carried state replaced by the next row's, which belongs to another document (a
    document-order batch holds one sentence per document); the initial state in a batch of one."""
    carried, rows = batch[CARRY_KEY], batch["src"].size(0)
    if rows == 1:
        return model.initial_carry(batch)
    return select_rows(carried, torch.arange(1, rows + 1, device=batch["src"].device) % rows)


class CarriedContextUsage:
    """The sums of one test loop: NLL with no and with another document's state, and the
    hypotheses decoded with another document's state."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.nll = torch.zeros(2, device=device)  # NLL sums: no carried state, another document's
        self.random_records: list[Record] = []

    def add_nll(self, model: Seq2SeqModel, batch: dict[str, Any], output_loss: Callable) -> None:
        """Score `batch` (its real carried rows attached) with the initial and the other state."""
        for i, state in enumerate((model.initial_carry(batch), other_documents(model, batch))):
            terms = model.loss_terms({**batch, CARRY_KEY: state}, output_loss)
            self.nll[i] += terms.nll_sum.detach()

    def add_random_hypotheses(self, model: Seq2SeqModel, batch: dict[str, Any],
                              translate: Callable[[dict[str, Any]], list[str]]) -> None:
        """Translate `batch` again with another document's state (`translate`: one detokenised
        hypothesis per row), for `random_ctx/bleu`."""
        hypotheses = translate({**batch, CARRY_KEY: other_documents(model, batch)})
        self.random_records += zip(batch["sent_index"].tolist(), batch["doc_index"].tolist(), hypotheses)
