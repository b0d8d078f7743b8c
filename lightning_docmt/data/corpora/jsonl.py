"""`jsonl:PATH`: one document per line, `{"doc_id": str, "src": [str], "tgt": [str], "split"?: str}`."""

from __future__ import annotations

from lightning_docmt.data.corpora import hash_files, register_reader
from lightning_docmt.data.corpora.validate import check_document, iter_jsonl
from lightning_docmt.data.types import SPLITS, Corpus, Document
from lightning_docmt.errors import DocMTInputError


def _fingerprint(path: str) -> str:
    return hash_files(path, extra="jsonl-v1")


@register_reader("jsonl", fingerprint=_fingerprint, help="PATH")
def read(path: str) -> Corpus:
    documents = []
    seen: dict[str, int] = {}
    for lineno, obj in iter_jsonl(path):
        if not isinstance(obj, dict):
            raise DocMTInputError("expected a JSON object per line", path=path, line=lineno)
        for key in ("doc_id", "src", "tgt"):
            if key not in obj:
                raise DocMTInputError(f"missing key '{key}'", path=path, line=lineno)
        src, tgt = obj["src"], obj["tgt"]
        if not (isinstance(src, list) and isinstance(tgt, list)
                and all(isinstance(s, str) for s in src + tgt)):
            raise DocMTInputError("'src' and 'tgt' must be lists of strings", path=path, line=lineno)
        split = obj.get("split")
        if split is not None and split not in SPLITS:
            raise DocMTInputError(f"split must be one of {SPLITS}, got {split!r}", path=path,
                                  line=lineno)
        doc_id = str(obj["doc_id"])
        if doc_id in seen:
            raise DocMTInputError(f"duplicate doc_id '{doc_id}' (first on line {seen[doc_id]})",
                                  path=path, line=lineno)
        seen[doc_id] = lineno
        doc = Document(doc_id, src, tgt, split)
        check_document(doc, path=path, line=lineno)
        documents.append(doc)
    if not documents:
        raise DocMTInputError("no documents", path=path)
    return Corpus(spec=f"jsonl:{path}", documents=documents)
