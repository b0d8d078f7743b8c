"""Input and output formats of `docmt translate`, read and written as streams (docs/usage.md,
"Translate input").

- `*.jsonl`: one document per line, `{"doc_id": str, "src": [str, ...]}` (other keys ignored; a
  missing `doc_id` is `doc<line>`; blank lines are skipped); the output is JSONL, one line per
  document, with the same `doc_id` and `"hyp": [str, ...]`, as many as `src` has.
- anything else: plain text, one sentence per line, an empty line between documents. Output line
  n is the translation of input line n: an empty input line stays an empty output line, so the
  output aligns with the input line for line, however many empty lines there are.

The rules for hostile input, the same in both formats:
- Lines end with `\\n`, `\\r\\n` or a lone `\\r` (mixed in one file too); the output's lines end
  with `\\n`. A UTF-8 byte order mark at the start of the file is dropped.
- Bytes that are not UTF-8 are an error naming the file, line and byte column (exit 2). So are a
  JSONL line that is not JSON or not such a document, and a JSON string with a lone surrogate
  (`"\\ud800"`, which no UTF-8 output can hold).
- Control characters (Unicode category Cc other than tab and line ends: NUL, ESC, DEL, C1 ...)
  become spaces; the lines that held any are counted (`InputReader.control_lines`, reported by
  the CLI in one line). Then every run of whitespace becomes one space and the ends are stripped.
- A sentence that is empty after that is not translated and gets an empty translation: in plain
  text it is an empty line, hence a document boundary; in JSONL it is an empty string in `src`,
  which stays an empty string in `hyp` and is not part of the document the model reads (the
  sentences around it are each other's neighbours).
- An input without any sentence to translate is an error.

`InputReader.items` yields the output in input order: `Sentence`s to translate, and between them
the verbatim output text (`str`) of the layout: empty lines, and the JSON around the hypotheses.
Nothing holds more than one line of the input at a time.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Union

from lightning_docmt.errors import DocMTInputError

_BLOCK = 1 << 16  # bytes read at a time
_LINE_END = re.compile(rb"\r\n|\r|\n")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # Cc less \t, \n, \r
_SURROGATE = re.compile("[\ud800-\udfff]")
_BOM = b"\xef\xbb\xbf"


def is_jsonl(path: Path) -> bool:
    return path.suffix == ".jsonl"


@dataclass(frozen=True)
class Sentence:
    """One source sentence to translate, as the input file holds it.

    `doc`: the number of its document in the file (from 0; a document's sentences are consecutive
    in the stream); `position`: its index among the sentences of its document that are translated;
    `line`: its line in the file; `index`: in JSONL, its index in the document's `src` (else None);
    `before`: output text written right before its translation (`", "` between JSON strings)."""

    text: str
    doc: int
    doc_id: str
    position: int
    line: int
    index: int | None = None
    before: str = ""


Item = Union[str, Sentence]


def clean(text: str) -> tuple[str, bool]:
    """`text` with its control characters replaced by spaces, whitespace runs collapsed to one
    space and the ends stripped; and whether it held a control character."""
    cleaned, controls = _CONTROL.subn(" ", text)
    return " ".join(cleaned.split()), controls > 0


def raw_lines(f: BinaryIO) -> Iterator[bytes]:
    """The lines of a binary file without their line ends (`\\n`, `\\r\\n` or `\\r`), read
    `_BLOCK` bytes at a time; a final line without a line end is a line, an empty file has none."""
    pending = b""
    while True:
        block = f.read(_BLOCK)
        if not block:
            break
        data = pending + block
        start = 0
        for match in _LINE_END.finditer(data):
            if match.end() == len(data) and match.group() == b"\r":
                break  # maybe the first half of a \r\n split across blocks
            yield data[start:match.start()]
            start = match.end()
        pending = data[start:]
    if pending:
        yield pending[:-1] if pending.endswith(b"\r") else pending


class InputReader:
    """The items of one input file (module docstring), and what reading them found: after a full
    pass, `sentences`, `documents`, and the lines that held control characters
    (`control_lines`, the first at `first_control`, "file:line")."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.jsonl = is_jsonl(self.path)
        self.sentences = self.documents = self.control_lines = 0
        self.first_control: str | None = None

    def where(self, sentence: Sentence) -> str:
        """"file:line" of `sentence` (JSONL: and its index in `src`, from 1)."""
        at = f"{self.path}:{sentence.line}"
        return at if sentence.index is None else f"{at} (sentence {sentence.index + 1})"

    def check(self) -> None:
        """Read the whole input once, translating nothing: a bad line is an error before any
        translation starts, and an input without a sentence is one too."""
        for _ in self.items():
            pass
        if not self.sentences:
            raise DocMTInputError("no sentences to translate", path=self.path)

    def items(self) -> Iterator[Item]:
        self.sentences = self.documents = self.control_lines = 0
        self.first_control = None
        if not self.path.is_file():
            raise DocMTInputError("no such file", path=self.path)
        with open(self.path, "rb") as f:
            yield from (self._jsonl_items(f) if self.jsonl else self._plain_items(f))

    def _lines(self, f: BinaryIO) -> Iterator[tuple[int, str]]:
        for lineno, raw in enumerate(raw_lines(f), start=1):
            if lineno == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM):]
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DocMTInputError(f"undecodable bytes at column {err.start + 1} (not UTF-8)",
                                      path=self.path, line=lineno) from None

    def _note_control(self, lineno: int) -> None:
        self.control_lines += 1
        if self.first_control is None:
            self.first_control = f"{self.path}:{lineno}"

    def _plain_items(self, f: BinaryIO) -> Iterator[Item]:
        position, in_document = 0, False
        for lineno, text in self._lines(f):
            text, controls = clean(text)
            if controls:
                self._note_control(lineno)
            if not text:
                in_document = False
                yield "\n"
                continue
            if not in_document:
                self.documents += 1
                position, in_document = 0, True
            self.sentences += 1
            yield Sentence(text, self.documents - 1, f"doc{self.documents}", position, lineno)
            position += 1

    def _jsonl_items(self, f: BinaryIO) -> Iterator[Item]:
        for lineno, line in self._lines(f):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise DocMTInputError(f"invalid JSON ({err.msg})", path=self.path, line=lineno) from None
            src = obj.get("src") if isinstance(obj, dict) else None
            if not (isinstance(src, list) and src and all(isinstance(s, str) for s in src)):
                raise DocMTInputError("expected {\"doc_id\", \"src\": [non-empty list of strings]}",
                                      path=self.path, line=lineno)
            doc_id = str(obj.get("doc_id", f"doc{lineno}"))
            for s in (doc_id, *src):
                found = _SURROGATE.search(s)
                if found:
                    raise DocMTInputError(f"a lone surrogate \\u{ord(found.group()):04x} in a string "
                                          f"(not Unicode text)", path=self.path, line=lineno)
            self.documents += 1
            yield "{\"doc_id\": " + json.dumps(doc_id, ensure_ascii=False) + ", \"hyp\": ["
            position, any_controls = 0, False
            for index, text in enumerate(src):
                text, controls = clean(text)
                any_controls |= controls
                before = ", " if index else ""
                if not text:
                    yield before + "\"\""
                    continue
                self.sentences += 1
                yield Sentence(text, self.documents - 1, doc_id, position, lineno, index, before)
                position += 1
            if any_controls:
                self._note_control(lineno)
            yield "]}\n"


def format_translation(sentence: Sentence, translation: str, jsonl: bool) -> str:
    """The output text of `sentence` translated as `translation` (its `before` first)."""
    if jsonl:
        return sentence.before + json.dumps(translation, ensure_ascii=False)
    return sentence.before + translation.replace("\r", " ").replace("\n", " ") + "\n"
