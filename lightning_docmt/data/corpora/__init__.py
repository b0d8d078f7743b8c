"""Corpus specs -> `Corpus` (docs/design.md section 5).

A corpus spec is a string `PREFIX:ARGS` usable in YAML and on the command line:
`bible:en-fr`, `synthetic:NAME`, `jsonl:PATH`, `iwslt:SRC.xml,TGT.xml`, `maruf:SRC.txt,TGT.txt`,
`text:SRC,TGT,DOCIDS`. Each reader module registers itself with `@register_reader(prefix)` and
provides `read(args) -> Corpus` and `fingerprint(args) -> str` (a cheap content hash used to key the
vocabulary and binarized caches).

Readers that take options use a query string after their arguments: `bible:en-fr?src=kjv&tgt=darby`,
`synthetic:small?docs=5000&seed=3` (parsed by `split_query`).

A reader may also provide `suite(args, split)`: the contrastive suite that belongs to a split of the
corpus (the synthetic generator writes one per split), which `eval.contrastive: [corpus]` evaluates:
the test split's after testing, the valid split's in a selection table (`evaluate: valid`).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from lightning_docmt.data.types import Corpus
from lightning_docmt.errors import DocMTInputError


@dataclass(frozen=True)
class Reader:
    read: Callable[[str], Corpus]
    fingerprint: Callable[[str], str]
    help: str
    suite: Optional[Callable[[str, str], list[dict]]] = None  # (args, split) -> its contrastive examples


READERS: dict[str, Reader] = {}
_READER_MODULES = ("jsonl", "bible", "wit3", "maruf", "text", "synthetic")


def register_reader(prefix: str, *, fingerprint: Callable[[str], str], help: str,
                    suite: Optional[Callable[[str, str], list[dict]]] = None):
    """Class-free registration: decorate the module's `read(args) -> Corpus`."""

    def wrap(read: Callable[[str], Corpus]):
        READERS[prefix] = Reader(read=read, fingerprint=fingerprint, help=help, suite=suite)
        return read

    return wrap


def _load_readers() -> None:
    for name in _READER_MODULES:
        importlib.import_module(f"lightning_docmt.data.corpora.{name}")


def parse_spec(spec: str) -> tuple[Reader, str]:
    _load_readers()
    prefix, sep, args = spec.partition(":")
    if not sep or prefix not in READERS:
        close = difflib.get_close_matches(prefix, READERS, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise DocMTInputError(
            f"unknown corpus spec '{spec}'{hint}; expected one of: "
            + ", ".join(f"{p}:{READERS[p].help}" for p in sorted(READERS))
        )
    return READERS[prefix], args


def read_corpus(spec: str) -> Corpus:
    """Read and validate a corpus. Raises DocMTInputError naming file/line/doc on bad input."""
    reader, args = parse_spec(spec)
    corpus = reader.read(args)
    corpus.spec = spec
    return corpus


def corpus_suite(spec: str, split: str = "test") -> list[dict] | None:
    """The contrastive suite of the corpus' `split`, or None when its reader has none."""
    reader, args = parse_spec(spec)
    return reader.suite(args, split) if reader.suite is not None else None


def corpus_fingerprint(spec: str) -> str:
    """A short hash of the corpus content (and reader version) without parsing it fully."""
    reader, args = parse_spec(spec)
    return hashlib.sha256(f"{spec}\0{reader.fingerprint(args)}".encode()).hexdigest()[:16]


def split_query(args: str, *, spec: str, allowed: Iterable[str]) -> tuple[str, dict[str, str]]:
    """`NAME?key=value&key=value` -> (NAME, {key: value}); unknown, repeated or empty keys are errors."""
    allowed = sorted(allowed)
    base, _, query = args.partition("?")
    options: dict[str, str] = {}
    for item in query.split("&") if query else []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise DocMTInputError(f"malformed option '{item}' in '{spec}' (expected key=value)")
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise DocMTInputError(f"unknown option '{key}' in '{spec}'{hint}; options: "
                                  + ", ".join(allowed))
        if key in options:
            raise DocMTInputError(f"option '{key}' given twice in '{spec}'")
        options[key] = value
    return base, options


def hash_files(*paths: str | Path, extra: str = "") -> str:
    """sha256 over the bytes of the given files (missing files raise a clear error)."""
    h = hashlib.sha256(extra.encode())
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise DocMTInputError("no such file", path=path)
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()
