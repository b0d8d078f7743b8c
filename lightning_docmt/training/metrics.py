"""The states that `DocMTModule` accumulates over batches and ranks, as `torchmetrics` metrics
(docs/design.md section 7): the library sums them over the ranks when they are computed, and the
module registers them as attributes, so that Lightning moves them to its device with it.

- `Sums`: named sums, each summed over the ranks (`dist_reduce_fx="sum"`): an evaluation loop's
  label-smoothed loss, NLL and target tokens (the token-weighted means over the whole split), the
  carried-state passes' NLL sums and row counts, the trained target tokens of a fit.
- `DecodeSpeed`: beam-search sentences per second, every rank's sentences over the slowest rank's
  seconds.
- `EvaluationMetrics`: the metrics of one validation or test loop, reset when a loop starts.

Their states are not persistent (torchmetrics' default): a checkpoint holds none of them. A state
keeps the dtype it is declared with (`Accumulator`). BLEU, chrF and the other corpus scores are
not metrics here: they are sacreBLEU's, over the hypotheses gathered from every rank
(`evaluation_loop.py`).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torchmetrics import Metric

from lightning_docmt.training.speed import rate


class Accumulator(Metric):
    """A metric whose states keep the dtype they are declared with.

    Lightning's `bf16-true` and `16-true` precisions convert the LightningModule with
    `.to(dtype)`, which torchmetrics applies to metric states too: a loss summed over a split in
    bfloat16 would keep about three significant digits. Device moves still apply.
    """

    full_state_update = False

    def _apply(self, fn: Callable, exclude_state: Any = "") -> Metric:
        declared = {name: default.dtype for name, default in self._defaults.items()}
        this = super()._apply(fn, exclude_state)
        for name, dtype in declared.items():
            this._defaults[name] = this._defaults[name].to(dtype)
            setattr(this, name, getattr(this, name).to(dtype))
        return this


class Sums(Accumulator):
    """Sums by name, each a scalar of `dtype` added to batch by batch (`update(name=value, ...)`)
    and summed over the ranks; `compute()` gives `{name: float}`."""

    def __init__(self, *names: str, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.names = names
        for name in names:
            self.add_state(name, default=torch.zeros((), dtype=dtype), dist_reduce_fx="sum")

    def update(self, **values: torch.Tensor | float) -> None:
        unknown = set(values) - set(self.names)
        if unknown:
            raise KeyError(f"no sum named {sorted(unknown)}; the sums are {list(self.names)}")
        for name, value in values.items():
            getattr(self, name).add_(value)  # in the state's dtype: a float added to an integer sum fails

    def compute(self) -> dict[str, float]:
        return {name: getattr(self, name).item() for name in self.names}


class DecodeSpeed(Accumulator):
    """Sentences per second of beam search: every rank's sentences over the seconds of the slowest
    rank (a rank's seconds summed over its batches, then the largest over the ranks), as a table of
    the decoding's wall-clock time would count them. Both in float64."""

    def __init__(self) -> None:
        super().__init__()
        self.add_state("seconds", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="max")
        self.add_state("sentences", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, seconds: float, sentences: int) -> None:
        self.seconds += seconds
        self.sentences += sentences

    def compute(self) -> float:
        return rate(self.sentences.item(), self.seconds.item())


class EvaluationMetrics(torch.nn.Module):
    """The metrics of one validation or test loop (`evaluation_loop.EvaluationLoop`):

    - `loss`: `Sums` of the label-smoothed loss, the NLL and the target tokens (float32);
    - `decode_speed`: `DecodeSpeed` of its beam search;
    - `carried`: `Sums` of a carrying model's context passes (`evaluation/carried_context.py`):
      the NLL with no carried state and with another document's, the rows scored and the rows
      that got another collection's state (float32).
    """

    def __init__(self) -> None:
        super().__init__()
        self.loss = Sums("loss", "nll", "tokens")
        self.decode_speed = DecodeSpeed()
        self.carried = Sums("blank_nll", "other_nll", "rows", "other_collection")

    def reset(self) -> None:
        """Empty every metric, for a new loop."""
        for metric in (self.loss, self.decode_speed, self.carried):
            metric.reset()
