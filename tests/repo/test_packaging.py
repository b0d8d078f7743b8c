"""A non-editable install: the wheel carries the callbacks, experiments and benchmarks inside the
package (no generic top-level `callbacks` package), and `docmt demo` / `docmt bench` find them."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.helpers.experiment_files import EXPERIMENTS, experiment_files
from tests.helpers.paths import REPO

pytestmark = pytest.mark.subprocess


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(REPO)], check=True, capture_output=True, timeout=300)
    (built,) = out.glob("lightning_docmt-*.whl")
    return built


def test_the_wheel_ships_callbacks_experiments_and_benchmarks_inside_the_package(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"lightning_docmt"}
    for shipped in ("lightning_docmt/callbacks/staged_unfreezing.py",
                    "lightning_docmt/callbacks/checkpoint_averaging.py",
                    "lightning_docmt/experiments/demo.yaml",
                    "lightning_docmt/experiments/zhang2018/t8_context_integration.yaml",
                    "lightning_docmt/benchmarks/zhang_efficiency.py",
                    "lightning_docmt/config/profiles/cpu.yaml",
                    "lightning_docmt/config/arch/zhang_doc.yaml"):
        assert shipped in names, shipped
    for init in sorted(REPO.glob("lightning_docmt/**/__init__.py")):  # every subpackage, e.g. pretraining
        assert init.relative_to(REPO).as_posix() in names, init
    repo_yaml = {p.relative_to(EXPERIMENTS).as_posix() for p in experiment_files()}  # the archive stays out
    assert {n.removeprefix("lightning_docmt/experiments/") for n in names
            if n.startswith("lightning_docmt/experiments/") and n.endswith(".yaml")} == repo_yaml


def test_an_installed_docmt_runs_a_benchmark_from_the_package(wheel, tmp_path):
    """A fresh venv that sees the dependencies but not this checkout, with the wheel installed."""
    installed = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # it may hold the checkout
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120,
                   env=installed)
    python = venv / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          env=installed, check=True, capture_output=True, text=True).stdout.strip()
    # the dependencies only: a path line in a .pth file does not run the editable install's finder
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    str(wheel)], env=installed, check=True, capture_output=True, timeout=300)
    work = tmp_path / "work"
    work.mkdir()
    where = subprocess.run([python, "-c", "from lightning_docmt.cli import commands, demo; "
                            "print(demo.DEMO_TABLE); print(commands.BENCHMARKS)"],
                           cwd=work, env=installed, check=True, capture_output=True, text=True).stdout.split()
    assert all(Path(p).exists() and Path(p).is_relative_to(site) for p in where), where
    done = subprocess.run([venv / "bin" / "docmt", "bench", "--only", "data_scale", "--smoke"],
                          cwd=work, env=installed, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (work / ".cache" / "bench-data").is_dir()  # written where the user is, not into the install
