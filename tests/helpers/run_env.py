"""The environment of training runs in tests: in-process (`single_process_run_env`), and the variables
that a run in a subprocess must not inherit (`LAUNCH_VARIABLES`)."""

from __future__ import annotations

import contextlib
from typing import Iterator

import pytest
import torch

from lightning_docmt.distributed import RANK_VARIABLES
from lightning_docmt.training import run as train

# Variables of an enclosing launch would make a subprocess believe it is not rank zero.
LAUNCH_VARIABLES = (*RANK_VARIABLES, "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", train.RUN_DIR_VARIABLE)


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
