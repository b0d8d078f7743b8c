from __future__ import annotations

import multiprocessing
import pickle
import time
from pathlib import Path

import numpy as np
import pytest

from lightning_docmt.config.schema import DataConfig, VocabConfig
from lightning_docmt.data import prepare as prepare_module
from lightning_docmt.data.cache import LengthFilter, build_cache, load_cache, token_dtype
from lightning_docmt.data.cachedir import build_once
from lightning_docmt.data.prepare import build_caches
from lightning_docmt.data.types import Document
from lightning_docmt.data.vocab import WordVocab
from tests.helpers.corpus_fixtures import random_documents, write_jsonl

DOCS = random_documents(12, seed=1) + [Document("u", ["café naïve"], ["NAÏVE CAFÉ"])]
VOCAB = WordVocab.train([s for d in DOCS for s in d.src + d.tgt], size=1000)


def _build(tmp_path: Path, docs=DOCS, **kwargs):
    out = tmp_path / "split"
    out.mkdir()
    build_cache(docs, VOCAB, VOCAB, out, **kwargs)
    return load_cache(out)


def test_memmap_round_trip(tmp_path):
    split = _build(tmp_path, keep_text=True, chunk_sentences=4)
    sentences = [(s, t) for d in DOCS for s, t in zip(d.src, d.tgt)]
    assert split.n_sentences == len(sentences) and split.n_documents == len(DOCS)
    assert isinstance(split.src.ids, np.memmap) and split.src.ids.dtype == np.uint16
    for i, (s, t) in enumerate(sentences):
        assert split.src[i].tolist() == VOCAB.encode(s)
        assert split.tgt[i].tolist() == VOCAB.encode(t)
    assert np.diff(split.doc_offsets).tolist() == [len(d) for d in DOCS]
    assert split.doc_ids == [d.doc_id for d in DOCS]
    assert split.targets.tolist() == list(range(len(sentences)))
    assert split.references() == [t for _, t in sentences]
    assert split.source_texts() == [s for s, _ in sentences]
    assert split.meta["src_tokens"] == sum(len(s.split()) for s, _ in sentences)
    assert split.meta["tgt_subwords"] == sum(len(VOCAB.encode(t)) for _, t in sentences)


def test_chunk_size_does_not_change_the_files(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    build_cache(DOCS, VOCAB, VOCAB, tmp_path / "a", keep_text=True, chunk_sentences=3)
    build_cache(DOCS, VOCAB, VOCAB, tmp_path / "b", keep_text=True, chunk_sentences=10_000)
    for f in (tmp_path / "a").iterdir():
        assert f.read_bytes() == (tmp_path / "b" / f.name).read_bytes(), f.name


def test_token_dtype_fits_every_id():
    assert token_dtype(65_536) == np.uint16  # ids 0..65535
    assert token_dtype(65_537) == np.int32


def test_over_long_pairs_are_context_not_targets_and_are_counted(tmp_path):
    docs = [Document("d", ["a", "a a a a", "a a", "a"], ["b", "b", "b b b", "b b b"])]
    split = _build(tmp_path, docs, length_filter=LengthFilter(max_len=3, max_len_ratio=2.0),
                   chunk_sentences=2)
    # sentence 1: source 4 > 3; sentence 3: ratio 3/1 > 2; sentence 2: ratio 1.5, lengths <= 3
    assert split.targets.tolist() == [0, 2]
    assert split.meta["filtered"] == 2 and split.meta["targets"] == 2
    assert split.n_sentences == 4 and len(split.src[1]) == 4  # still there as context


def test_empty_split_loads(tmp_path):
    split = _build(tmp_path, [], keep_text=True)
    assert split.n_sentences == 0 and len(split.src) == 0 and split.references() == []


def test_pickled_split_reopens_its_maps(tmp_path):
    split = _build(tmp_path)
    _ = split.src[0], split.doc_offsets, split.targets  # open every map
    blob = pickle.dumps(split)
    assert len(blob) < 2_000  # paths and metadata, not the arrays
    clone = pickle.loads(blob)
    assert clone.src[3].tolist() == split.src[3].tolist()


def _slow_build(args):
    final, log = args

    def build(tmp: Path) -> None:
        with open(log, "a") as f:
            f.write("built\n")
        time.sleep(0.3)
        (tmp / "payload").write_text("complete")

    build_once(Path(final), build)
    return (Path(final) / "payload").read_text()


@pytest.mark.subprocess
def test_concurrent_builders_build_once_and_see_a_complete_entry(tmp_path):
    final, log = tmp_path / "entry", tmp_path / "log"
    with multiprocessing.get_context("fork").Pool(3) as pool:
        results = pool.map(_slow_build, [(str(final), str(log))] * 3)
    assert results == ["complete"] * 3
    assert log.read_text() == "built\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry", "entry.lock", "log"]


def _config(spec: str, tmp_path: Path, **data) -> tuple[DataConfig, VocabConfig]:
    data_cfg = DataConfig(corpus=spec, cache_dir=str(tmp_path / "cache"), **data)
    return data_cfg, VocabConfig(type="word", size=200)


def test_caches_rebuild_only_when_inputs_or_options_change(tmp_path, monkeypatch):
    docs = random_documents(9, seed=2, splits=("train", "valid", "test"))
    spec = write_jsonl(tmp_path / "c.jsonl", docs)
    first = build_caches(*_config(spec, tmp_path, max_len=8))
    built = []
    real = prepare_module.build_cache

    def counting_build_cache(documents, *args, **kwargs):
        built.append(kwargs["extra_meta"]["split"])
        return real(documents, *args, **kwargs)

    monkeypatch.setattr(prepare_module, "build_cache", counting_build_cache)

    assert build_caches(*_config(spec, tmp_path, max_len=8)) == first and built == []
    changed = build_caches(*_config(spec, tmp_path, max_len=9))  # a training-only option
    assert built == ["train"] and changed.vocab_dir == first.vocab_dir
    assert changed.split_dirs["train"] != first.split_dirs["train"]
    assert changed.split_dirs["valid"] == first.split_dirs["valid"]

    docs[0].src[0] += " river"  # new corpus content: new vocabulary, every split rebuilt
    write_jsonl(tmp_path / "c.jsonl", docs)
    built.clear()
    rebuilt = build_caches(*_config(spec, tmp_path, max_len=8))
    assert sorted(built) == ["test", "train", "valid"] and rebuilt.vocab_dir != first.vocab_dir


def test_a_training_fraction_keeps_the_vocabulary_of_the_whole_training_split(tmp_path):
    """Zhang et al. 2018 Table 7: step 2 trains on a subset D_d of step 1's data, with its ids."""
    docs = random_documents(10, seed=3, splits=("train", "valid", "test"))
    spec = write_jsonl(tmp_path / "c.jsonl", docs)
    whole = build_caches(*_config(spec, tmp_path))
    part = build_caches(*_config(spec, tmp_path, train_fraction=0.3))
    assert part.vocab_dir == whole.vocab_dir
    assert part.split_dirs["train"] != whole.split_dirs["train"]
    assert part.split_dirs["test"] == whole.split_dirs["test"]
    kept, all_train = (len(load_cache(c.split_dirs["train"]).doc_ids) for c in (part, whole))
    assert kept == 2 and all_train == 4  # ceil(0.3 * 4) of the 4 training documents
