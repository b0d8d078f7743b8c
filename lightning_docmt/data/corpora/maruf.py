"""`maruf:SRC.txt,TGT.txt`: the line-parallel TED files released with Maruf et al. (2019).

A line `<d>` opens every document (on the same line in both files); every other line is one sentence.
Lines may end in CRLF. Documents are numbered in file order: `maruf-1`, `maruf-2`, ... Errors (naming
file and line): unequal line counts, a `<d>` on one side only, a sentence before the first `<d>`, a
document without sentences. Whitespace is normalised; a pair with an empty side is dropped and
counted in `Corpus.skipped["empty_pair"]`.
"""

from __future__ import annotations

from lightning_docmt.data.corpora import hash_files, register_reader
from lightning_docmt.data.corpora.validate import check_document, keep_pair, normalize_space, parallel_lines
from lightning_docmt.data.types import Corpus, Document
from lightning_docmt.errors import DocMTInputError

READER_VERSION = "maruf-v1"
DOC_MARKER = "<d>"


def _paths(args: str) -> tuple[str, str]:
    parts = args.split(",")
    if len(parts) != 2 or not all(parts):
        raise DocMTInputError(f"maruf: expects 'maruf:SRC.txt,TGT.txt', got 'maruf:{args}'")
    return parts[0], parts[1]


def _fingerprint(args: str) -> str:
    return hash_files(*_paths(args), extra=READER_VERSION)


@register_reader("maruf", fingerprint=_fingerprint, help="SRC.txt,TGT.txt")
def read(args: str) -> Corpus:
    src_path, tgt_path = _paths(args)
    documents: list[Document] = []
    opened_on: list[int] = []
    skipped: dict[str, int] = {}
    for lineno, (src, tgt) in parallel_lines(src_path, tgt_path):
        src_marker, tgt_marker = src.strip() == DOC_MARKER, tgt.strip() == DOC_MARKER
        if src_marker != tgt_marker:
            lone = src_path if src_marker else tgt_path
            other = tgt_path if src_marker else src_path
            raise DocMTInputError(f"'{DOC_MARKER}' here but not on the same line of {other}",
                                  path=lone, line=lineno)
        if src_marker:
            documents.append(Document(f"maruf-{len(documents) + 1}", [], []))
            opened_on.append(lineno)
            continue
        if not documents:
            raise DocMTInputError(f"sentence before the first '{DOC_MARKER}' line", path=src_path,
                                  line=lineno)
        src, tgt = normalize_space(src), normalize_space(tgt)
        if keep_pair(src, tgt, skipped):
            documents[-1].src.append(src)
            documents[-1].tgt.append(tgt)
    if not documents:
        raise DocMTInputError(f"no '{DOC_MARKER}' line: not a Maruf-format file", path=src_path)
    for doc, lineno in zip(documents, opened_on):
        check_document(doc, path=src_path, line=lineno)
    return Corpus(spec=f"maruf:{args}", documents=documents, skipped=skipped)
