"""Tiny corpora for the data-pipeline tests (written to tmp_path, never to the repository)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from lightning_docmt.data.types import Document
from lightning_docmt.data.vocab import WordVocab

WORDS = ("the a cat dog house tree runs sees big small red blue green and or but river stone "
         "light night sings walks old new").split()


def random_sentence(rng: random.Random, lo: int = 1, hi: int = 10) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def random_documents(n_docs: int, seed: int = 0, *, max_sentences: int = 6,
                     splits: tuple[str | None, ...] = ("train",)) -> list[Document]:
    """Documents of 1..max_sentences sentences; targets are the sources upper-cased and
    reversed word by word, so that both sides differ; splits are assigned round-robin."""
    rng = random.Random(seed)
    docs = []
    for d in range(n_docs):
        src = [random_sentence(rng) for _ in range(rng.randint(1, max_sentences))]
        tgt = [" ".join(reversed(s.upper().split())) for s in src]
        docs.append(Document(f"doc{d}", src, tgt, splits[d % len(splits)]))
    return docs


def english_documents(sentences: list[str]) -> list[Document]:
    """Eight short documents cycling through `sentences` (3 or 4 each): 6 train, 1 valid, 1 test;
    targets are the words reversed and upper-cased (the pretrained-encoder tests' corpus)."""
    docs = []
    for d in range(8):
        src = [sentences[(d + i) % len(sentences)] for i in range(3 + d % 2)]
        tgt = [" ".join(reversed(s.upper().split())) for s in src]
        docs.append(Document(f"doc{d}", src, tgt, "valid" if d == 6 else "test" if d == 7 else "train"))
    return docs


def write_jsonl(path: Path, docs: list[Document]) -> str:
    """Write documents in the `jsonl:` format; returns the corpus spec."""
    with open(path, "w", encoding="utf-8") as f:
        for d in docs:
            row = {"doc_id": d.doc_id, "src": d.src, "tgt": d.tgt}
            if d.split is not None:
                row["split"] = d.split
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return f"jsonl:{path}"


# The documents of the context-usage tests (evaluation/context_usage.py and the models that read
# context), their references, and a word vocabulary of both sides.
CONTEXT_DOCUMENTS = random_documents(12, seed=4, max_sentences=5)
CONTEXT_REFERENCES = [t for d in CONTEXT_DOCUMENTS for t in d.tgt]
WORD_VOCAB = WordVocab(sorted(set(WORDS) | {w.upper() for w in WORDS}))
