"""The batch of one optimizer update: devices x `data.max_tokens` x accumulation (docs/design.md section 7).

A paper states its batch per *update* ("24K words per mini-batch on 4 GPUs", Zhang et al. 2018),
while `data.max_tokens` is a budget per device and per forward pass. `train.tokens_per_update`
states the update's budget directly; the number of batches accumulated per update is then derived
when the Trainer is built, where the world size is known:

    accumulate = ceil(tokens_per_update / (world_size * max_tokens))

so that 24,000 on 4 devices with 6,000 each accumulates 1 batch, and on 1 device 4 batches: the
same update on any hardware. With `tokens_per_update: null`, `train.accumulate` (default 1) is used
as given. The two are exclusive: setting both is an error naming `train.tokens_per_update`.

Unit: the tokens are those of the batch budget (`data/sampler.py`): padded source + every context
tensor + target, counted over the rows of a batch. A budget of 24,000 therefore carries fewer
words of any one side than 24,000 (about half for a sentence model, a quarter for a document model
reading two context sentences as long as the current one); the target tokens an update actually
had are logged as `train/update_tokens`.

Document-order batches (`data.document_order`) have no token budget: a batch holds one sentence
of each of `data.max_documents` documents being read. Their update is described in sentences,
and `train.tokens_per_update` (a budget in tokens) is an error there: set `train.accumulate`.

Lightning counts `val_check_interval` in batches, not updates: with accumulation the interval is
`train.val_every_steps * accumulate` batches, so validation still comes every `val_every_steps`
updates. `max_steps`, `checkpoint_every_steps` and the schedules count updates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import lightning.pytorch as pl
from omegaconf import DictConfig

from lightning_docmt.errors import DocMTInputError


@dataclass(frozen=True)
class UpdateSize:
    world_size: int
    max_tokens: int  # per device and batch
    accumulate: int
    max_documents: int | None = None  # per device and batch, in document order (no token budget)

    @property
    def budget(self) -> int:
        """The token budget of one update, over every device and accumulated batch."""
        return self.world_size * self.max_tokens * self.accumulate

    def record(self) -> dict[str, int]:
        """What a stage's `done.json` keeps of its update."""
        if self.max_documents is not None:
            return {"world_size": self.world_size, "max_documents": self.max_documents,
                    "accumulate": self.accumulate}
        return {"world_size": self.world_size, "max_tokens": self.max_tokens,
                "accumulate": self.accumulate, "budget_tokens": self.budget}

    def describe(self) -> str:
        if self.max_documents is not None:
            return (f"{self.world_size} device(s) x data.max_documents={self.max_documents} x "
                    f"accumulate {self.accumulate} = up to "
                    f"{self.world_size * self.max_documents * self.accumulate} sentences per update "
                    f"(document order: one per document being read)")
        return (f"{self.world_size} device(s) x data.max_tokens={self.max_tokens} x accumulate "
                f"{self.accumulate} = {self.budget} budget tokens per update (padded source + "
                f"context + target)")


def update_size(cfg: DictConfig, world_size: int) -> UpdateSize:
    """The update of run config `cfg` (one stage's, its `data` overrides applied) on `world_size`
    processes."""
    train, max_tokens = cfg.train, int(cfg.data.max_tokens)
    wanted = train.tokens_per_update
    if cfg.data.document_order:
        if wanted is not None:
            raise DocMTInputError(f"train.tokens_per_update={wanted} counts token budgets, which "
                                  f"document-order batches do not have (data.max_documents bounds "
                                  f"them): set it to null and use train.accumulate",
                                  key="train.tokens_per_update")
        return UpdateSize(world_size, max_tokens, int(train.accumulate), int(cfg.data.max_documents))
    if wanted is None:
        return UpdateSize(world_size, max_tokens, int(train.accumulate))
    if train.accumulate != 1:
        raise DocMTInputError(f"train.tokens_per_update={wanted} derives the accumulation; it does "
                              f"not combine with train.accumulate={train.accumulate} (set one of "
                              f"them)", key="train.tokens_per_update")
    one_pass = world_size * max_tokens
    if wanted < one_pass:
        raise DocMTInputError(f"train.tokens_per_update={wanted} is below one batch on every device "
                              f"({world_size} x data.max_tokens={max_tokens} = {one_pass}): lower "
                              f"data.max_tokens to at most {wanted // world_size}",
                              key="train.tokens_per_update")
    return UpdateSize(world_size, max_tokens, math.ceil(wanted / one_pass))


def apply_update_size(trainer: pl.Trainer, cfg: DictConfig) -> UpdateSize:
    """Set `trainer`'s accumulation and validation interval (in batches) from `cfg`.

    Set on the built Trainer because only it knows the world size (`devices: auto`, several nodes);
    Lightning reads both attributes when `fit` starts, not at construction.
    """
    size = update_size(cfg, trainer.world_size)
    trainer.accumulate_grad_batches = size.accumulate
    if cfg.train.val_every_steps:
        trainer.val_check_interval = cfg.train.val_every_steps * size.accumulate
    return size
