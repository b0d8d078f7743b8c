"""What a model may declare about how it is trained, in plain PyTorch (docs/design.md section 7).

`Seq2SeqModel` (`nn/seq2seq.py`) has three training hooks whose defaults are the shared recipe;
`training.module.DocMTModule` reads them and does the Lightning side:

- `loss_terms(batch, output_loss, phase)` -> `LossTerms`: the loss of a batch. The default is the
  label-smoothed cross entropy of teacher forcing, computed by `output_loss` together with the
  output projection. `phase` is the name of the current `OptimizerPhase` (None: no phases, or
  evaluation), so a model can train each phase on a loss of its own.
- `optimizer_phases(cfg)` -> list of `OptimizerPhase`: several optimizers taking turns (e.g. a
  translator and a hard context selector trained alternately). Empty (the default): one optimizer
  over every trainable parameter.
- `carries_state` / `initial_carry(batch)`: a state passed from each sentence to the next sentence
  of its document, across batches (e.g. the previous sentence's RNN states). The module puts the
  carried rows into `batch[CARRY_KEY]` and takes the next ones from `LossTerms.carry`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional

from torch import Tensor

CARRY_KEY = "carry"  # batch key of the carried state, present only for a model with `carries_state`

OutputLoss = Callable[[Tensor, Tensor], tuple[Tensor, Tensor, Tensor]]
"""(decoder hidden states (B, T, D), target ids (B, T)) -> (label-smoothed loss sum, NLL sum, target
tokens), with the model's `output` projection and the stage's label smoothing (`output_loss.py`)."""


class LossTerms(NamedTuple):
    """The loss of one batch, summed (not averaged) so that the caller normalises it.

    `loss_sum` is what is backpropagated, after division by the target tokens of the optimizer
    step over every rank (`tokens` of each rank, summed). `nll_sum` is logged. `carry` (models with
    `carries_state` only): the state handed to the next sentence of each row's document, batch-first.
    `stats`: scalar diagnostics of the batch by name (e.g. a selector's selection rate), logged as
    `train/<phase>/<name>` (`train/<name>` without phases) to every logger and the run's metrics.
    """

    loss_sum: Tensor
    nll_sum: Tensor
    tokens: Tensor
    carry: Any = None
    stats: Optional[dict[str, Tensor]] = None


@dataclass(frozen=True)
class OptimizerPhase:
    """An optimizer of its own over the trainable parameters whose names match `param_globs`
    (fnmatch), making `steps` consecutive updates before the next phase takes over; after the last
    phase the first one comes again. Phases may share parameters (each keeps its own Adam moments).
    `lr_scale` multiplies the stage's lr for this phase's optimizer."""

    name: str
    param_globs: tuple[str, ...]
    steps: int
    lr_scale: float = 1.0
