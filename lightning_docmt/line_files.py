"""A run's line files (`test.hyp.txt`, `test.ref.txt`, `valid.hyp.txt`, ...): one sentence a line, plain
as a run writes them, gzip-compressed as the archive of measured runs keeps them
(`tables/archive.py`). Readers take either form, so an archived run reads like a fresh one."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

GZIP_SUFFIX = ".gz"


def compressed_path(path: Path) -> Path:
    """`test.hyp.txt` -> `test.hyp.txt.gz`."""
    return path.with_name(path.name + GZIP_SUFFIX)


def existing_line_file(path: Path) -> Path | None:
    """`path` when it exists, else its compressed form when that exists, else None."""
    for candidate in (path, compressed_path(path)):
        if candidate.is_file():
            return candidate
    return None


def read_lines(path: str | Path) -> list[str]:
    """The lines of `path` (or of `path`.gz), without their newlines; a final empty line is not one."""
    found = existing_line_file(Path(path))
    if found is None:
        raise FileNotFoundError(f"no such file: '{path}' (nor '{compressed_path(Path(path))}')")
    opener = gzip.open if found.suffix == GZIP_SUFFIX else open
    with opener(found, "rt", encoding="utf-8", newline="") as f:
        return f.read().split("\n")[:-1]


def write_compressed(source: Path, target: Path) -> None:
    """gzip `source` into `target` reproducibly: no file name or time in the header, so the same
    text always gives the same bytes (an archive re-written from unchanged runs does not change)."""
    with open(source, "rb") as src, open(target, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as out:
        shutil.copyfileobj(src, out)
