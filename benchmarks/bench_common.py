"""What the benchmarks that time models on real batches share (`training_step.py`,
`zhang_efficiency.py`, `peers.py`): the batches of a run config's corpus, a decoder that runs every
hypothesis to the maximum length, and the median/min/max summary of repeated measurements."""

from __future__ import annotations

import statistics
from typing import Callable, Iterable

import torch

from lightning_docmt.batch import EOS_ID, PAD_ID
from lightning_docmt.data.datamodule import DocumentWindowDataModule

Batch = dict[str, torch.Tensor]


def take_batches(loader: Iterable[Batch], limit: Callable[[list[Batch]], bool]) -> list[Batch]:
    """Batches of `loader` until `limit(batches so far)` holds (or the loader ends)."""
    batches: list[Batch] = []
    for batch in loader:
        batches.append(batch)
        if limit(batches):
            break
    return batches


def real_batches(cfg, seed: int, train_batches: int, test_sentences: int
                 ) -> tuple[DocumentWindowDataModule, list[Batch], list[Batch]]:
    """The DataModule of run config `cfg` (prepared: vocabulary and binarized corpus), its first
    `train_batches` training batches, and its first test batches, whole, up to at least
    `test_sentences` sentences: the batches a run of `cfg` trains and decodes."""
    datamodule = DocumentWindowDataModule(cfg.data, cfg.vocab, cfg.context, seed=seed)
    datamodule.prepare_data()
    datamodule.setup("fit")
    train = take_batches(datamodule.train_dataloader(), lambda got: len(got) >= train_batches)
    datamodule.setup("test")
    test = take_batches(datamodule.test_dataloader(),
                        lambda got: sum(len(b["src"]) for b in got) >= test_sentences)
    return datamodule, train, test


def target_tokens(batches: list[Batch]) -> int:
    """Target tokens of `batches` (`tgt_out`, `<eos>` included, padding excluded): what the loss counts."""
    return sum(int(b["tgt_out"].ne(PAD_ID).sum()) for b in batches)


def optimizer_step(loss_sum: torch.Tensor, tokens: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
    """The update of a training step: backward of the per-token loss, the optimizer's step, gradients cleared."""
    (loss_sum / tokens.clamp(min=1)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def spread(values: list[float]) -> dict[str, float]:
    """The median of repeated measurements, with their min and max."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


class FullLengthDecoder:
    """A seq2seq model whose `<eos>` logit is pushed far down (finite, so the forced `<eos>` at the
    maximum length still finishes every hypothesis): all hypotheses run to the maximum length."""

    HELD_BACK = -1e4

    def __init__(self, model):
        self.model = model

    def encode(self, batch: Batch):
        return self.model.encode(batch)

    def init_cache(self, state):
        return self.model.init_cache(state)

    def decode_step(self, tokens: torch.Tensor, state, cache) -> torch.Tensor:
        logits = self.model.decode_step(tokens, state, cache)  # (N, V)
        logits[:, EOS_ID] = self.HELD_BACK
        return logits
