"""Validation shared by the corpus readers: one clear error naming file, line or doc id."""

from __future__ import annotations

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
