"""Speed figures of a run: training throughput (stored with every checkpoint) and decoding speed.

- `speed/train_tokens_per_s`: target tokens (non-padding `tgt_out` tokens, all ranks together) of the
  training batches a stage has run, divided by the seconds of its training loop with validation
  left out (`Stopwatch`, driven by `DocMTModule`'s hooks). Every checkpoint carries the two totals
  at the time it was written (`TRAIN_SPEED_KEY`), so the figure of a stored stage checkpoint (the
  best one, as reused by later runs) is the throughput of the training that led to it. A resumed
  fit counts from the resume point.
- `speed/decode_sents_per_s`: test sentences over the seconds spent in beam search (the slowest
  rank's), logged by the test loop.
"""

from __future__ import annotations

import time
from pathlib import Path

from lightning_docmt.checkpoints import read_checkpoint

TRAIN_SPEED_KEY = "docmt_train_speed"  # {"target_tokens": int, "seconds": float} in a checkpoint
TRAIN_SPEED_METRIC = "speed/train_tokens_per_s"
DECODE_SPEED_METRIC = "speed/decode_sents_per_s"


class Stopwatch:
    """Accumulates the time between `start()` and `stop()` (either is a no-op when repeated)."""

    def __init__(self) -> None:
        self._total = 0.0
        self._since: float | None = None

    def start(self) -> None:
        if self._since is None:
            self._since = time.perf_counter()

    def stop(self) -> None:
        if self._since is not None:
            self._total += time.perf_counter() - self._since
            self._since = None

    @property
    def seconds(self) -> float:
        running = time.perf_counter() - self._since if self._since is not None else 0.0
        return self._total + running


def rate(count: float, seconds: float) -> float:
    """count / seconds, 0 when no time was measured."""
    return count / seconds if seconds > 0 else 0.0


def train_speed_metrics(checkpoint: str | Path) -> dict[str, float]:
    """`{TRAIN_SPEED_METRIC: tokens/s}` of the training stored in a checkpoint; `{}` when the
    checkpoint carries no figure (e.g. one made by `docmt average`)."""
    state = read_checkpoint(checkpoint, mmap=True)
    stored = state.get(TRAIN_SPEED_KEY)
    if not stored:
        return {}
    return {TRAIN_SPEED_METRIC: rate(stored["target_tokens"], stored["seconds"])}
