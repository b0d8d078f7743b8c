"""What a stream's array holds in each split, and the first-pass translations a target stream reads
at valid and test time (Donato et al. 2021, docs/papers/donato2021.md reading D8).

A stream reads one side of the corpus in its tokenizer's ids (`data/streams.py`). A target-side
stream trains on the references; at valid and test time the references are what the model is
scored against, so a stream that reads them there is an oracle. `context.streams.<name>.hypotheses`
names a first-pass run's directory: where it holds `<split>.hyp.txt` (a test run's `test.hyp.txt`,
a `valid_report` run's `valid.hyp.txt`), the stream reads those translations in that split, one
line per sentence in split order; a split without one reads the references, and a report over it
says so (`oracle_context`). The splits' cache key holds the file's digest.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from lightning_docmt.data.tokenizers import ExternalTokenizer
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.line_files import existing_line_file, read_lines


@dataclass(frozen=True)
class Replacement:
    """Texts a split's array holds instead of its own side: one line per sentence of the split."""

    lines: list[str]
    path: Path
    key: str  # the setting that named the file, for errors

    def check_count(self, sentences: int) -> None:
        if len(self.lines) != sentences:
            raise DocMTInputError(f"has {len(self.lines)} lines for the split's {sentences} sentences",
                                  path=self.path, key=self.key)


@dataclass(frozen=True)
class RetokenisedSide:
    """A split array's content: corpus side `side` (src, tgt) in `tokenizer`'s ids, or at valid and
    test the first-pass translations in `hypotheses` (a directory) where it has the split's file."""

    side: str
    tokenizer: ExternalTokenizer
    hypotheses: Optional[str] = None
    key: str = ""  # `context.streams.<name>.hypotheses`

    def hypothesis_file(self, split: str) -> Optional[Path]:
        return first_pass_file(self.hypotheses, split)

    def fingerprint(self, split: str) -> list[str]:
        """What the split's array depends on: side, tokenizer and the first-pass file's content."""
        path = self.hypothesis_file(split)
        text = "".join(line + "\n" for line in read_lines(path)) if path else ""  # a file's bytes, if plain
        first_pass = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16] if path else ""
        return [self.side, self.tokenizer.fingerprint, first_pass]

    def replacement(self, split: str) -> Optional[Replacement]:
        """The split's first-pass translations, or None: the side's own texts."""
        path = self.hypothesis_file(split)
        if path is None:
            return None
        return Replacement(read_lines(path), path, self.key)


def first_pass_file(hypotheses: Optional[str], split: str) -> Optional[Path]:
    """`<hypotheses>/<split>.hyp.txt` (or its archived form, `.gz`) when it exists (never for the
    training split)."""
    if hypotheses is None or split == "train":
        return None
    return existing_line_file(Path(hypotheses) / f"{split}.hyp.txt")


def check_hypotheses(hypotheses: Optional[str], side: str, key: str) -> None:
    """A first-pass directory is for target streams, and must exist."""
    if hypotheses is None:
        return
    if side != "tgt":
        raise DocMTInputError("only a target stream reads first-pass translations", key=key)
    if not Path(hypotheses).is_dir():
        raise DocMTInputError(f"no such directory '{hypotheses}' (a first-pass run's directory)", key=key)
