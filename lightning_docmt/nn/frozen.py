"""A module that never trains: `Frozen` (Donato et al. 2021's BERT and PEGASUS context encoders,
docs/papers/donato2021.md section 3: "frozen: outputs computed once per example").

Freezing by `trainable` globs (`callbacks/staged_unfreezing.py`) only stops gradients: Lightning
puts every module in training mode, so a frozen encoder with dropout would still draw dropout
masks, and its features would differ from pass to pass. `Frozen` wraps such a module so that it
stays in evaluation mode whatever `train()` says, runs without building a graph, and has no
trainable parameter.

`FrozenRowEncoder` also remembers what it computed: an encoder that never changes gives a row the
same features every time, so each distinct row (its ids and token types) is encoded once per
process and read back afterwards. Training reads each sentence's rows once per epoch, so later
epochs cost no encoder pass; a control's rows (no context, another book's context) are other
contents and are encoded for themselves, so a control never reads the real context's features.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Iterator

import torch
from torch import Tensor, nn


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


DEFAULT_CACHE_BYTES = 4 << 30  # features kept per encoder; rows beyond it are encoded every time


class FrozenRowEncoder(Frozen):
    """A `Frozen` encoder of padded rows, `module(tokens, types, pad) -> (B, L, W)` states, whose
    outputs are kept by row content (module docstring).

    A row's key is a digest of its real ids and token types; its features are kept on the CPU in the
    dtype the consumer computes in (bfloat16 under a bfloat16 autocast, where the next linear layer
    casts to it anyway; else the output's), at most `max_bytes` of them. Loading weights (a state dict
    or `reset`) forgets them all. Padded positions of the output are zero.
    """

    def __init__(self, module: nn.Module, max_bytes: int = DEFAULT_CACHE_BYTES):
        super().__init__(module)
        self.max_bytes = max_bytes
        self.features: dict[bytes, Tensor] = {}
        self.cached_bytes = 0
        self.encoded_rows = 0  # rows the module computed (a miss each), for tests and logs
        self.register_load_state_dict_post_hook(lambda module, keys: module.reset())

    def reset(self) -> None:
        """Forget every kept feature (the weights changed)."""
        self.features.clear()
        self.cached_bytes = 0

    @staticmethod
    def row_key(tokens: Tensor, types: Tensor, dtype: torch.dtype) -> bytes:
        """Digest of one unpadded row's ids and types, and of the dtype its features are kept in."""
        digest = hashlib.blake2b(str(dtype).encode(), digest_size=16)
        digest.update(tokens.cpu().numpy().tobytes())
        digest.update(types.cpu().numpy().tobytes())
        return digest.digest()

    def forward(self, tokens: Tensor, types: Tensor, pad: Tensor) -> Tensor:
        """tokens, types (B, L), pad (B, L) bool (True = padding) -> (B, L, W)."""
        device = tokens.device
        dtype = (torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type)
                 else None)  # None: the module's own output dtype
        lengths = (~pad).sum(1).tolist()
        keys = [self.row_key(tokens[b, :n], types[b, :n], dtype) for b, n in enumerate(lengths)]
        missing = [b for b, key in enumerate(keys) if key not in self.features]
        fresh: dict[int, Tensor] = {}
        if missing:
            index = torch.tensor(missing, device=device)
            width = max(lengths[b] for b in missing)
            with torch.no_grad():
                states = self.module(tokens[index, :width], types[index, :width], pad[index, :width])  # (M, L', W)
            self.encoded_rows += len(missing)
            for row, b in enumerate(missing):
                fresh[b] = states[row, :lengths[b]].to(dtype or states.dtype)
                self._keep(keys[b], fresh[b])
        rows = [fresh[b] if b in fresh else self.features[keys[b]].to(device) for b in range(len(keys))]
        out = rows[0].new_zeros(len(rows), tokens.size(1), rows[0].size(-1))  # (B, L, W)
        for b, row in enumerate(rows):
            out[b, :row.size(0)] = row
        return out

    def _keep(self, key: bytes, row: Tensor) -> None:
        size = row.numel() * row.element_size()
        if self.cached_bytes + size <= self.max_bytes:
            self.features[key] = row.detach().cpu()
            self.cached_bytes += size


def _names_inside_frozen(module: nn.Module, members: Callable[[nn.Module], Iterator[tuple[str, Any]]]) -> set[str]:
    """The names, as `module` names them, of what `members(sub)` yields (a `named_*` method's pairs)
    for each `Frozen` submodule `sub`, the submodule itself left out."""
    return {f"{prefix}.{name}" if prefix else name
            for prefix, sub in module.named_modules() if isinstance(sub, Frozen)
            for name, _ in members(sub) if name}


def frozen_parameter_names(module: nn.Module) -> set[str]:
    """The names (as `module.named_parameters()` gives them) of the parameters inside `Frozen`
    submodules: a stage's `trainable` globs never make them trainable."""
    return _names_inside_frozen(module, nn.Module.named_parameters)


def unfrozen_modules_in_eval(module: nn.Module) -> list[str]:
    """The names of `module`'s submodules in evaluation mode that no `Frozen` holds: a `Frozen`'s
    module is in evaluation mode on purpose (Lightning warns of every such module at the start of
    training; the suite warns of these only, `training/module.py`)."""
    inside_frozen = _names_inside_frozen(module, nn.Module.named_modules)
    return [name for name, sub in module.named_modules() if not sub.training and name not in inside_frozen]
