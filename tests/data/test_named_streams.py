"""Named external streams (`context.streams`): retokenised arrays in the splits, rows cut from them
around an anchor, and controls that move the neighbours only (Donato et al. 2021, D5/D22).

The stand-in tokenizer is a word vocabulary of its own with padding relabelled to id 7 (so a real
token has id 0): a stream's padding is told by its mask only.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lightning_docmt.config.composition import compose
from lightning_docmt.config.schema import ContextConfig, DataConfig, StreamConfig, VocabConfig
from lightning_docmt.data.cache import build_cache, load_cache
from lightning_docmt.data.collate import collate, row_lengths
from lightning_docmt.data.context_anchors import no_context, own_context, random_context
from lightning_docmt.data.datamodule import DocumentWindowDataModule
from lightning_docmt.data.prepare import cache_layout, prepare
from lightning_docmt.data.streams import StreamSpec, retokenised_arrays
from lightning_docmt.data.tokenizers import VocabularyTokenizer
from lightning_docmt.data.vocab import WordVocab
from lightning_docmt.data.windows import WindowSpec
from lightning_docmt.errors import DocMTInputError
from tests.helpers.corpus_fixtures import random_documents, write_jsonl

PAD = 7
DOCS = random_documents(48, seed=5, splits=("train", "train", "valid", "test"))
MAIN_VOCAB = WordVocab.train([s for d in DOCS for s in d.src + d.tgt], size=500)
STREAM_VOCAB = WordVocab.train([s for d in DOCS for s in d.src + d.tgt], size=40)
TOKENIZER = VocabularyTokenizer(STREAM_VOCAB, PAD)

LAYOUTS = {  # name: the stream's settings
    "bert_pc": StreamConfig(prev=1, format="pair", max_tokens=30),
    "bert_cn": StreamConfig(next=1, format="pair", max_tokens=9),  # cut often
    "peg": StreamConfig(prev=3, next=3, format="concat", max_tokens=14),
    "peg_nc": StreamConfig(prev=2, current=False, next=1, format="concat", max_tokens=40),
    "tgt": StreamConfig(side="target", prev=2, format="concat", max_tokens=40),
    "cur": StreamConfig(format="pair", max_tokens=40),
}


def spec(**layouts: StreamConfig) -> WindowSpec:
    return WindowSpec(streams=tuple(StreamSpec.from_config(name, cfg, TOKENIZER) for name, cfg in layouts.items()))


ALL = spec(**LAYOUTS)


SENTENCES = {side: [TOKENIZER.encode(s) for d in DOCS for s in getattr(d, side)] for side in ("src", "tgt")}


def expected(stream: StreamSpec, i: int, anchors) -> tuple[list[int], list[int]]:
    """Sentence i's row written from the documents: its own sentence and the neighbours of its
    anchor inside the anchor's document bounds."""
    sentences, layout = SENTENCES[stream.side], stream.layout
    a, start, end = (int(x[i]) for x in (anchors.anchor, anchors.start, anchors.end))
    previous = sentences[max(start, a - layout.prev):a]
    following = sentences[a + 1:min(end, a + 1 + layout.next)]
    return layout.row(sentences[i], previous, following)


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    out = {}
    arrays = {name: (r.side, r.tokenizer, None)
              for name, r in retokenised_arrays(ALL.streams, {n: TOKENIZER for n in LAYOUTS}).items()}
    for name, arrays in (("plain", {}), ("streams", arrays)):
        directory = tmp_path_factory.mktemp(name)
        build_cache(DOCS, MAIN_VOCAB, MAIN_VOCAB, directory, keep_text=True, chunk_sentences=3,
                    retokenised=arrays)
        out[name] = load_cache(directory)
    return out


def test_the_splits_hold_each_side_once_per_tokenizer_and_leave_the_rest_untouched(splits):
    plain, split = splits["plain"], splits["streams"]
    names = {s.array for s in ALL.streams}
    assert names == {f"src.{TOKENIZER.fingerprint[:16]}", f"tgt.{TOKENIZER.fingerprint[:16]}"}
    for stream in ALL.streams:
        sentences = [s for d in DOCS for s in getattr(d, stream.side)]
        array = split.retokenised[stream.array]
        assert [array[i].tolist() for i in range(len(sentences))] == TOKENIZER.encode_batch(sentences)
        assert split.meta["retokenised"][stream.array] == {"side": stream.side, "fingerprint": TOKENIZER.fingerprint,
                                                           "dtype": "uint16", "first_pass": None}
    assert plain.retokenised == {} and "retokenised" not in plain.meta
    plain_files = {p.name for p in plain.path.iterdir()}
    assert {p.name for p in split.path.iterdir()} - plain_files == {f"{n}.{kind}" for n in names
                                                                    for kind in ("ids", "offsets")}
    for name in plain_files - {"meta.json"}:
        assert (plain.path / name).read_bytes() == (split.path / name).read_bytes(), name


