"""The device that `docmt translate`, `test` and `contrastive` run on (`--device`)."""

from __future__ import annotations

import contextlib

import torch

from lightning_docmt.errors import DocMTInputError


def inference_device(name: str | None) -> torch.device:
    """`name` as a torch device (`cpu`, `cuda`, `cuda:N`); None: CUDA when available, else the CPU.
    A malformed or unavailable device is a `DocMTInputError` naming `--device`."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DocMTInputError(f"'{name}' is not a device (cpu, cuda, cuda:N)", key="--device") from None
    if device.type not in ("cpu", "cuda"):
        raise DocMTInputError(f"'{name}': only cpu and cuda devices are supported", key="--device")
    if device.type == "cuda":
        available = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (device.index or 0) >= available:
            raise DocMTInputError(f"'{name}' is not available here ({available} CUDA devices)",
                                  key="--device")
    return device


def trainer_settings(device: torch.device) -> dict[str, object]:
    """The `trainer:` keys that run a test loop on `device` alone."""
    accelerator, devices = ("cpu", 1) if device.type == "cpu" else ("gpu", [device.index or 0])
    return {"accelerator": accelerator, "devices": devices, "num_nodes": 1, "strategy": "auto"}


def autocast_for(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The autocast a Lightning loop at `precision` (a resolved Lightning value) runs under on
    `device`, for passes outside Lightning that must compute as its test loop does: `bf16-mixed`
    and `16-mixed` autocast to bf16 / fp16; anything else computes in the weights' own dtype."""
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
