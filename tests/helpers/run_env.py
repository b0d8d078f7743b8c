"""The environment of in-process training runs in tests."""

from __future__ import annotations

import contextlib
from typing import Iterator

import pytest
import torch

from lightning_docmt.training import run as train


@contextlib.contextmanager
def single_process_run_env() -> Iterator[pytest.MonkeyPatch]:
    """One torch thread (a small shared machine), wandb disabled, and no run directory inherited
    from an earlier DDP test; yields the MonkeyPatch for more changes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("WANDB_MODE", "disabled")
            mp.setenv(train.RUN_DIR_VARIABLE, "")
            yield mp
    finally:
        torch.set_num_threads(threads)