def check_batch(batch: dict, split, anchors) -> int:
    """Every stream's rows, types and mask against `expected`; returns how many rows were cut."""
    index = batch["sent_index"].numpy()
    lengths = row_lengths(split, ALL, index, anchors)[2:]  # src and tgt first
    cut = 0
    for stream, length in zip(ALL.streams, lengths):
        ids_key, types_key, pad_key = stream.keys
        ids, types, pad = batch[ids_key], batch[types_key], batch[pad_key]
        assert ids.dtype == types.dtype == torch.int64 and pad.dtype == torch.bool
        assert ids.shape[1] == (~pad).sum(1).max() and (ids[pad] == PAD).all() and (types[pad] == 0).all()
        for b, i in enumerate(index):
            row, row_types = expected(stream, int(i), anchors)
            assert ids[b][~pad[b]].tolist() == row and types[b][~pad[b]].tolist() == row_types, (stream.name, i)
            assert length[b] == len(row) <= stream.layout.max_tokens
            cut += len(row) == stream.layout.max_tokens
    return cut


def test_rows_are_the_layouts_of_the_documents_sentences(splits):
    split = splits["streams"]
    real = own_context(split.doc_offsets)
    index = np.arange(split.n_sentences)[::-1].copy()
    assert check_batch(collate(split, index, ALL), split, real) > 5  # truncation exercised
    pair = collate(split, index, ALL)["stream_bert_pc_types"]
    assert (pair == 1).any() and (pair == 0).any()


def test_the_controls_move_the_neighbours_and_keep_the_current_sentence(splits):
    split = splits["streams"]
    index = np.arange(split.n_sentences)
    empty = no_context(split.n_sentences)
    shuffled = random_context(split.doc_offsets, *ALL.reach, seed=3)
    assert ALL.reach == (3, 3)
    real = collate(split, index, ALL)
    for anchors in (empty, shuffled):
        batch = collate(split, index, ALL, anchors)
        check_batch(batch, split, anchors)
        assert torch.equal(batch["stream_cur"], real["stream_cur"])  # the current sentence alone: unmoved
    moved = shuffled.anchor != index
    assert moved.sum() > split.n_sentences // 2
    doc = split.doc_index(index)
    assert (split.doc_index(shuffled.anchor)[moved] != doc[moved]).all()
    bare = collate(split, index, ALL, empty)

    def rows(batch: dict, sentences: np.ndarray) -> list[list[int]]:
        return [batch["stream_bert_pc"][i][~batch["stream_bert_pc_pad"][i]].tolist() for i in sentences]

    first, later = split.doc_offsets[:-1], np.setdiff1d(index, split.doc_offsets[:-1])
    assert rows(bare, first) == rows(real, first)  # no previous sentence to empty
    assert all(a != b for a, b in zip(rows(bare, later), rows(real, later)))


def test_reach_and_whether_a_batch_carries_context():
    assert spec(cur=LAYOUTS["cur"]).reach == (0, 0) and not spec(cur=LAYOUTS["cur"]).reads_context
    assert spec(a=LAYOUTS["bert_pc"], b=LAYOUTS["bert_cn"]).reach == (1, 1)
    assert WindowSpec(prev_src=2, next_src=1, streams=spec(p=LAYOUTS["peg_nc"]).streams).reach == (2, 1)
    assert spec(p=LAYOUTS["peg_nc"]).reads_context and WindowSpec(prev_tgt=1).reads_context


# ------------------------------------------------------------------------ config and cache keys
@pytest.fixture(scope="module")
def stream_vocab_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("stream_vocab")
    STREAM_VOCAB.save(directory)
    return directory


def configs(tmp_path: Path, vocab_dir: Path, pad_id: int = PAD, **stream) -> tuple:
    corpus = write_jsonl(tmp_path / "c.jsonl", DOCS)
    data = DataConfig(corpus=corpus, cache_dir=str(tmp_path / "cache"), max_tokens=400)
    settings = {"prev": 1, "format": "pair", "max_tokens": 12, **stream}
    context = ContextConfig(streams={"bert": StreamConfig(tokenizer=f"vocab:{vocab_dir}?pad_id={pad_id}", **settings)})
    return data, VocabConfig(type="word", size=200), context


def test_the_datamodule_and_prepare_build_and_carry_the_streams(tmp_path, stream_vocab_dir):
    data, vocab, context = configs(tmp_path, stream_vocab_dir)
    stats = prepare(SimpleNamespace(data=data, vocab=vocab, context=context))
    array = f"src.{TOKENIZER.fingerprint[:16]}"
    assert stats["train"][f"{array}_subwords"] > 0
    dm = DocumentWindowDataModule(data, vocab, context)
    assert dm.window.reach == (1, 0) and dm.window.streams[0].pad_id == PAD
    for batch in list(dm.train_dataloader()) + list(dm.val_dataloader()):
        ids, pad = batch["stream_bert"], batch["stream_bert_pad"]
        assert ids.shape == pad.shape == batch["stream_bert_types"].shape and (~pad).sum(1).max() <= 12
        first = batch["pos_in_doc"] == 0  # [CLS] [SEP] c [SEP]: the current sentence keeps segment B
        assert (batch["stream_bert_types"][first, 2] == 1).all()


