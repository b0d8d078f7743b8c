"""The device a command runs on (`--device`): `docmt translate`, `test` and `contrastive` run on it,
`docmt fit`, `table` and `config` turn it into the run's `trainer:` settings."""

from __future__ import annotations

import contextlib
import json
from typing import Any, Mapping, Sequence

import torch

from lightning_docmt.errors import DocMTInputError


def parse_device(name: str) -> torch.device:
    """`name` (`cpu`, `cuda`, `cuda:N`) as a torch device, whether or not this machine has it (a
    `docmt table --dry-run` may plan runs for another one). Anything else is a `DocMTInputError`
    naming `--device`."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DocMTInputError(f"'{name}' is not a device (cpu, cuda, cuda:N)", key="--device") from None
    if device.type not in ("cpu", "cuda"):
        raise DocMTInputError(f"'{name}': only cpu and cuda devices are supported", key="--device")
    return device


def inference_device(name: str | None) -> torch.device:
    """`name` as a torch device (`parse_device`) that this machine has; None: CUDA when available,
    else the CPU. A malformed or unavailable device is a `DocMTInputError` naming `--device`."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = parse_device(name)
    if device.type == "cuda":
        available = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (device.index or 0) >= available:
            raise DocMTInputError(f"'{name}' is not available here ({available} CUDA devices)",
                                  key="--device")
    return device


def trainer_settings(device: torch.device) -> dict[str, object]:
    """The `trainer:` keys that run on `device` alone (one process, one device)."""
    accelerator, devices = ("cpu", 1) if device.type == "cpu" else ("gpu", [device.index or 0])
    return {"accelerator": accelerator, "devices": devices, "num_nodes": 1, "strategy": "auto"}


def planned_processes(trainer: Mapping[str, Any]) -> int:
    """How many processes a run with these `trainer:` settings trains in, as Lightning counts them:
    its devices (a count, a list or comma-separated string of indices, or `auto` and -1: every GPU
    here with a GPU accelerator, one process on the CPU) times `num_nodes`."""
    devices = trainer.get("devices", "auto")
    if isinstance(devices, Sequence) and not isinstance(devices, str):
        count = len(devices)
    elif str(devices) in ("auto", "-1"):
        on_gpu = str(trainer.get("accelerator", "auto")) in ("auto", "gpu", "cuda")
        count = max(torch.cuda.device_count() if on_gpu else 0, 1)
    elif "," in str(devices):
        count = len([part for part in str(devices).split(",") if part.strip()])
    else:
        count = int(devices)
    return count * int(trainer.get("num_nodes", 1))


def with_device(overrides: Sequence[str], name: str | None) -> list[str]:
    """`overrides` (`key=value`) followed by the `trainer:` settings of `--device name` (None: the
    overrides alone). An override of a key that the device sets is an error: one of them would be lost."""
    if name is None:
        return list(overrides)
    settings = {f"trainer.{key}": value for key, value in trainer_settings(parse_device(name)).items()}
    clash = [o for o in overrides if o.partition("=")[0].strip() in settings]
    if clash:
        raise DocMTInputError(f"'{clash[0]}' and --device {name} both set it; keep one",
                              key=clash[0].partition("=")[0].strip())
    return [*overrides, *(f"{key}={json.dumps(value)}" for key, value in settings.items())]


def autocast_for(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The autocast a Lightning loop at `precision` (a resolved Lightning value) runs under on
    `device`, for passes outside Lightning that must compute as its test loop does: `bf16-mixed`
    and `16-mixed` autocast to bf16 / fp16; anything else computes in the weights' own dtype."""
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
