"""Fixtures shared by tests in more than one folder; pytest finds them here without imports."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
import torch

from lightning_docmt.training import run as train


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The working directory of the module (for `docmt` runs in-process, tests/helpers/cli_run.py),
    one torch thread (a small shared machine), and no leftover DDP run directory from other tests."""
    tmp = tmp_path_factory.mktemp("e2e")
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        mp.setenv("WANDB_MODE", "disabled")
        mp.setenv(train.RUN_DIR_VARIABLE, "")
        torch.set_num_threads(1)
        yield tmp
        torch.set_num_threads(threads)
