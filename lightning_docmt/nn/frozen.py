"""A module that never trains: `Frozen` (Donato et al. 2021's BERT and PEGASUS context encoders,
docs/papers/donato2021.md section 3: "frozen: outputs computed once per example").

Freezing by `trainable` globs (`callbacks/staged_unfreezing.py`) only stops gradients: Lightning
puts every module in training mode, so a frozen encoder with dropout would still draw dropout
masks, and its features would differ from pass to pass. `Frozen` wraps such a module so that it
stays in evaluation mode whatever `train()` says, runs without building a graph, and has no
trainable parameter.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class Frozen(nn.Module):
    """`module` in evaluation mode, under `torch.no_grad`, its parameters `requires_grad=False`.

    The wrapped module's parameters keep their names under `module.*`, so a checkpoint of the
    encoder loads with its prefix.
    """

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module.requires_grad_(False).eval()

    def train(self, mode: bool = True) -> Frozen:
        """Records `mode` for this wrapper only; the wrapped module stays in evaluation mode."""
        self.training = mode
        self.module.eval()
        return self

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self.module(*args, **kwargs)


def frozen_parameter_names(module: nn.Module) -> set[str]:
    """The names (as `module.named_parameters()` gives them) of the parameters inside `Frozen`
    submodules: a stage's `trainable` globs never make them trainable."""
    return {f"{prefix}.{name}" if prefix else name
            for prefix, sub in module.named_modules() if isinstance(sub, Frozen)
            for name, _ in sub.named_parameters()}
