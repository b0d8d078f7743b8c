"""Plain data types shared by every corpus reader and by the rest of the data pipeline."""

from __future__ import annotations

from dataclasses import dataclass, field

SPLITS = ("train", "valid", "test")


@dataclass
class Document:
    """One parallel document: sentence-aligned source and target lists.

    `split` is "train", "valid" or "test" when the corpus defines its own split (the Bible's
    book-level split, the synthetic generator), else None (the caller decides what the file is for).
    """

    doc_id: str
    src: list[str]
    tgt: list[str]
    split: str | None = None

    def __len__(self) -> int:
        return len(self.src)


@dataclass
class Corpus:
    """A list of documents plus the spec it was read from and reader statistics.

    `skipped` counts what a reader dropped *by rule* (never silently): reason -> count.
    """

    spec: str
    documents: list[Document]
    skipped: dict[str, int] = field(default_factory=dict)

    def split(self, name: str) -> list[Document]:
        return [d for d in self.documents if d.split == name]

    @property
    def splits(self) -> list[str]:
        present = {d.split for d in self.documents}
        return [s for s in SPLITS if s in present]

    @property
    def n_sentences(self) -> int:
        return sum(len(d) for d in self.documents)
