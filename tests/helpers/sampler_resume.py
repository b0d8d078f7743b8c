"""Interrupting a batch sampler mid-epoch and resuming another from its state (the samplers' tests)."""

from __future__ import annotations

from typing import Callable

from lightning_docmt.data.sampler import ShardedBatchSampler

Batches = list[list[int]]


def interrupt_and_resume(make: Callable[..., ShardedBatchSampler], *, epoch: int, consumed: int
                         ) -> tuple[Batches, Batches, ShardedBatchSampler, dict]:
    """Rank 1 of 2 of `make(seed=5, ...)`: its whole `epoch`, the first `consumed` batches of an
    interrupted copy, a sampler made with seed 0 that loaded the copy's state and was set to
    `epoch` (what Lightning does at the start of the resumed epoch), and that state."""
    reference = make(seed=5, num_replicas=2, rank=1)
    reference.set_epoch(epoch)
    full = list(reference)
    interrupted = make(seed=5, num_replicas=2, rank=1)
    interrupted.set_epoch(epoch)
    it = iter(interrupted)
    head = [next(it) for _ in range(consumed)]
    state = interrupted.state_dict()
    resumed = make(seed=0, num_replicas=2, rank=1)  # seed and epoch come from the state
    resumed.load_state_dict(state)
    resumed.set_epoch(epoch)
    return full, head, resumed, state
