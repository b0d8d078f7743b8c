"""How much a stage's fresh parameters disturb the model it starts from (docs/design.md section 7).

A stage that adds parameters to a trained model (Zhang's theta_d, Li & Feng's co-attention, a
context RNN's new encoder) changes that model's output before it has learnt anything: Zhang's gate
(Eqs. 21-22) starts at lambda ~ 0.5 and replaces half of the sentence stream with an untrained
context read (reading Z16). `initial_damage` measures it as the teacher-forced validation NLL of
the stage's model at its first update against the NLL of the checkpoint it starts from, in nats per
target token, with dropout off and under the precision the stage trains at. Tables print it as
`initial_damage` beside the stage's results.

A model that carries a state from sentence to sentence (the shared configurations of Yamagishi &
Komachi) is scored as its validation loop scores it: in document order, each sentence reading the
state its document's previous sentence left (`document_order_valid_nll`); the checkpoint it starts
from reads no carried state, and is scored sentence by sentence.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from omegaconf import DictConfig

from lightning_docmt.data.context_anchors import own_context
from lightning_docmt.data.datamodule import DocumentWindowDataModule
from lightning_docmt.evaluation.context_usage import sentence_log_probs
from lightning_docmt.inference.device import autocast_for
from lightning_docmt.inference.loaded_model import LoadedModel, load_checkpoint
from lightning_docmt.training.evaluation_loop import EvaluationLoop
from lightning_docmt.training.module import DocMTModule


def valid_nll(model: LoadedModel, datamodule: DocumentWindowDataModule, precision: str) -> float:
    """Teacher-forced NLL per target token (`<eos>` included) of the valid split, in eval mode."""
    split = datamodule.split("valid")
    training = model.model.training
    model.model.eval()
    try:
        with autocast_for(precision, model.device):
            (scores,) = sentence_log_probs(model, split, [own_context(split.doc_offsets)],
                                           int(model.cfg.data.eval_max_tokens))
    finally:
        model.model.train(training)
    return float(-np.sum(scores.total) / max(int(np.sum(scores.tokens)), 1))


def initial_damage(module: DocMTModule, scfg: DictConfig, datamodule: DocumentWindowDataModule,
                   parent: Path, precision: str) -> dict[str, float]:
    """`{"initial_nll", "parent_nll"}`: the valid NLL of `module` as its stage starts and of the
    `parent` checkpoint it was initialised from."""
    # building the parent's model draws random initial weights: the stage's own draws stay as they were
    with torch.random.fork_rng(devices=[module.device] if module.device.type == "cuda" else []):
        if type(module.model).carries_state:
            start = document_order_valid_nll(module, datamodule, precision)
        else:
            start = valid_nll(LoadedModel(module.model, scfg, datamodule.src_vocab, datamodule.tgt_vocab),
                              datamodule, precision)
        before = load_checkpoint(parent, module.device)
        parent_data = DocumentWindowDataModule(before.cfg.data, before.cfg.vocab, before.cfg.context)
        parent_data.prepare_data()
        parent_data.setup("validate")
        return {"initial_nll": start, "parent_nll": valid_nll(before, parent_data, precision)}


def document_order_valid_nll(module: DocMTModule, datamodule: DocumentWindowDataModule, precision: str) -> float:
    """Teacher-forced NLL per target token of the whole valid split for a model that carries a
    state, computed by the validation loop's own pass (`EvaluationLoop`, no decoding), in eval mode.
    Global rank zero makes it alone: the sums are read from this process, not reduced over ranks."""
    metrics = module.eval_metrics
    loop = EvaluationLoop(module.model, module.cfg, datamodule, "valid", metrics)
    training = module.model.training
    module.model.eval()
    try:
        with torch.no_grad(), autocast_for(precision, module.device):
            for batch in datamodule.whole_eval_loader("valid"):
                loop.step(move_data_to_device(batch, module.device), 0, module.output_loss)
        nll, tokens = float(metrics.loss.nll), float(metrics.loss.tokens)  # this process's sums
    finally:
        module.model.train(training)
        metrics.reset()
    return nll / max(tokens, 1.0)


def first_damage(stage_records: list[dict]) -> dict[str, float]:
    """`initial_damage`: the NLL increase of the first stage (in schedule order) that added
    parameters, from the stages' `done.json` records; empty when none did."""
    for record in stage_records:
        if "initial_nll" in record:
            return {"initial_damage": record["initial_nll"] - record["parent_nll"]}
    return {}
