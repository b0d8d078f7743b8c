"""Contrastive evaluation (DESIGN.md section 8): does the model prefer the correct candidate?

Each candidate of an example becomes a small document whose last sentence is (`src`, candidate) and
whose earlier sentences are the example's `src_context` / `tgt_context` (the shorter side padded
with empty sentences at the far end), so the model reads its context through the very window and
collation code used in training. The score of a candidate is the summed log-probability of its
tokens (plus `<eos>`) given the source and the context.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from lightning_docmt import metrics
from lightning_docmt.data.types import Document
from lightning_docmt.inference import LoadedModel, batches, binarize_documents
from lightning_docmt.scoring import sequence_log_probs


def candidate_documents(examples: Sequence[dict]) -> tuple[list[Document], list[tuple[int, int]]]:
    """One document per (example, candidate); returns them and their (example, candidate) ids."""
    documents, owners = [], []
    for e, example in enumerate(examples):
        n = max(len(example["src_context"]), len(example["tgt_context"]))
        src_ctx = [""] * (n - len(example["src_context"])) + list(example["src_context"])
        tgt_ctx = [""] * (n - len(example["tgt_context"])) + list(example["tgt_context"])
        for c, candidate in enumerate(example["candidates"]):
            documents.append(Document(f"{example['id']}#{c}", [*src_ctx, example["src"]],
                                      [*tgt_ctx, candidate]))
            owners.append((e, c))
    return documents, owners


@torch.no_grad()
def score_suite(model: LoadedModel, examples: Sequence[dict], max_tokens: int = 8192
                ) -> list[list[float]]:
    """Log-probability of every candidate of every example."""
    documents, owners = candidate_documents(examples)
    scores: list[list[float]] = [[0.0] * len(ex["candidates"]) for ex in examples]
    with tempfile.TemporaryDirectory() as tmp:
        split = binarize_documents(documents, model, Path(tmp))
        last = np.asarray(split.doc_offsets[1:], dtype=np.int64) - 1  # the scored sentences
        doc_of_sentence = {int(s): d for d, s in enumerate(last)}
        for batch in batches(split, last, model.window, max_tokens):
            logp = sequence_log_probs(model.module.model, batch)
            for s, value in zip(batch["sent_index"].tolist(), logp.tolist()):
                e, c = owners[doc_of_sentence[s]]
                scores[e][c] = value
    return scores


def evaluate_suite(model: LoadedModel, examples: Sequence[dict]) -> dict[str, Any]:
    """`{"accuracy", "n", "by_phenomenon"}` of a loaded model on a contrastive suite."""
    scores = score_suite(model, examples)
    return metrics.contrastive_accuracy(scores, [ex["label"] for ex in examples],
                                        [ex.get("phenomenon", "all") for ex in examples])
