"""No reference leak: a model that reads previous TARGET sentences is not tested with references.

In every batch `ctx_tgt` holds the previous *reference* target sentences (`batch.py`): right
for training (teacher forcing), wrong for testing, where a model would read gold translations of
the sentences before the one it translates (test BLEU inflated). So a decoding evaluation loop
(`training/evaluation_loop.py`) and `docmt translate` (`inference/translate.py`) give such a model its own
translations of the previous sentences instead; the loop needs document-order batches for that,
and without them test BLEU is an error naming `data.document_order`. A loss-only validation keeps
the teacher-forced reference context, as in training. Contrastive suites supply their own target
context, so contrastive scoring stays allowed.
"""

from __future__ import annotations

from omegaconf import DictConfig

from lightning_docmt.errors import DocMTInputError

TARGET_SIDES = ("target", "mix")


def reads_reference_target(cfg: DictConfig) -> bool:
    """Whether batches for `cfg` carry previous target sentences (`ctx_tgt`) to the model."""
    return cfg.context.side in TARGET_SIDES and cfg.context.prev_sentences > 0


def check_no_reference_target(cfg: DictConfig, what: str) -> None:
    """A `DocMTInputError` naming `data.document_order` when `what` (test BLEU) would read reference
    target sentences: with document-order batches the evaluation loop reads the model's own
    translations of the previous sentences instead (`inference/document_order.py`), without them it could
    not (a sentence may come before the one it follows)."""
    if reads_reference_target(cfg) and not cfg.data.document_order:
        raise DocMTInputError(
            f"{what} of a model with target-side context (side={cfg.context.side}) reads the "
            f"model's own previous translations, which needs document-order batches: set "
            f"data.document_order=true", key="data.document_order")
