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
`data.mix.corpus` adds a second corpus' training documents (those labelled train or unlabelled) to
the training split, after the in-domain ones and whatever `train_fraction` keeps of these
(`data/mix_sampler.py` draws every batch from both at `data.mix.share`); valid and test never read it.
`data.report_split: valid` makes the test split the valid split's documents: the test loop and its
report then score valid, and no test document is read (a table reporting on valid,
`evaluate: valid_report`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from lightning_docmt.config.schema import DataConfig
from lightning_docmt.data.corpora import corpus_fingerprint, parse_spec
from lightning_docmt.data.languages import spec_languages
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
    mix: str | None = None  # the training split: the spec whose training documents follow the selected ones

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
        mix = "" if self.mix is None else f"+{self.out_of_domain().fingerprint()}"
        return f"{corpus_fingerprint(self.spec)}:{self.split}:{rule}:{self.fraction!r}{draw}{mix}"

    def out_of_domain(self) -> SplitSource | None:
        """Where the training documents of `mix` come from, or None without one."""
        return None if self.mix is None else SplitSource("train", self.mix, override=False)


def split_sources(data: DataConfig) -> dict[str, SplitSource]:
    if not 0.0 < data.train_fraction <= 1.0:
        raise DocMTInputError(f"must be in (0, 1], got {data.train_fraction}",
                              key="data.train_fraction")
    if data.train_fraction_draw not in DRAWS:
        raise DocMTInputError(f"must be one of {', '.join(DRAWS)}, got {data.train_fraction_draw!r}",
                              key="data.train_fraction_draw")
    mix = mixed_corpus(data)
    sources = {}
    for split in SPLITS:
        override = getattr(data, split)
        fraction = data.train_fraction if split == "train" else 1.0
        sources[split] = SplitSource(split, override or data.corpus, override is not None, fraction,
                                     data.train_fraction_draw, data.train_fraction_seed,
                                     mix if split == "train" else None)
    report = getattr(data, "report_split", "test")
    if report not in REPORT_SPLITS:
        raise DocMTInputError(f"must be one of {', '.join(REPORT_SPLITS)}, got {report!r}", key="data.report_split")
    if report == "valid":
        sources["test"] = sources["valid"]
    return sources


def mixed_corpus(data: DataConfig) -> str | None:
    """`data.mix.corpus` after checking `data.mix` (one error naming the key): a share in (0, 1],
    a known corpus spec of the training split's language pair, token-budget batches below 1."""
    mix = data.mix
    if not 0.0 < mix.share <= 1.0:
        raise DocMTInputError(f"must be in (0, 1], got {mix.share}", key="data.mix.share")
    if mix.corpus is None:
        if mix.share < 1.0:
            raise DocMTInputError(f"names no corpus to draw {1.0 - mix.share:.0%} of each batch from",
                                  key="data.mix.corpus")
        return None
    try:
        parse_spec(mix.corpus)
        languages = spec_languages(mix.corpus)
    except DocMTInputError as err:
        raise DocMTInputError(str(err), key="data.mix.corpus") from None
    own = spec_languages(data.train or data.corpus)
    if None not in languages + own and languages != own:
        raise DocMTInputError(f"'{mix.corpus}' is {'-'.join(languages)}, the training split "
                              f"{'-'.join(own)}", key="data.mix.corpus")
    if mix.share < 1.0 and data.document_order:
        raise DocMTInputError("mixes token-budget batches only; data.document_order is true",
                              key="data.mix.share")
    return mix.corpus
