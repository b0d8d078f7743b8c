"""Fixtures shared by tests in more than one folder: pytest finds them here, no test imports them.

Fixtures used by the tests of one folder only live in that folder's own module (or conftest.py).
The heavy imports (Lightning, the models) happen inside the fixtures, so that a run of a few
quick tests does not pay for them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
import torch

from lightning_docmt.registry import ARCHS, ArchEntry
from tests.helpers import stand_in_archs as stand_ins


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The working directory of the module (for `docmt` runs in-process, tests/helpers/cli_run.py),
    one torch thread (a small shared machine), and no leftover DDP run directory from other tests."""
    from lightning_docmt.training import run as train

    tmp = tmp_path_factory.mktemp("e2e")
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        mp.setenv("WANDB_MODE", "disabled")
        mp.setenv(train.RUN_DIR_VARIABLE, "")
        torch.set_num_threads(1)
        yield tmp
        torch.set_num_threads(threads)


@pytest.fixture
def stand_in_archs(monkeypatch: pytest.MonkeyPatch) -> dict[str, ArchEntry]:
    """The config-only stand-in architectures (tests/helpers/stand_in_archs.py), registered for one
    test."""
    for name, entry in stand_ins.ENTRIES.items():
        monkeypatch.setitem(ARCHS, name, entry)
    return stand_ins.ENTRIES


@pytest.fixture(scope="module")
def hook_archs() -> Iterator[dict[str, ArchEntry]]:
    """The stand-ins that use the training hooks (tests/helpers/hook_stand_ins.py), registered for
    the tests of a module."""
    from tests.helpers.hook_stand_ins import ENTRIES

    with pytest.MonkeyPatch.context() as mp:
        for name, entry in ENTRIES.items():
            mp.setitem(ARCHS, name, entry)
        yield ENTRIES
