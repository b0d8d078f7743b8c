"""`text:SRC,TGT,DOCIDS`: line-parallel plain text plus one document id per line.

Consecutive lines with the same id form one document, in file order. An id that reappears after
another document has started is an error (documents must be contiguous), as are unequal line counts
and empty ids. Whitespace inside sentences is normalised; a pair with an empty side is dropped and
counted in `Corpus.skipped["empty_pair"]`.
"""

from __future__ import annotations

from lightning_docmt.data.corpora import hash_files, register_reader
from lightning_docmt.data.corpora.validate import check_document, keep_pair, normalize_space, parallel_lines
from lightning_docmt.data.types import Corpus, Document
from lightning_docmt.errors import DocMTInputError

READER_VERSION = "text-v1"


def _paths(args: str) -> tuple[str, str, str]:
    parts = args.split(",")
    if len(parts) != 3 or not all(parts):
        raise DocMTInputError(f"text: expects 'text:SRC,TGT,DOCIDS', got 'text:{args}'")
    return parts[0], parts[1], parts[2]


def _fingerprint(args: str) -> str:
    return hash_files(*_paths(args), extra=READER_VERSION)


@register_reader("text", fingerprint=_fingerprint, help="SRC,TGT,DOCIDS")
def read(args: str) -> Corpus:
    src_path, tgt_path, ids_path = _paths(args)
    documents: list[Document] = []
    skipped: dict[str, int] = {}
    first_line: dict[str, int] = {}
    for lineno, (src, tgt, doc_id) in parallel_lines(src_path, tgt_path, ids_path):
        doc_id = doc_id.strip()
        if not doc_id:
            raise DocMTInputError("empty document id", path=ids_path, line=lineno)
        if not documents or documents[-1].doc_id != doc_id:
            if doc_id in first_line:
                raise DocMTInputError(
                    f"document id '{doc_id}' reappears after another document (it started on line "
                    f"{first_line[doc_id]}); the lines of a document must be contiguous",
                    path=ids_path, line=lineno)
            first_line[doc_id] = lineno
            documents.append(Document(doc_id, [], []))
        src, tgt = normalize_space(src), normalize_space(tgt)
        if keep_pair(src, tgt, skipped):
            documents[-1].src.append(src)
            documents[-1].tgt.append(tgt)
    if not documents:
        raise DocMTInputError("no lines", path=ids_path)
    for doc in documents:
        check_document(doc, path=ids_path, line=first_line[doc.doc_id])
    return Corpus(spec=f"text:{args}", documents=documents, skipped=skipped)
