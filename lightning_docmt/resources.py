"""Folders of the repository that ship inside the package: `experiments/` and `benchmarks/`.

An installed wheel carries them as `lightning_docmt/experiments` and `lightning_docmt/benchmarks`
(`pyproject.toml` maps them there); a source checkout has them beside the package.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def shipped_dir(name: str) -> Path:
    """The folder `name` (`experiments` or `benchmarks`) of an installed package or of a checkout."""
    installed = PACKAGE_DIR / name
    return installed if installed.is_dir() else PACKAGE_DIR.parent / name
