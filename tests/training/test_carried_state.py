"""State carried from sentence to sentence of a document across batches (`CarriedState`,
`Seq2SeqModel.carries_state`).

The fits train the stand-in `CarryingTransformer` (tests/helpers/hook_stand_ins.py: it carries the mean
encoder output of the previous sentence of the same document, `RESET` for a first sentence, and
records per sentence what it received and what it handed on) at the tiny profile on
`synthetic:tiny` in document order. `STEPS` training batches span more than one group of documents,
with a validation in between (documents of different lengths: evaluation rows move up as
documents end); a second fit resumes from the checkpoint after `RESUME_AT` updates.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from lightning_docmt.config.registry import build_model
from lightning_docmt.data.types import Document
from lightning_docmt.data.vocab import WordVocab
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.inference.loaded_model import LoadedModel
from lightning_docmt.inference.translate import explain_selection, translate_documents
from lightning_docmt.nn.carried_state import CarriedState
from lightning_docmt.training import stages
from lightning_docmt.training.module import DocMTModule
from lightning_docmt.training.trainer import MID_EPOCH_RESUME_WARNING
from tests.helpers.hook_stand_ins import CARRYING, RESET, Sentence
from tests.helpers.stage_fits import StepRecorder, fit_then_resume, tiny_config

STEPS, RESUME_AT = 20, 13
CARRYING_RUN = [f"model.arch={CARRYING}", "data.document_order=true", f"train.max_steps={STEPS}",
                "train.val_every_steps=10"]


@pytest.fixture(scope="module")
def carried(tmp_path_factory: pytest.TempPathFactory, hook_archs) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("carry")
    full, resumed = StepRecorder(), StepRecorder()
    fit, resumed_fit = fit_then_resume(tiny_config(root, *CARRYING_RUN), root, full, resumed, RESUME_AT)
    return {"sentences": fit.module.model.sentences, "full": full, "resumed": resumed,
            "resumed_sentences": resumed_fit.module.model.sentences,
            "resumed_warnings": resumed_fit.warnings}


def check_each_sentence_received_its_predecessors_state(sentences: list[Sentence],
                                                        handed_on: dict[tuple[int, int], torch.Tensor]
                                                        ) -> int:
    """Every sentence received exactly what sentence pos - 1 of its document last handed on (in
    `handed_on`, updated as the sentences go by), or the reset value at pos 0; detached.
    Returns how many received a carried state."""
    carried = 0
    for s in sentences:
        assert not s.received_requires_grad
        if s.pos == 0:
            assert torch.all(s.received == RESET), (s.doc, s.pos)
        else:
            assert torch.equal(s.received, handed_on[s.doc, s.pos - 1]), (s.doc, s.pos)
            carried += 1
        handed_on[s.doc, s.pos] = s.handed_on
    return carried


@pytest.mark.fit
def test_each_sentence_receives_its_predecessors_state_or_the_reset_value(carried):
    sentences = carried["sentences"]
    training = [s for s in sentences if s.training]
    evaluation = [s for s in sentences if not s.training]  # sanity check and two validations
    assert check_each_sentence_received_its_predecessors_state(training, {}) > 0
    assert check_each_sentence_received_its_predecessors_state(evaluation, {}) > 0
    assert sum(s.pos == 0 for s in training) > 128  # rows went on to their next documents
    # training starts after the sanity check at position 0; after the validation at step 10 it
    # continues its documents with the training state (checked above), not reset and not the eval one
    after_evaluation = [b for a, b in zip(sentences, sentences[1:]) if not a.training and b.training]
    assert [s.pos > 0 for s in after_evaluation] == [False, True]


@pytest.mark.fit
def test_rows_move_between_batches_so_the_state_is_keyed_by_document(carried):
    """Evaluation batches hold consecutive documents in corpus order, and a document that ended
    drops out: a sentence's predecessor sat in another row of the previous batch. (Training rows
    keep their places: each reads its documents one after another.)"""
    rows: dict[tuple[bool, int, int], int] = {}
    moved = {True: 0, False: 0}
    for s in carried["sentences"]:
        moved[s.training] += s.pos > 0 and rows[s.training, s.doc, s.pos - 1] != s.row
        rows[s.training, s.doc, s.pos] = s.row
    assert moved[False] > 0 and moved[True] == 0


@pytest.mark.fit
def test_a_resumed_fit_continues_with_the_carried_state_to_the_same_weights(carried):
    full, resumed = carried["full"], carried["resumed"]
    first = carried["resumed_sentences"][0]
    assert first.training and first.pos > 0  # resumed in the middle of its documents
    handed_on = {(s.doc, s.pos): s.handed_on for s in carried["sentences"] if s.training}
    resumed_training = [s for s in carried["resumed_sentences"] if s.training]
    assert check_each_sentence_received_its_predecessors_state(resumed_training, handed_on) > 0
    assert all(torch.allclose(resumed.end[k], full.end[k], atol=1e-6, rtol=0) for k in full.end)


@pytest.mark.fit
def test_an_exact_mid_epoch_resume_is_not_called_unreliable(carried):
    """Lightning's warning looks only at the DataLoader object; the resume above is exact."""
    assert not [m for m in carried["resumed_warnings"] if MID_EPOCH_RESUME_WARNING in m]


