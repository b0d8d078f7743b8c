"""Validation shared by the corpus readers: one clear error naming file, line or doc id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from lightning_docmt.data.types import Document
from lightning_docmt.errors import DocMTInputError


def open_text(path: str | Path) -> Iterator[str]:
    """Yield the lines of a UTF-8 file without line terminators (LF or CRLF).

    Undecodable bytes raise DocMTInputError naming the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise DocMTInputError("no such file", path=path)
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DocMTInputError(
                    f"undecodable bytes at column {err.start + 1} (not UTF-8)", path=path, line=lineno
                ) from None
            yield text.rstrip("\r\n")


def check_document(doc: Document, *, path: str | Path, line: int | None = None) -> None:
    """Unequal sentence counts and empty documents are errors, never silently fixed."""
    if len(doc.src) != len(doc.tgt):
        raise DocMTInputError(
            f"document '{doc.doc_id}' has {len(doc.src)} source but {len(doc.tgt)} target sentences",
            path=path, line=line,
        )
    if not doc.src:
        raise DocMTInputError(f"document '{doc.doc_id}' is empty", path=path, line=line)


def parallel_lines(*paths: str | Path) -> Iterator[tuple[int, tuple[str, ...]]]:
    """Yield `(line number, (line of each file))` over line-parallel files.

    A file that ends before the others raises DocMTInputError naming it and the first missing line.
    """
    iterators = [open_text(p) for p in paths]
    lineno = 0
    while True:
        lineno += 1
        row = [next(it, None) for it in iterators]
        if all(line is None for line in row):
            return
        if any(line is None for line in row):
            short = paths[row.index(None)]
            longer = next(p for p, line in zip(paths, row) if line is not None)
            raise DocMTInputError(f"file ends before line {lineno} but {longer} goes on "
                                  "(the files must be line-parallel)", path=short, line=lineno)
        yield lineno, tuple(row)  # type: ignore[arg-type]


def normalize_space(text: str) -> str:
    """Collapse runs of whitespace to one space and strip both ends."""
    return " ".join(text.split())


EMPTY_PAIR = "empty_pair"


def keep_pair(src: str, tgt: str, skipped: dict[str, int]) -> bool:
    """The readers' rule for empty sentences: a pair with an empty side is dropped and counted.

    Returns True when the pair is kept; otherwise increments `skipped[EMPTY_PAIR]`.
    """
    if src and tgt:
        return True
    skipped[EMPTY_PAIR] = skipped.get(EMPTY_PAIR, 0) + 1
    return False


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, object]]:
    """(line number, parsed value) of every non-blank line of a JSONL file.

    Invalid JSON raises DocMTInputError naming the file and line.
    """
    for lineno, line in enumerate(open_text(path), start=1):
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as err:
            raise DocMTInputError(f"invalid JSON ({err.msg})", path=path, line=lineno) from None
