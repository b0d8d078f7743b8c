"""The suite's spread over pytest-xdist workers (`tests/helpers/scheduling.py`, the Makefile's
`--dist loadfile --no-loadscope-reorder`), on a suite of its own in a temporary folder: the module
of a `slow` test comes first, each module's tests together; a module-scoped fixture that several
tests share is built once under two workers, and twice under xdist's default spread (so the check
can fail; each user of the fixture sleeps USER_SECONDS, so that a worker slow to finish its first
tests still gets some of them under the default spread)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import REPO
from tests.helpers.run_env import subprocess_env

pytestmark = pytest.mark.subprocess


def make_test_spread() -> tuple[str, ...]:
    """The Makefile's PYTEST_PARALLEL, at two workers."""
    line = next(line for line in (REPO / "Makefile").read_text().splitlines() if line.startswith("PYTEST_PARALLEL :="))
    return tuple("2" if arg == "$(TEST_WORKERS)" else arg for arg in line.split(":=", 1)[1].split())


MAKE_TEST_SPREAD = make_test_spread()
CONFTEST = '''\
from tests.helpers.scheduling import longest_first

def pytest_configure(config):
    for marker in ("slow", "fit", "subprocess"):
        config.addinivalue_line("markers", f"{marker}: a cost class")

def pytest_collection_modifyitems(items):
    longest_first(items)
'''
SHARED = '''\
import os
import time
import pytest

def worker():
    return os.environ.get("PYTEST_XDIST_WORKER", "main")

@pytest.fixture(scope="module")
def built():
    with open("builds.txt", "a") as f:
        f.write(worker() + "\\n")
'''
USERS = 8  # xdist's default spread gives each of two workers some of them
USER_SECONDS = 0.5  # xdist hands a busy worker two tests at a time; the other one takes the rest


def suite(folder: Path) -> Path:
    """Three modules in alphabetical order: quick tests, USERS tests of one module fixture, and a
    module with one `slow` test after a quick one."""
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "test_a_quick.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    users = "".join(f"\ndef test_user_{i}(built):\n    time.sleep({USER_SECONDS})\n" for i in range(USERS))
    (folder / "test_b_shared.py").write_text(SHARED + users)
    (folder / "test_c_long.py").write_text("import pytest\n\ndef test_quick():\n    pass\n\n"
                                           "@pytest.mark.slow\ndef test_long():\n    pass\n")
    return folder


def pytest_in(folder: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args], cwd=folder,
                          env=subprocess_env(PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_the_module_of_a_slow_test_comes_first_with_its_tests_in_order(tmp_path):
    listed = [line for line in pytest_in(suite(tmp_path), "--collect-only").split() if "::" in line]
    assert listed == ["test_c_long.py::test_quick", "test_c_long.py::test_long",
                      "test_a_quick.py::test_one", "test_a_quick.py::test_two",
                      *[f"test_b_shared.py::test_user_{i}" for i in range(USERS)]]


@pytest.mark.parametrize("spread", [MAKE_TEST_SPREAD, ("-n", "2")], ids=["make_test", "xdist_default"])
def test_a_module_fixture_is_built_once_in_the_spread_of_make_test(tmp_path, spread):
    folder = suite(tmp_path)
    pytest_in(folder, *spread)
    builds = (folder / "builds.txt").read_text().split()
    assert len(builds) == (1 if spread == MAKE_TEST_SPREAD else 2), builds