def test_the_state_follows_documents_whose_rows_move():
    """Documents 5, 7, 9 at positions 0; then 7 and 9 at 1 (5 ended: rows move up); then 9 at 3
    (its position 2 was not trained on) and 11 at 0: reset."""
    state = CarriedState()
    reset = (torch.full((3, 2), -1.0), torch.zeros(3))  # a tuple of batch-first tensors

    def batch(docs: list[int], positions: list[int]) -> dict[str, torch.Tensor]:
        return {"doc_index": torch.tensor(docs), "pos_in_doc": torch.tensor(positions)}

    first = batch([5, 7, 9], [0, 0, 0])
    assert state.rows(first, reset) is reset
    produced = torch.tensor([[5.0, 5.0], [7.0, 7.0], [9.0, 9.0]], requires_grad=True)
    state.keep(first, (produced * 1, produced.sum(1)))
    second = batch([7, 9], [1, 1])
    value, total = state.rows(second, (reset[0][:2], reset[1][:2]))
    assert torch.equal(value, torch.tensor([[7.0, 7.0], [9.0, 9.0]])) and not value.requires_grad
    assert torch.equal(total, torch.tensor([14.0, 18.0]))
    state.keep(second, (value + 1, total))
    value, _ = state.rows(batch([9, 11], [3, 0]), (reset[0][:2], reset[1][:2]))
    assert torch.equal(value, torch.full((2, 2), -1.0))


def test_a_carrying_model_needs_document_order(tmp_path, hook_archs):
    cfg = tiny_config(tmp_path, f"model.arch={CARRYING}")
    with pytest.raises(DocMTInputError, match="data.document_order=true") as err:
        stages.check_stages(cfg)
    assert "key 'data.document_order'" in str(err.value)
    with pytest.raises(DocMTInputError, match="key 'data.document_order'"):
        DocMTModule(OmegaConf.to_container(cfg, resolve=True), 16, 16)


def test_document_order_needs_at_least_one_document_per_batch(tmp_path, hook_archs):
    cfg = tiny_config(tmp_path, f"model.arch={CARRYING}", "data.document_order=true",
                      "data.max_documents=0")
    with pytest.raises(DocMTInputError, match="key 'data.max_documents'"):
        stages.check_stages(cfg)


def test_sentence_by_sentence_inference_of_a_carrying_model_is_refused(tmp_path, hook_archs):
    cfg = tiny_config(tmp_path, f"model.arch={CARRYING}", "data.document_order=true")
    model = LoadedModel(build_model(cfg.model, 16, 16), cfg, WordVocab(["a", "b"]), WordVocab(["a", "b"]))
    documents = [Document("d", ["a", "a"], ["", ""])]
    with pytest.raises(DocMTInputError, match="output_carry"):  # document order, but no output state
        translate_documents(model, documents, beam=1, len_penalty=1.0)
    with pytest.raises(DocMTInputError, match="explaining the context selection"):  # sentences alone
        explain_selection(model, documents)
