"""`iwslt:SRC.xml,TGT.xml`: WIT3 / IWSLT XML (`<doc docid=..>` holding `<seg id=..>` lines).

Each side may list several files joined by `+`, and each file name may be a glob, e.g.
`iwslt:en-fr/IWSLT17.TED.tst201*.en-fr.en.xml,fr-en/IWSLT17.TED.tst201*.fr-en.fr.xml`
(a glob expands to its sorted matches). Source and target documents are paired by `docid`, segments
by `id`; documents and segments keep the source file order.

WIT3 files are not always well-formed XML documents (train files have no root element, stray `&`
happen), so they are scanned for `<doc>`/`<seg>` tags rather than parsed as XML; metadata tags (`<url>`,
`<talkid>`, `<description>`, ...) are ignored. Structural problems are errors naming file and line: a
`<doc>` not closed, a `<seg>` outside a `<doc>` or not closed, a missing `docid` or `id`, duplicate
ids, a document without segments, and docids or segment ids present on one side only. Segment text is
entity-unescaped and whitespace-normalised; a pair with an empty side is dropped and counted in
`Corpus.skipped["empty_pair"]`. Documents have no split.
"""

from __future__ import annotations

import glob
import html
import re
from dataclasses import dataclass, field

from lightning_docmt.data.corpora import hash_files, register_reader
from lightning_docmt.data.corpora.validate import check_document, keep_pair, normalize_space, open_text
from lightning_docmt.data.types import Corpus, Document
from lightning_docmt.errors import DocMTInputError

