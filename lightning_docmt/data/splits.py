"""Which documents make up the train / valid / test splits of a `DataConfig`.

`data.corpus` provides every split from its own `split` labels; its unlabelled documents are
training data. `data.train` / `data.valid` / `data.test` replace one split with another spec, of
which the documents labelled with that split *or unlabelled* are taken: a corpus without labels
given as `data.test=iwslt:...` is wholly the test split. `data.train_fraction` keeps a fraction of
the training documents (ablations over training-set size): the first ones in corpus order
(`data.train_fraction_draw: first`), or a seeded random draw of them (`random`, seed
`data.train_fraction_seed`), kept in corpus order. A random draw keeps the subset's mix of domains
(books, genres) that of the whole split, so that a smaller-data row does not also change domain;
its draws are nested: with one seed, a smaller fraction's documents are among a larger one's (the
first documents of one seeded order), so that the points of a data-size curve differ only in how
much they read.
`data.report_split: valid` makes the test split the valid split's documents: the test loop and its
report then score valid, and no test document is read (a table reporting on valid,
`evaluate: valid_report`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from lightning_docmt.config.schema import DataConfig
from lightning_docmt.data.corpora import corpus_fingerprint
from lightning_docmt.data.types import SPLITS, Corpus, Document
from lightning_docmt.errors import DocMTInputError

DRAWS = ("first", "random")
REPORT_SPLITS = ("test", "valid")


@dataclass(frozen=True)
class SplitSource:
    """Where one split comes from: a spec and the rule that picks its documents."""

    split: str
    spec: str
    override: bool  # True: given as data.<split>; unlabelled documents belong to the split
    fraction: float = 1.0
    draw: str = "first"  # which documents a fraction keeps: first | random
    draw_seed: int = 1

    def select(self, corpus: Corpus) -> list[Document]:
        wanted = {self.split, None} if (self.override or self.split == "train") else {self.split}
        docs = [d for d in corpus.documents if d.split in wanted]
        if self.fraction < 1.0:
            keep = math.ceil(self.fraction * len(docs))
            if self.draw == "random":  # the first `keep` of one seeded order: nested across fractions
                order = list(range(len(docs)))
                random.Random(self.draw_seed).shuffle(order)
                docs = [docs[i] for i in sorted(order[:keep])]
            else:
                docs = docs[:keep]
        return docs

    def fingerprint(self) -> str:
        """Identifies the selected documents without reading the corpus."""
        rule = "override" if self.override else "labelled"
        draw = "" if self.fraction == 1.0 or self.draw == "first" else f":nested-random{self.draw_seed}"
        return f"{corpus_fingerprint(self.spec)}:{self.split}:{rule}:{self.fraction!r}{draw}"


def split_sources(data: DataConfig) -> dict[str, SplitSource]:
    if not 0.0 < data.train_fraction <= 1.0:
        raise DocMTInputError(f"must be in (0, 1], got {data.train_fraction}",
                              key="data.train_fraction")
    if data.train_fraction_draw not in DRAWS:
        raise DocMTInputError(f"must be one of {', '.join(DRAWS)}, got {data.train_fraction_draw!r}",
                              key="data.train_fraction_draw")
    sources = {}
    for split in SPLITS:
        override = getattr(data, split)
        fraction = data.train_fraction if split == "train" else 1.0
        sources[split] = SplitSource(split, override or data.corpus, override is not None, fraction,
                                     data.train_fraction_draw, data.train_fraction_seed)
    report = getattr(data, "report_split", "test")
    if report not in REPORT_SPLITS:
        raise DocMTInputError(f"must be one of {', '.join(REPORT_SPLITS)}, got {report!r}", key="data.report_split")
    if report == "valid":
        sources["test"] = sources["valid"]
    return sources
