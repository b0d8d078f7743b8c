"""Which training documents a `data.train_fraction` keeps: the first ones, or a seeded random draw
that keeps the whole split's mix of domains (Zhang et al. 2018 Table 7's D_d)."""

from __future__ import annotations

import pytest

from lightning_docmt.config.schema import DataConfig
from lightning_docmt.data.splits import split_sources
from lightning_docmt.data.types import Corpus, Document
from lightning_docmt.errors import DocMTInputError

# 40 training documents, the first half of one domain ("ot"), the second of another ("nt").
CORPUS = Corpus(spec="x", documents=[Document(f"{'ot' if i < 20 else 'nt'}.{i}", ["s"], ["t"], "train")
                                     for i in range(40)], skipped={})


def kept(**data) -> list[str]:
    source = split_sources(DataConfig(corpus="synthetic:tiny", **data))["train"]
    return [d.doc_id for d in source.select(CORPUS)]


def test_first_keeps_a_prefix_and_random_a_seeded_draw_in_corpus_order():
    first = kept(train_fraction=0.5)
    assert first == [f"ot.{i}" for i in range(20)]  # one domain only
    drawn = kept(train_fraction=0.5, train_fraction_draw="random")
    assert len(drawn) == 20 and drawn == sorted(drawn, key=lambda d: int(d.split(".")[1]))
    assert {d.split(".")[0] for d in drawn} == {"ot", "nt"}  # both domains
    assert drawn == kept(train_fraction=0.5, train_fraction_draw="random")  # reproducible
    assert drawn != kept(train_fraction=0.5, train_fraction_draw="random", train_fraction_seed=2)


def test_random_draws_are_nested_so_a_curve_over_fractions_differs_only_in_size():
    fractions = (0.125, 0.25, 0.5, 0.75, 1.0)
    draws = [set(kept(train_fraction=f, train_fraction_draw="random")) for f in fractions]
    assert [len(d) for d in draws] == [5, 10, 20, 30, 40]
    assert all(small < large for small, large in zip(draws, draws[1:]))
    assert not draws[1] <= set(kept(train_fraction=0.5, train_fraction_draw="random", train_fraction_seed=2))


def test_the_draw_is_part_of_the_split_fingerprint():
    def fingerprint(**data) -> str:
        return split_sources(DataConfig(corpus="synthetic:tiny", **data))["train"].fingerprint()

    prints = {fingerprint(train_fraction=0.5), fingerprint(train_fraction=0.5, train_fraction_draw="random"),
              fingerprint(train_fraction=0.5, train_fraction_draw="random", train_fraction_seed=2)}
    assert len(prints) == 3
    assert fingerprint() == fingerprint(train_fraction_draw="random")  # no fraction: nothing drawn


def test_an_unknown_draw_names_the_key():
    with pytest.raises(DocMTInputError, match="data.train_fraction_draw"):
        kept(train_fraction=0.5, train_fraction_draw="sorted")