READER_VERSION = "wit3-v1"
_TAG = re.compile(r"<(/?)(doc|seg)\b([^>]*)>", re.IGNORECASE)
_ATTR = re.compile(r"""(\w+)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_GLOB_CHARS = re.compile(r"[*?\[]")


@dataclass
class _Segment:
    seg_id: str
    line: int
    text: str


@dataclass
class _Doc:
    docid: str
    path: str
    line: int
    segments: list[_Segment] = field(default_factory=list)
    seg_ids: set[str] = field(default_factory=set)


def _expand(side: str, spec: str) -> list[str]:
    paths: list[str] = []
    for item in side.split("+"):
        if not item:
            raise DocMTInputError(f"empty file name in '{spec}'")
        if _GLOB_CHARS.search(item):
            matches = sorted(glob.glob(item))
            if not matches:
                raise DocMTInputError("no file matches this pattern", path=item)
            paths.extend(matches)
        else:
            paths.append(item)
    return paths


def _sides(args: str) -> tuple[list[str], list[str]]:
    spec = f"iwslt:{args}"
    parts = args.split(",")
    if len(parts) != 2 or not all(parts):
        raise DocMTInputError(f"iwslt: expects 'iwslt:SRC.xml,TGT.xml', got '{spec}'")
    return _expand(parts[0], spec), _expand(parts[1], spec)


def _attribute(attrs: str, name: str) -> str | None:
    for match in _ATTR.finditer(attrs):
        if match.group(1).lower() == name:
            return match.group(2) if match.group(2) is not None else match.group(3)
    return None


def _parse_file(path: str) -> list[_Doc]:
    """The documents of one WIT3 file, in file order, with the line of every doc and segment."""
    text = "\n".join(open_text(path))
    docs: list[_Doc] = []
    doc: _Doc | None = None
    seg: tuple[str, int, int] | None = None  # (id, line, text start)
    line, counted_to = 1, 0
    for match in _TAG.finditer(text):
        closing, tag, attrs = match.group(1) == "/", match.group(2).lower(), match.group(3)
        line += text.count("\n", counted_to, match.start())
        counted_to = match.start()
        if seg is not None and not (closing and tag == "seg"):
            raise DocMTInputError(f"<seg id=\"{seg[0]}\"> is not closed (a {match.group(0)} follows "
                                  f"on line {line})", path=path, line=seg[1])
        if tag == "doc" and not closing:
            if doc is not None:
                raise DocMTInputError(f"<doc docid=\"{doc.docid}\"> opened on line {doc.line} is not "
                                      "closed before this <doc>", path=path, line=line)
            docid = _attribute(attrs, "docid")
            if not docid:
                raise DocMTInputError("<doc> without a docid attribute", path=path, line=line)
            doc = _Doc(docid, path, line)
        elif tag == "doc":
            if doc is None:
                raise DocMTInputError("</doc> without an open <doc>", path=path, line=line)
            if not doc.segments:
                raise DocMTInputError(f"document '{doc.docid}' has no <seg>", path=path, line=doc.line)
            docs.append(doc)
            doc = None
        elif not closing:
            if doc is None:
                raise DocMTInputError("<seg> outside any <doc>", path=path, line=line)
            seg_id = _attribute(attrs, "id")
            if not seg_id:
                raise DocMTInputError("<seg> without an id attribute", path=path, line=line)
            if seg_id in doc.seg_ids:
                raise DocMTInputError(f"duplicate <seg id=\"{seg_id}\"> in document '{doc.docid}'",
                                      path=path, line=line)
            doc.seg_ids.add(seg_id)
            seg = (seg_id, line, match.end())
        else:
            if seg is None:
                raise DocMTInputError("</seg> without an open <seg>", path=path, line=line)
            body = normalize_space(html.unescape(text[seg[2]:match.start()]))
            doc.segments.append(_Segment(seg[0], seg[1], body))  # type: ignore[union-attr]
            seg = None
    if seg is not None:
        raise DocMTInputError(f"<seg id=\"{seg[0]}\"> is not closed", path=path, line=seg[1])
    if doc is not None:
        raise DocMTInputError(f"<doc docid=\"{doc.docid}\"> is not closed", path=path, line=doc.line)
    if not docs:
        raise DocMTInputError("no <doc> element: not a WIT3 XML file", path=path)
    return docs


def _read_side(paths: list[str]) -> dict[str, _Doc]:
    by_id: dict[str, _Doc] = {}
    for path in paths:
        for doc in _parse_file(path):
            if doc.docid in by_id:
                first = by_id[doc.docid]
                raise DocMTInputError(f"duplicate docid '{doc.docid}' (first in {first.path}:"
                                      f"{first.line})", path=path, line=doc.line)
            by_id[doc.docid] = doc
    return by_id


def _check_same_ids(docid: str, have: dict[str, _Segment], other: dict[str, _Segment],
                    doc: _Doc, other_doc: _Doc) -> None:
    for seg_id, seg in have.items():
        if seg_id not in other:
            raise DocMTInputError(f"<seg id=\"{seg_id}\"> of document '{docid}' has no counterpart "
                                  f"in {other_doc.path} (document on line {other_doc.line})",
                                  path=doc.path, line=seg.line)


def _fingerprint(args: str) -> str:
    src, tgt = _sides(args)
    return hash_files(*src, *tgt, extra=f"{READER_VERSION}\0{len(src)}")


@register_reader("iwslt", fingerprint=_fingerprint, help="SRC.xml,TGT.xml ('+' joins files, globs allowed)")
def read(args: str) -> Corpus:
    src_paths, tgt_paths = _sides(args)
    src_docs, tgt_docs = _read_side(src_paths), _read_side(tgt_paths)
    for docid, doc in tgt_docs.items():
        if docid not in src_docs:
            raise DocMTInputError(f"docid '{docid}' is not in the source files "
                                  f"({' + '.join(src_paths)})", path=doc.path, line=doc.line)
    documents: list[Document] = []
    skipped: dict[str, int] = {}
    for docid, src_doc in src_docs.items():
        if docid not in tgt_docs:
            raise DocMTInputError(f"docid '{docid}' is not in the target files "
                                  f"({' + '.join(tgt_paths)})", path=src_doc.path, line=src_doc.line)
        tgt_doc = tgt_docs[docid]
        src_segs = {s.seg_id: s for s in src_doc.segments}
        tgt_segs = {s.seg_id: s for s in tgt_doc.segments}
        _check_same_ids(docid, src_segs, tgt_segs, src_doc, tgt_doc)
        _check_same_ids(docid, tgt_segs, src_segs, tgt_doc, src_doc)
        document = Document(docid, [], [])
        for seg_id, seg in src_segs.items():
            tgt_text = tgt_segs[seg_id].text
            if keep_pair(seg.text, tgt_text, skipped):
                document.src.append(seg.text)
                document.tgt.append(tgt_text)
        check_document(document, path=src_doc.path, line=src_doc.line)
        documents.append(document)
    return Corpus(spec=f"iwslt:{args}", documents=documents, skipped=skipped)