def test_the_split_key_follows_the_tokenizer_and_not_the_window(tmp_path, stream_vocab_dir):
    def layout(pad_id=PAD, **stream):
        data, vocab, context = configs(tmp_path, stream_vocab_dir, pad_id, **stream)
        dm = DocumentWindowDataModule(data, vocab, context)
        return cache_layout(data, vocab, None, dm.retokenised)

    plain = cache_layout(*configs(tmp_path, stream_vocab_dir)[:2])
    first = layout()
    assert layout(prev=0, next=1, max_tokens=40) == first == layout(format="concat", prev=3, next=3)
    assert layout(side="target").split_dirs["train"] != first.split_dirs["train"]
    assert layout(pad_id=9).split_dirs["train"] != first.split_dirs["train"]
    assert plain.split_dirs["train"] != first.split_dirs["train"] and plain.vocab_dir == first.vocab_dir


@pytest.mark.parametrize("override, key, text", [
    ("context.streams.bert.side=left", "context.streams.bert.side", "must be one of source, target"),
    ("context.streams.bert.tokenizer=spm:x", "context.streams.bert.tokenizer", "expected one of"),
    ("context.streams.bert.format=tokens", "context.streams.bert", "format must be one of"),
    ("context.streams.bert.next=1", "context.streams.bert", "two segments"),
])
def test_a_bad_stream_is_one_error_naming_its_key(tmp_path, stream_vocab_dir, override, key, text):
    cfg = compose(None, [f"context.streams.bert.tokenizer=vocab:{stream_vocab_dir}", "context.streams.bert.prev=1",
                         override])
    with pytest.raises(DocMTInputError, match=f"key '{key}'.*{text}"):
        WindowSpec.from_config(cfg.context)


def test_a_stream_name_must_name_batch_keys():
    with pytest.raises(DocMTInputError, match="key 'context.streams.bert-pc'.*identifier"):
        StreamSpec.from_config("bert-pc", StreamConfig(prev=1), TOKENIZER)
    with pytest.raises(DocMTInputError, match="key 'context.streams.x.bogus'|bogus"):
        compose(None, ["context.streams.x.bogus=1"])
    assert dict(compose(None).context.streams) == {}


# ----------------------------------------------------------------------- first-pass translations
def test_a_target_stream_reads_first_pass_translations_at_valid_and_test_and_references_in_training(
        tmp_path, stream_vocab_dir):
    """Reading D8: `hypotheses` names a first-pass run's directory; each split with a `<split>.hyp.txt`
    there reads it (one line per sentence), the others read the references; the file's content keys
    the split."""
    first_pass = tmp_path / "first_pass"
    first_pass.mkdir()
    valid = [s for d in DOCS if d.split == "valid" for s in d.tgt]
    (first_pass / "valid.hyp.txt").write_text("".join(f"THE {i} DOG\n" for i in range(len(valid))))
    data, vocab, context = configs(tmp_path, stream_vocab_dir, side="target", hypotheses=str(first_pass))
    dm = DocumentWindowDataModule(data, vocab, context)
    dm.setup()
    [stream] = dm.window.streams
    array = stream.array
    read = {split: [dm.split(split).retokenised[array][i].tolist() for i in range(dm.split(split).n_sentences)]
            for split in ("train", "valid", "test")}
    own = {split: [s for d in DOCS if d.split == split for s in d.tgt] for split in ("train", "valid", "test")}
    assert read["valid"] == TOKENIZER.encode_batch([f"THE {i} DOG" for i in range(len(valid))])
    assert read["train"] == TOKENIZER.encode_batch(own["train"]) and read["test"] == TOKENIZER.encode_batch(own["test"])
    assert not stream.reads_references("valid") and stream.reads_references("test")
    before = {split: dm.split(split).path for split in ("train", "valid", "test")}
    (first_pass / "valid.hyp.txt").write_text("".join(f"A {i} CAT\n" for i in range(len(valid))))
    again = DocumentWindowDataModule(data, vocab, context)
    again.setup()
    assert again.split("valid").path != before["valid"]
    assert again.split("train").path == before["train"] and again.split("test").path == before["test"]


def test_a_first_pass_file_of_another_length_or_a_source_stream_with_one_is_one_error(tmp_path, stream_vocab_dir):
    first_pass = tmp_path / "first_pass"
    first_pass.mkdir()
    (first_pass / "test.hyp.txt").write_text("ONE LINE\n")
    data, vocab, context = configs(tmp_path, stream_vocab_dir, side="target", hypotheses=str(first_pass))
    with pytest.raises(DocMTInputError, match=r"test.hyp.txt.*key 'context.streams.bert.hypotheses'.*1 lines"):
        DocumentWindowDataModule(data, vocab, context).setup()
    with pytest.raises(DocMTInputError, match="key 'context.streams.bert.hypotheses': only a target stream"):
        DocumentWindowDataModule(*configs(tmp_path, stream_vocab_dir, hypotheses=str(first_pass)))
    with pytest.raises(DocMTInputError, match="no such directory"):
        DocumentWindowDataModule(*configs(tmp_path, stream_vocab_dir, side="target", hypotheses=str(tmp_path / "x")))
