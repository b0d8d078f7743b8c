"""The learning tests' fixtures: one workspace per module, the suite's context-free bounds."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.helpers.run_env import single_process_run_env
from tests.learning.learning_checks import context_free_bounds


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with single_process_run_env():
        yield tmp_path_factory.mktemp("learning")


@pytest.fixture(scope="module")
def ceiling() -> dict[str, float]:
    return context_free_bounds()
