"""Fixtures shared by tests in more than one folder: pytest finds them here, no test imports them;
the check that every test which fits a model or starts a process carries its marker; and the order
in which the suite is spread over pytest-xdist workers (tests/helpers/scheduling.py).

Fixtures used by the tests of one folder only live in that folder's own module (or conftest.py).
The heavy imports (Lightning, the models) happen inside the fixtures, so that a run of a few
quick tests does not pay for them.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import torch

from lightning_docmt.config.registry import ARCHS, ArchEntry
from tests.helpers import stand_in_archs as stand_ins
from tests.helpers.scheduling import longest_first


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


# ------------------------------------------------ markers of the tests that fit or start processes

# `make test-fast` leaves these out (pyproject.toml); a test without one of them may do neither.
HEAVY_MARKERS = ("slow", "fit", "subprocess")


def _refusal(nodeid: str, what: str, marker: str):
    def refuse(*args, **kwargs):
        pytest.fail(f"{nodeid} {what} but is not marked: add @pytest.mark.{marker} (or mark its module; "
                    f"docs/testing.md) so that `make test-fast` leaves it out", pytrace=False)
    return refuse


@contextlib.contextmanager
def _unmarked_tests_neither_fit_nor_spawn(item: pytest.Item) -> Iterator[None]:
    if any(item.get_closest_marker(name) for name in HEAVY_MARKERS):
        yield
        return
    patches = [(subprocess.Popen, "__init__", "starts a subprocess", "subprocess"),
               (multiprocessing.process.BaseProcess, "start", "starts a process", "subprocess")]
    # Collecting a folder or the suite imports Lightning before any test runs; a lone test module
    # that imports it only inside a test is not checked for fits (importing Lightning here would
    # cost every quick run seconds).
    if "lightning.pytorch" in sys.modules:
        patches.append((sys.modules["lightning.pytorch"].Trainer, "fit", "fits a model", "fit"))
    with pytest.MonkeyPatch.context() as mp:
        for owner, name, what, marker in patches:
            mp.setattr(owner, name, _refusal(item.nodeid, what, marker))
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    """Set-up included: a module-scoped fixture that fits runs in the set-up of its first test."""
    with _unmarked_tests_neither_fit_nor_spawn(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    with _unmarked_tests_neither_fit_nor_spawn(item):
        return (yield)


# ------------------------------------------------ the order of the tests over xdist workers


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    longest_first(items)
