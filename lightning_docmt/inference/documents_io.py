"""Input and output formats of `docmt translate`.

- `*.jsonl`: one document per line, `{"doc_id": str, "src": [str, ...]}` (other keys ignored);
  the output is JSONL with the same `doc_id` and `"hyp": [str, ...]`.
- anything else: plain text, one sentence per line, an empty line between documents; the output is
  the translations line by line with the same empty lines, so it aligns with the input.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from lightning_docmt.data.corpora.validate import iter_jsonl, open_text
from lightning_docmt.data.types import Document
from lightning_docmt.errors import DocMTInputError


def is_jsonl(path: Path) -> bool:
    return path.suffix == ".jsonl"


def read_input(path: Path) -> list[Document]:
    docs = _read_jsonl(path) if is_jsonl(path) else _read_plain(path)
    if not docs:
        raise DocMTInputError("no sentences to translate", path=path)
    return docs


def _read_plain(path: Path) -> list[Document]:
    docs: list[Document] = []
    current: list[str] = []
    for line in open_text(path):
        if line.strip():
            current.append(line.strip())
        elif current:
            docs.append(Document(f"doc{len(docs) + 1}", current, [""] * len(current)))
            current = []
    if current:
        docs.append(Document(f"doc{len(docs) + 1}", current, [""] * len(current)))
    return docs


def _read_jsonl(path: Path) -> list[Document]:
    docs = []
    for lineno, obj in iter_jsonl(path):
        src = obj.get("src") if isinstance(obj, dict) else None
        if not (isinstance(src, list) and src and all(isinstance(s, str) for s in src)):
            raise DocMTInputError("expected {\"doc_id\", \"src\": [non-empty list of strings]}",
                                  path=path, line=lineno)
        docs.append(Document(str(obj.get("doc_id", f"doc{lineno}")), src, [""] * len(src)))
    return docs


def write_output(path: Path, input_path: Path, documents: Sequence[Document],
                 translations: Sequence[list[str]]) -> None:
    """Write atomically (a temporary file renamed), never a half-written output."""
    if is_jsonl(input_path):
        text = "".join(json.dumps({"doc_id": d.doc_id, "hyp": hyps}, ensure_ascii=False) + "\n"
                       for d, hyps in zip(documents, translations))
    else:
        text = "\n".join("".join(h + "\n" for h in hyps) for hyps in translations)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
