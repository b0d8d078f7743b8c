"""The environment of training runs in tests: in-process (`single_process_run_env`), and in a
subprocess (`subprocess_env`, without the variables it must not inherit, `LAUNCH_VARIABLES`; the
`docmt` command is `DOCMT`)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator

import pytest
import torch

from lightning_docmt.distributed import RANK_VARIABLES
from lightning_docmt.training import run as train
from tests.helpers.paths import REPO

# Variables of an enclosing launch would make a subprocess believe it is not rank zero.
LAUNCH_VARIABLES = (*RANK_VARIABLES, "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", train.RUN_DIR_VARIABLE)
DOCMT = Path(sys.executable).parent / "docmt"  # the console script of this environment


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of a `docmt` command or a script in a subprocess: this repository's package,
    none of an enclosing launch's variables, one thread per process (a small machine), no wandb, no
    Hugging Face network; `extra` added (or replacing those)."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    env.update({"PYTHONPATH": str(REPO), "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                **extra})
    return env


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
