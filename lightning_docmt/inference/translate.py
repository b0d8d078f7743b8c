"""Inference on raw documents with a loaded checkpoint (`docmt translate`, `docmt contrastive`;
`loaded_model.py`), in plain PyTorch: nothing here imports Lightning.

Raw documents are binarized into a temporary cache with the training code path
(`cache.build_cache`, the same windows and collation), so inference sees exactly the context layout
the model was trained on.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import torch

from lightning_docmt.data.cache import BinarizedSplit, build_cache, load_cache
from lightning_docmt.data.collate import collate, row_lengths
from lightning_docmt.data.context_anchors import ContextAnchors
from lightning_docmt.data.doc_sampler import DocumentOrderBatchSampler
from lightning_docmt.data.sampler import TokenBudgetBatchSampler
from lightning_docmt.data.types import Document
from lightning_docmt.data.windows import WindowSpec
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.inference import decoding
from lightning_docmt.inference.document_order import DocumentOrderWalk
from lightning_docmt.inference.loaded_model import LoadedModel
from lightning_docmt.inference.reference_context import reads_reference_target

DOCUMENTS_PER_BATCH = 128  # document-order translation: the documents decoded side by side

def check_sentence_by_sentence(model: LoadedModel, what: str) -> None:
    """A model that hands a state from each sentence to the next (`carries_state`) is run in
    document order only by the test loop (`docmt test`), `translate_documents` and contrastive
    scoring; `what` (the context-usage passes, explaining a selection) takes sentences out of their
    documents, so it is an error naming `model.arch`."""
    if type(model.model).carries_state:
        raise DocMTInputError(f"{what} of a model that carries state from sentence to sentence "
                              f"('{model.cfg.model.arch}') needs document-order decoding, which "
                              f"only the test loop does (docmt test)", key="model.arch")


def binarize_documents(documents: Sequence[Document], model: LoadedModel, directory: Path
                       ) -> BinarizedSplit:
    build_cache(documents, model.src_vocab, model.tgt_vocab, directory, external=model.external,
                retokenised={name: (r.side, r.tokenizer, None) for name, r in model.retokenised.items()})
    return load_cache(directory)


def batches(split: BinarizedSplit, indices: np.ndarray, window: WindowSpec, max_tokens: int,
            device: torch.device, anchors: ContextAnchors | None = None
            ) -> Iterator[dict[str, torch.Tensor]]:
    """Length-sorted token-budget batches of the given sentences (no shuffle, each once), on
    `device`, with the context of `anchors` (None: each sentence's own; `data/context_anchors.py`)."""
    sizes = row_lengths(split, window, indices, anchors)
    sampler = TokenBudgetBatchSampler(indices, sizes, max_tokens, shuffle=False)
    return collated(split, sampler, window, device, anchors)


def collated(split: BinarizedSplit, sampler: Iterable[Sequence[int]], window: WindowSpec,
             device: torch.device, anchors: ContextAnchors | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """The batch of each index list of `sampler`, on `device`, collated when it is asked for."""
    for batch_indices in sampler:
        yield {k: v.to(device) for k, v in collate(split, batch_indices, window, anchors).items()}


@torch.no_grad()
def explain_selection(model: LoadedModel, documents: Sequence[Document]) -> list[dict]:
    """For every sentence, in input order, the context tokens the model's hard selection keeps
    (`Seq2SeqModel.kept_context_tokens`, e.g. Li & Feng's selector): `{"doc_id", "sentence" (its
    index in the document), "context" (the previous source sentences the model reads, as given),
    "kept" (the kept tokens as vocabulary pieces, in order)}`. A model without one is an error."""
    check_sentence_by_sentence(model, "explaining the context selection")
    window = model.window
    with tempfile.TemporaryDirectory() as tmp:
        split = binarize_documents(documents, model, Path(tmp))
        kept: list[list[int]] = [[] for _ in range(split.n_sentences)]
        indices = np.arange(split.n_sentences)
        for batch in batches(split, indices, window, model.cfg.decode.batch_max_tokens, model.device):
            rows = model.model.kept_context_tokens(batch)
            if rows is None:
                raise DocMTInputError(f"model.arch '{model.cfg.model.arch}' selects no context tokens; "
                                      f"--explain needs a model with a hard context selection "
                                      f"(lifeng_coattn)", key="--explain")
            for i, ids in zip(batch["sent_index"].tolist(), rows):
                kept[i] = ids
    explained, start = [], 0
    for doc in documents:
        for j, _ in enumerate(doc.src):
            previous = doc.src[max(0, j - window.prev_src):j]
            explained.append({"doc_id": doc.doc_id, "sentence": j, "context": previous,
                              "kept": [model.src_vocab.piece(t) for t in kept[start + j]]})
        start += len(doc.src)
    return explained


def document_order_batches(split: BinarizedSplit, window: WindowSpec, device: torch.device,
                           max_documents: int = DOCUMENTS_PER_BATCH) -> Iterator[dict[str, torch.Tensor]]:
    """Batches holding sentence j of up to `max_documents` documents, j = 0, 1, ... per group of
    documents (`data/doc_sampler.py`, unshuffled), on `device`."""
    sampler = DocumentOrderBatchSampler(split.doc_offsets, np.arange(split.n_sentences), max_documents,
                                        shuffle=False)
    return collated(split, sampler, window, device)


@torch.no_grad()
def translate_documents(model: LoadedModel, documents: Sequence[Document], *, beam: int,
                        len_penalty: float) -> list[list[str]]:
    """Detokenised translations of every sentence, grouped by document, in input order.

    A model that reads what came before in the target language translates each document in
    order, never reading a reference (`document_order.DocumentOrderWalk`): one with target-side
    context (`ctx_tgt`) reads its own previous translations there, and one that carries a state
    from sentence to sentence (`carries_state`, e.g. the shared-context RNN) reads the state that
    its own translation of sentence j - 1 handed on (`Seq2SeqModel.output_carry`). Other models
    translate length-sorted batches."""
    network = model.model
    with tempfile.TemporaryDirectory() as tmp:
        split = binarize_documents(documents, model, Path(tmp))
        walk = DocumentOrderWalk(network, split, model.window, own_targets=reads_reference_target(model.cfg))
        hyps: list[str] = [""] * split.n_sentences
        if walk.needed:  # sentence j after sentence j - 1 is done
            loader = document_order_batches(split, model.window, model.device)
        else:
            loader = batches(split, np.arange(split.n_sentences), model.window,
                             model.cfg.decode.batch_max_tokens, model.device)
        for batch in loader:
            batch = walk.read(batch)
            translated = decoding.best_tokens(network, batch, model.cfg.decode, beam, len_penalty)
            if not walk.decoded(batch, translated):
                raise DocMTInputError(f"model.arch '{model.cfg.model.arch}' carries a state but "
                                      f"says nothing of what its output hands on (output_carry)",
                                      key="model.arch")
            for i, ids in zip(batch["sent_index"].tolist(), translated):
                hyps[i] = model.tgt_vocab.decode(ids)
        bounds = split.doc_offsets
    return [hyps[bounds[d]:bounds[d + 1]] for d in range(len(documents))]
