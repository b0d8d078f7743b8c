"""What produced a result: the code (a fingerprint of its source, the git commit and whether the
work tree was dirty), the versions of the stack, and the resolved precision, device and threads.

Caches key on it so that a fix to the code never silently reuses what was computed before it: the
stage cache's key includes the code fingerprint and the resolved precision and device
(`training/stages.stage_key`), and a finished table row whose record came from other code is reported
(`tables/runner`). Every run's `metrics.json` carries the record (`ENV_PREFIX` keys), so a number
can be traced to the code and machine settings that produced it.

The fingerprint hashes the package's Python sources (the callbacks included), so it works the
same from a git checkout and from an installed wheel; the git commit is recorded where a checkout
exists, for people to read, but is not what the keys compare.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import subprocess
from pathlib import Path

import torch

import lightning_docmt
from lightning_docmt import callbacks
from lightning_docmt.cpu import cpu_name
from lightning_docmt.distributed import is_global_zero
from lightning_docmt.errors import DocMTInputError

ENV_PREFIX = "env/"  # the provenance entries of metrics.json
FINGERPRINT_VARIABLE = "DOCMT_CODE_FINGERPRINT"  # rank zero's code fingerprint, for its other ranks
SOURCE_ROOTS = (Path(lightning_docmt.__file__).parent, Path(callbacks.__file__).parent)


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 (16 hex digits) over the relative path and bytes of every package source file.

    The ranks of a DDP run key their stages alike only if they run the same code: rank zero leaves
    its fingerprint in `FINGERPRINT_VARIABLE` for the ranks Lightning starts later, and a rank
    whose sources differ (files edited while the run started) stops with an error instead of
    training towards a stage that rank zero never writes."""
    digest = hashlib.sha256()
    for root in SOURCE_ROOTS:
        for path in sorted(root.rglob("*.py")):
            digest.update(f"{root.name}/{path.relative_to(root).as_posix()}\n".encode())
            digest.update(path.read_bytes())
    fingerprint = digest.hexdigest()[:16]
    inherited = os.environ.get(FINGERPRINT_VARIABLE)
    if inherited and inherited != fingerprint and not is_global_zero():
        raise DocMTInputError(f"the package's source files changed after rank zero started (code "
                              f"{inherited} there, {fingerprint} here): relaunch the command")
    os.environ[FINGERPRINT_VARIABLE] = fingerprint
    return fingerprint


@functools.lru_cache(maxsize=1)
def git_state() -> str:
    """`<commit>` or `<commit>+dirty` of the checkout the package runs from; `none` outside git."""
    checkout = Path(lightning_docmt.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "none"
    return f"{commit}+dirty" if dirty else commit


def resolved_device(accelerator: str) -> str:
    """The device a Trainer with `accelerator` runs on: `cpu`, or `cuda:<device name>`."""
    if accelerator != "cpu" and torch.cuda.is_available():
        return f"cuda:{torch.cuda.get_device_name(0)}"
    return "cpu"


def environment_record(precision: str, device: str) -> dict[str, str | float]:
    """The provenance entries of a run's metrics (strings and numbers, `ENV_PREFIX` keys)."""
    import lightning

    return {f"{ENV_PREFIX}{key}": value for key, value in {
        "code": code_fingerprint(), "git": git_state(), "package": lightning_docmt.__version__,
        "python": platform.python_version(), "torch": torch.__version__, "lightning": lightning.__version__,
        "precision": precision, "device": device, "threads": float(torch.get_num_threads()),
        "machine": platform.machine(), "cpu": cpu_name()}.items()}
