"""Monolingual Bible text for the encoders pretrained in the project (`data/pretraining_text.py`)."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_docmt.config.pretraining import load_pretrain_config
from lightning_docmt.data.corpora import read_corpus
from lightning_docmt.data.corpora.bible import TEST_BOOKS, VALID_BOOKS
from lightning_docmt.data.corpora.bible_versions import versions_of
from lightning_docmt.data.pretraining_text import (
    GAP_WINDOW,
    MASK_SENTENCE,
    Chapter,
    corpus_chapters,
    gap_sentence_examples,
    mlm_masking,
    training_chapters,
    verse_pairs,
)
from lightning_docmt.errors import DocMTInputError


@pytest.fixture(scope="module")
def english() -> list[Chapter]:
    return training_chapters("en")


def test_no_valid_or_test_book_of_any_version_reaches_pretraining(english):
    held_out = set(VALID_BOOKS) | set(TEST_BOOKS)
    assert {c.version for c in english} == {v.name for v in versions_of("en")}  # every English version
    books = {c.doc_id.split(".")[0] for c in english}
    assert not books & held_out
    assert {"Gen", "Matt", "Rev"} <= books  # training books of both testaments are there
    per_version = {}
    for chapter in english:
        per_version[chapter.version] = per_version.get(chapter.version, 0) + 1
    assert all(count > 1000 for count in per_version.values()), per_version  # 1,091 training chapters each
    assert all(chapter.verses and all(chapter.verses) for chapter in english)


def test_a_chosen_version_alone_and_unknown_choices_are_one_error(english):
    web = training_chapters("en", ["web"])
    assert {c.version for c in web} == {"web"}
    assert [c for c in english if c.version == "web"] == web
    with pytest.raises(DocMTInputError, match="pretraining.versions"):
        training_chapters("en", ["segond"])
    with pytest.raises(DocMTInputError, match="pretraining.lang"):
        training_chapters("xx")


def test_each_gap_sentence_example_masks_one_verse_of_its_window():
    chapter = Chapter("web", "Gen.1", tuple(f"verse {n} ." for n in range(1, 17)))  # 16 verses: 7 + 7 + 2
    examples = list(gap_sentence_examples([chapter], seed=1))
    assert [len(e.source) for e in examples] == [GAP_WINDOW, GAP_WINDOW, 2]
    for start, example in zip((0, 7, 14), examples):
        window = chapter.verses[start:start + GAP_WINDOW]
        assert example.source.count(MASK_SENTENCE) == 1 and example.source[example.masked] == MASK_SENTENCE
        assert example.target == window[example.masked]
        assert [v for v in example.source if v != MASK_SENTENCE] == [v for v in window if v != example.target]
    lone = Chapter("web", "Obad.1", ("one verse .",) * 8)  # 7 + 1: the lone last verse has nothing to read
    assert len(list(gap_sentence_examples([lone], seed=1))) == 1
    again = list(gap_sentence_examples([chapter], seed=1))
    assert again == examples  # a seed gives the same examples
    masked = {tuple(e.masked for e in gap_sentence_examples([chapter] * 20, seed=s)) for s in range(4)}
    assert len(masked) == 4  # another seed (epoch) masks other verses


def test_verse_pairs_are_consecutive_verses_of_one_chapter():
    chapters = [Chapter("web", "Gen.1", ("a", "b", "c")), Chapter("web", "Gen.2", ("d", "e"))]
    assert list(verse_pairs(chapters)) == [("a", "b"), ("b", "c"), ("d", "e")]


def test_mlm_masking_predicts_fifteen_percent_of_the_ordinary_positions_eighty_ten_ten():
    specials = {0, 1, 2, 3}
    mask_id, vocab = 4, 1000
    rng = np.random.default_rng(0)
    row = [2, *range(10, 110), 3, *range(200, 300), 3]  # [CLS] a [SEP] b [SEP]: 200 ordinary ids
    masked = replaced = kept = 0
    for _ in range(200):
        ids, labels = mlm_masking(row, rng, mask_id=mask_id, vocab_size=vocab, special_ids=specials)
        predicted = [p for p, label in enumerate(labels) if label != -1]
        assert len(predicted) == 30 and all(row[p] not in specials for p in predicted)
        assert all(ids[p] == row[p] for p in range(len(row)) if labels[p] == -1)  # the rest untouched
        assert all(labels[p] == row[p] for p in predicted)
        masked += sum(ids[p] == mask_id for p in predicted)
        replaced += sum(ids[p] not in (mask_id, row[p]) for p in predicted)
        kept += sum(ids[p] == row[p] for p in predicted)
        assert not {ids[p] for p in predicted} & (specials - {mask_id})  # a random id is never special
    total = 200 * 30  # 6,000 draws: sd of a share ~0.005
    assert abs(masked / total - 0.8) < 0.02 and abs(replaced / total - 0.1) < 0.02, (masked, replaced, kept)
    assert mlm_masking([2, 3], rng, mask_id=mask_id, vocab_size=vocab, special_ids=specials) == ([2, 3], [-1, -1])


def test_a_synthetic_corpus_gives_its_training_documents_one_side_as_chapters():
    spec = "synthetic:tiny?docs=30&test_docs=5"
    documents = read_corpus(spec).documents
    train = [d for d in documents if d.split == "train"]
    assert len(train) < len(documents)  # valid and test documents exist and stay out
    for side in ("source", "target"):
        chapters = corpus_chapters(spec, side)
        assert [c.doc_id for c in chapters] == [d.doc_id for d in train]
        assert [list(c.verses) for c in chapters] == [d.src if side == "source" else d.tgt for d in train]


@pytest.mark.parametrize("setting", ["corpus: jsonl:x.jsonl", "side: both", "corpus: synthetic:tiny\nversions: [web]"])
def test_pretraining_reads_only_a_synthetic_corpus_besides_the_bible(tmp_path, setting):
    path = tmp_path / "p.yaml"
    path.write_text(f"lang: en\n{setting}\n")
    with pytest.raises(DocMTInputError, match="invalid value"):
        load_pretrain_config(path)
