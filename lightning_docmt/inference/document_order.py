"""The one walk through documents in order: what each sentence reads of the sentences before it.

Two kinds of model read what came before in the target language (docs/design.md section 8):
- a model with target-side context (`ctx_tgt`) must read its *own* previous translations when it
  decodes, not the references (`reference_context.reads_reference_target`);
- a model that carries a state from sentence to sentence (`Seq2SeqModel.carries_state`, the shared
  configurations of Yamagishi & Komachi) reads the state its previous sentence handed on.

Both need document-order batches (`data/doc_sampler.py`: batch j holds sentence j of every document
of a group, so a sentence's predecessors are done before it). `DocumentOrderWalk` keeps, for one
loop over a split, the model's translations so far (`own_outputs.OutputTokens`) and the carried
state (`nn/carried_state.CarriedState`), and is the only place that attaches them to a batch and
takes them back. Its users: the test and validation loops (`training/module.py`), `docmt translate`
(`inference/translate.py`) and contrastive scoring of a carrying model (`evaluation/contrastive_scoring.py`).

The rule it keeps: when the loop decodes, the next sentence reads what was *output* (its own
`ctx_tgt`; the model's `output_carry` of the 1-best hypotheses where the state depends on the
target); when the loop only scores (teacher forcing: validation loss, contrastive scoring), the
state handed on is the teacher-forced one of `loss_terms`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from torch import Tensor

from lightning_docmt.data.cache import BinarizedSplit
from lightning_docmt.data.collate import collate
from lightning_docmt.data.windows import WindowSpec
from lightning_docmt.inference.own_outputs import OutputTokens, WithOwnTargets
from lightning_docmt.nn.carried_state import CarriedState
from lightning_docmt.nn.seq2seq import Seq2SeqModel


class DocumentOrderWalk:
    """One loop's walk through the documents of `split` in order (see the module docstring).

    `own_targets`: the model reads `ctx_tgt` and decodes, so its translations become that context.
    A walk that `needed` is False (a model that reads neither) changes nothing and may be skipped.
    """

    def __init__(self, model: Seq2SeqModel, split: BinarizedSplit, window: WindowSpec, *, own_targets: bool):
        self.model = model
        self.window = window
        self.carried = CarriedState() if type(model).carries_state else None
        self.outputs = OutputTokens(split.n_sentences) if own_targets else None
        self._own_split = WithOwnTargets(split, self.outputs) if own_targets else None

    @property
    def needed(self) -> bool:
        return self.carried is not None or self.outputs is not None

    def read(self, batch: dict[str, Tensor], decoding: bool = True) -> dict[str, Any]:
        """`batch` with what its sentences read of their predecessors: `ctx_tgt` (and its segment
        ids) cut from the model's own translations when the loop decodes, and the carried state of
        each row (`CARRY_KEY`; the model's `initial_carry` where a document starts)."""
        if self.outputs is not None and decoding:
            rows = collate(self._own_split, batch["sent_index"].tolist(), self.window)
            batch = {**batch, **{key: rows[key].to(batch["src"].device) for key in ("ctx_tgt", "ctx_tgt_seg")}}
        if self.carried is not None:
            batch = self.carried.attach(batch, self.model)
        return batch

    def resume(self, doc_index: int, pos_in_doc: int, carry: Any,
               outputs: Mapping[int, Sequence[int]]) -> None:
        """Go on where an earlier walk stopped, before sentence `pos_in_doc` of document
        `doc_index` (`docmt translate` walks a long document one piece at a time, the piece
        starting with the sentences its context reads): `outputs` maps sentences of this walk's
        split to the ids the earlier walk output for them, and `carry` is the state the sentence
        before `pos_in_doc` handed on (the earlier walk's `handed_on`; None: none)."""
        if self.outputs is not None:
            for sent, ids in outputs.items():
                self.outputs.record(sent, ids)
        if self.carried is not None and carry is not None:
            self.carried.hand_to(doc_index, pos_in_doc - 1, carry)

    def handed_on(self, doc_index: int, pos_in_doc: int) -> Any:
        """Right after `decoded` of the batch holding that sentence: the state it hands on (None
        for a model that carries none)."""
        return None if self.carried is None else self.carried.handed_on(doc_index, pos_in_doc)

    def hand_on(self, batch: dict[str, Any], carry: Any) -> None:
        """Teacher forcing: the state `loss_terms` computed (`LossTerms.carry`) goes to the next sentences."""
        if self.carried is not None:
            self.carried.keep(batch, carry)

    def decoded(self, batch: dict[str, Any], hypotheses: list[list[int]]) -> bool:
        """Decoding: record the rows' 1-best `hypotheses` (token ids) as their translations and hand
        on the state of what was output (`output_carry`). False when the model carries a state but
        says nothing of what its output hands on (the teacher-forced state, if any, then stands)."""
        if self.outputs is not None:
            for sent, ids in zip(batch["sent_index"].tolist(), hypotheses):
                self.outputs.record(sent, ids)
        if self.carried is None:
            return True
        carry = self.model.output_carry(batch, hypotheses)
        if carry is None:
            return False
        self.carried.keep(batch, carry)
        return True
