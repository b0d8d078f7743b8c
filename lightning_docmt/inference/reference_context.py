"""No reference leak: a model that reads previous TARGET sentences is not tested with references.

In every batch `ctx_tgt` holds the previous *reference* target sentences (`data/batch.py`): right
for training (teacher forcing), wrong for testing, where a model would read gold translations of
the sentences before the one it translates (test BLEU inflated). `docmt translate` decodes such a
model in document order from its own previous translations (`inference/translate.py`); the test
loop does not yet, so test BLEU of such a model is an error naming the key. Contrastive suites
supply their own target context, so contrastive scoring stays allowed.
"""

from __future__ import annotations

from omegaconf import DictConfig

from lightning_docmt.errors import DocMTInputError

TARGET_SIDES = ("target", "mix")


def reads_reference_target(cfg: DictConfig) -> bool:
    """Whether batches for `cfg` carry previous target sentences (`ctx_tgt`) to the model."""
    return cfg.context.side in TARGET_SIDES and cfg.context.prev_sentences > 0


def check_no_reference_target(cfg: DictConfig, what: str) -> None:
    """A `DocMTInputError` naming `context.side` when `what` (test BLEU, translation) would read
    reference target sentences."""
    if reads_reference_target(cfg):
        raise DocMTInputError(
            f"{what} of a model with target-side context would read the reference previous "
            f"sentences (side={cfg.context.side}); the test loop does not yet decode from the "
            f"model's own translations (docmt translate does); score it with contrastive suites "
            f"(docmt contrastive) or translate the test set", key="context.side")
