"""Content-keyed cache directories shared by concurrent processes (DDP ranks, parallel runs).

A cache entry is named by `content_key` of everything that determines its content. It is a
directory that either exists completely or not at all: it is built into a private temporary
sibling and renamed into place, under a file lock so that two processes never build the same
entry twice. Readers never take the lock: a directory that exists is complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Callable

from filelock import FileLock


def content_key(payload: dict) -> str:
    """A short, stable hash of a JSON-able description of a cache entry's inputs."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_once(final: Path, build: Callable[[Path], None]) -> bool:
    """Make sure `final` exists, calling `build(tmp_dir)` at most once across processes.

    Returns True when this call built the directory, False when it already existed.
    """
    final = Path(final)
    if final.is_dir():
        return False
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        if final.is_dir():  # built by another process while we waited for the lock
            return False
        tmp = final.parent / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            build(tmp)
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return True
