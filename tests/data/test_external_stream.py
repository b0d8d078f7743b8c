"""The external context stream `ctx_ext`: a second tokenizer with its own ids and pad id.

The stand-in external tokenizer is a word vocabulary of its own whose padding is relabelled to
id 7 (ids 0 and 7 swap), so that a real token has id 0 = `PAD_ID`: nothing may tell padding by
the id, only by `ctx_ext_pad`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from lightning_docmt.batch import EOS_ID, PAD_ID, SEP_ID
from lightning_docmt.config.composition import compose
from lightning_docmt.config.schema import ContextConfig, DataConfig, ExternalContextConfig, VocabConfig
from lightning_docmt.data.cache import build_cache, load_cache
from lightning_docmt.data.collate import collate, row_lengths
from lightning_docmt.data.datamodule import DocumentWindowDataModule
from lightning_docmt.data.prepare import cache_layout, prepare
from lightning_docmt.data.tokenizers import VocabularyTokenizer, load_tokenizer
from lightning_docmt.data.types import Document
from lightning_docmt.data.vocab import WordVocab
from lightning_docmt.data.windows import ExternalWindow, WindowSpec
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.inference.loaded_model import LoadedModel
from lightning_docmt.inference.translate import batches, binarize_documents
from tests.helpers.corpus_fixtures import random_documents, write_jsonl

PAD = 7  # the external tokenizer's pad id
DOCS = random_documents(14, seed=21, splits=("train", "train", "valid", "test"))
MAIN_VOCAB = WordVocab.train([s for d in DOCS for s in d.src + d.tgt], size=500)
# Its own vocabulary: source side only, small enough to have <unk>s, ids unrelated to MAIN_VOCAB's.
EXT_VOCAB = WordVocab.train([s for d in DOCS for s in reversed(d.src)], size=16)
WORD_AT_PAD = EXT_VOCAB.piece(PAD)  # encoded as id 0 once relabelled


def tokenizer(pad_id: int = PAD) -> VocabularyTokenizer:
    return VocabularyTokenizer(EXT_VOCAB, pad_id)


@pytest.fixture(scope="module")
def ext_vocab_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("ext_vocab")
    EXT_VOCAB.save(directory)
    return directory


def expected_row(tok: VocabularyTokenizer, doc: Document, j: int, k: int, max_tokens: int
                 ) -> list[int]:
    """`ctx_ext` of sentence j of `doc`, written from the documents (not from the cache)."""
    ids: list[int] = []
    for n, sentence in enumerate(doc.src[max(0, j - k):j]):
        ids += ([tok.sep_id] if n else []) + tok.encode(sentence)
    return ids[max(0, len(ids) - (max_tokens - 1)):] + [tok.eos_id]


# ------------------------------------------------------------------------------- tokenizer
def test_vocabulary_tokenizer_swaps_padding_with_id_zero():
    tok = tokenizer()
    sentences = [s for d in DOCS for s in d.src]
    assert tok.encode(WORD_AT_PAD) == [PAD_ID]
    for sentence, ids in zip(sentences, tok.encode_batch(sentences)):
        expected = [PAD_ID if i == PAD else i for i in EXT_VOCAB.encode(sentence)]
        assert ids == expected and PAD not in ids
    assert (tok.pad_id, tok.eos_id, tok.sep_id, tok.bos_id) == (PAD, EOS_ID, SEP_ID, None)
    assert len(tok) == len(EXT_VOCAB)
    assert tokenizer(EOS_ID).eos_id == PAD_ID  # the specials are relabelled too
    assert tokenizer(PAD_ID).encode_batch(sentences) == EXT_VOCAB.encode_batch(sentences)
    with pytest.raises(ValueError):
        tokenizer(len(EXT_VOCAB))


def test_fingerprint_follows_the_ids(ext_vocab_dir):
    other = WordVocab.train([s for d in DOCS for s in d.src], size=17)
    prints = {tokenizer(7).fingerprint, tokenizer(9).fingerprint,
              VocabularyTokenizer(other, 7).fingerprint}
    assert len(prints) == 3
    assert load_tokenizer(f"vocab:{ext_vocab_dir}?pad_id=7").fingerprint == tokenizer(7).fingerprint


def test_tokenizer_specs(ext_vocab_dir):
    tok = load_tokenizer(f"vocab:{ext_vocab_dir}?pad_id={PAD}")
    assert tok.pad_id == PAD and tok.encode(WORD_AT_PAD) == [PAD_ID]
    assert load_tokenizer(f"vocab:{ext_vocab_dir}").pad_id == PAD_ID


@pytest.mark.parametrize("spec,message", [
    ("", "expected one of vocab:DIR, hf:NAME"),
    ("spm:model", "expected one of"),
    ("vocab:{dir}/missing", "no vocabulary saved"),
    ("vocab:{dir}?pad=7", "unknown option 'pad'"),
    ("vocab:{dir}?pad_id=-1", "non-negative integer"),
    ("vocab:{dir}?pad_id=16", "not an id of a 16-token vocabulary"),
    ("hf:{dir}/missing", "pip install transformers" if importlib.util.find_spec("transformers") is None
     else "no such"),
])
def test_bad_tokenizer_specs_fail_with_one_line_naming_the_key(ext_vocab_dir, spec, message):
    with pytest.raises(DocMTInputError, match="key 'context.external.tokenizer'") as err:
        load_tokenizer(spec.format(dir=ext_vocab_dir))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_pretrained_encoders_own_wordpiece_tokenizer_lays_out_its_bert_row():
    """`hf:minilm`: the ids of `WordPieceVocab`, which `pretrained_ids` maps to the checkpoint's own
    ids; the two previous sentences of a row read `[CLS] a [SEP] b [SEP]` for the encoder, as the
    checkpoint's own tokenizer lays out a pair."""
    from transformers import AutoTokenizer

    from lightning_docmt.config.pretrained_files import pretrained_dir

    tok = load_tokenizer("hf:minilm")
    theirs = AutoTokenizer.from_pretrained(str(pretrained_dir("minilm")), local_files_only=True)
    a, b, current = "In the beginning God created the heavens.", "The earth was formless.", "Light!"
    encoded = [tok.encode(text) for text in (a, b, current)]
    ids = np.array([i for sentence in encoded for i in sentence])
    offsets = np.cumsum([0] + [len(sentence) for sentence in encoded])
    window = ExternalWindow(size=2, max_tokens=64, pad_id=tok.pad_id, eos_id=tok.eos_id,
                            sep_id=tok.sep_id, bos_id=tok.bos_id)
    row = window.window(ids, offsets, 2, 0, 3)  # sentence 2's two previous sentences
    assert tok.vocab.pretrained_ids[row].tolist() == theirs(a, b)["input_ids"]
    assert tok.pad_id == PAD_ID and tok.vocab.pretrained_ids[tok.pad_id] == theirs.pad_token_id
    assert load_tokenizer("hf:minilm").fingerprint == tok.fingerprint


# ----------------------------------------------------------------------------------- windows
# doc 0: sentences [10 11] [12] [13 14 15]; doc 1: [20] [21 22]
IDS = np.array([10, 11, 12, 13, 14, 15, 20, 21, 22])
OFFSETS = np.array([0, 2, 3, 6, 7, 9])
DOC_OFFSETS = np.array([0, 3, 5])
BOS, SEP, EOS = 101, 102, 103


def ext_window(max_tokens=100, sep_id=SEP, bos_id=BOS) -> ExternalWindow:
    return ExternalWindow(size=2, max_tokens=max_tokens, pad_id=PAD, eos_id=EOS, sep_id=sep_id,
                          bos_id=bos_id)


def rows(window: ExternalWindow, sentences=range(5)) -> list[list[int]]:
    doc = np.searchsorted(DOC_OFFSETS, list(sentences), side="right") - 1
    return [window.window(IDS, OFFSETS, i, DOC_OFFSETS[d], DOC_OFFSETS[d + 1]).tolist()
            for i, d in zip(sentences, doc)]


def test_external_window_uses_the_tokenizers_specials_inside_the_document():
    assert rows(ext_window()) == [[BOS, EOS], [BOS, 10, 11, EOS], [BOS, 10, 11, SEP, 12, EOS],
                                  [BOS, EOS], [BOS, 20, EOS]]  # sentence 3 starts document 1
    assert rows(ext_window(sep_id=None, bos_id=None), [2]) == [[10, 11, 12, EOS]]


def test_external_window_truncation_keeps_the_newest_tokens_and_the_specials():
    assert rows(ext_window(max_tokens=4), [2]) == [[BOS, SEP, 12, EOS]]
    assert rows(ext_window(max_tokens=3, bos_id=None), [2]) == [[SEP, 12, EOS]]
    assert rows(ext_window(max_tokens=2), [2]) == [[BOS, EOS]]


@pytest.mark.parametrize("max_tokens,sep_id,bos_id", [(100, SEP, BOS), (5, SEP, BOS),
                                                      (3, None, BOS), (4, SEP, None)])
def test_vectorised_external_lengths_match_the_rows(max_tokens, sep_id, bos_id):
    window = ext_window(max_tokens, sep_id, bos_id)
    index = np.arange(5)
    doc = np.searchsorted(DOC_OFFSETS, index, side="right") - 1
    lengths = window.lengths(OFFSETS, index, DOC_OFFSETS[doc], DOC_OFFSETS[doc + 1])
    assert lengths.tolist() == [len(r) for r in rows(window)]


def test_external_window_from_config():
    external = ExternalContextConfig(tokenizer="unused: the tokenizer is given", max_tokens=9)
    spec = WindowSpec.from_config(ContextConfig(prev_sentences=3, side="target",
                                                external=external), tokenizer())
    assert spec.external == ExternalWindow(size=3, max_tokens=9, pad_id=PAD, eos_id=EOS_ID,
                                           sep_id=SEP_ID, bos_id=None)
    joined = WindowSpec.from_config(ContextConfig(prev_sentences=1, separator=False,
                                                  external=external), tokenizer())
    assert joined.external.sep_id is None
    assert WindowSpec.from_config(ContextConfig(prev_sentences=2)).external is None
    with pytest.raises(DocMTInputError, match="key 'context.external': needs"):
        WindowSpec.from_config(ContextConfig(next_sentences=1, external=external), tokenizer())
    with pytest.raises(DocMTInputError, match="key 'context.external.max_tokens'"):
        WindowSpec.from_config(ContextConfig(prev_sentences=1, external=ExternalContextConfig(
            tokenizer="x", max_tokens=0)), tokenizer())


# ------------------------------------------------------------------------- cache and batches
@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    """The same documents binarized without and with the external stream (2-sentence chunks)."""
    docs = DOCS + [Document("long", [WORD_AT_PAD] * 3 + ["river " * 9, "a", "b"], ["X"] * 6)]
    out = {}
    for name, external in (("plain", None), ("ext", tokenizer())):
        directory = tmp_path_factory.mktemp(name)
        build_cache(docs, MAIN_VOCAB, MAIN_VOCAB, directory, keep_text=True, chunk_sentences=2,
                    external=external)
        out[name] = load_cache(directory)
    return out, docs


def test_the_cache_holds_the_external_ids_and_leaves_the_rest_untouched(splits):
    (caches, docs), tok = splits, tokenizer()
    plain, ext = caches["plain"], caches["ext"]
    sources = [s for d in docs for s in d.src]
    assert [ext.ext[i].tolist() for i in range(len(sources))] == tok.encode_batch(sources)
    assert ext.meta["external"] == {"fingerprint": tok.fingerprint, "dtype": "uint16"}
    assert ext.meta["ext_subwords"] == sum(map(len, tok.encode_batch(sources)))
    assert plain.ext is None and "external" not in plain.meta and "ext_subwords" not in plain.meta
    plain_files = {p.name for p in plain.path.iterdir()}
    assert {p.name for p in ext.path.iterdir()} - plain_files == {"ext.ids", "ext.offsets"}
    for name in plain_files - {"meta.json"}:
        assert (plain.path / name).read_bytes() == (ext.path / name).read_bytes(), name


def test_batches_carry_ctx_ext_padded_with_its_own_pad_id(splits):
    (caches, docs), tok = splits, tokenizer()
    split = caches["ext"]
    spec = WindowSpec(prev_src=2, max_tokens=64,
                      external=ExternalWindow.from_config(ContextConfig(
                          prev_sentences=2, external=ExternalContextConfig("x", max_tokens=6)),
                          tok))
    where = [(d, j) for d, doc in enumerate(docs) for j in range(len(doc))]
    index = np.arange(len(where))[::-1]
    batch = collate(split, index, spec)
    ext, pad = batch["ctx_ext"], batch["ctx_ext_pad"]
    assert ext.dtype == torch.int64 and pad.dtype == torch.bool and ext.shape == pad.shape
    truncated = 0
    for b, i in enumerate(index):
        d, j = where[i]
        row = expected_row(tok, docs[d], j, k=2, max_tokens=6)
        truncated += len(expected_row(tok, docs[d], j, k=2, max_tokens=99)) > len(row)
        assert ext[b, :len(row)].tolist() == row
        assert pad[b].tolist() == [False] * len(row) + [True] * (ext.shape[1] - len(row))
        assert (ext[b, len(row):] == PAD).all()
        if j == 0:  # never reaches into the previous document
            assert row == [tok.eos_id]
    assert truncated > 0  # the document "long" exceeds max_tokens
    assert ((ext == PAD_ID) & ~pad).any()  # id 0 is a real token here, not padding
    lengths = row_lengths(split, spec, index)
    assert lengths.shape[0] == 4 and (lengths[-1] == (~pad).sum(1).numpy()).all()
    assert (lengths[:3] == row_lengths(caches["plain"], WindowSpec(prev_src=2, max_tokens=64),
                                       index)).all()


class EosPaddedTokenizer:
    """An `ExternalTokenizer` that pads with its eos id, as GPT-2-style tokenizers do: only the
    mask can tell a row's final eos from padding."""

    bos_id = None

    def __init__(self, inner: VocabularyTokenizer):
        self.inner = inner
        self.pad_id = self.eos_id = inner.eos_id
        self.sep_id = inner.sep_id
        self.fingerprint = f"eos-padded:{inner.fingerprint}"

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)

    def encode_batch(self, texts) -> list[list[int]]:
        return self.inner.encode_batch(texts)

    def __len__(self) -> int:
        return len(self.inner)


def test_the_mask_tells_padding_even_when_the_pad_id_is_a_real_id(splits):
    (caches, _), tok = splits, EosPaddedTokenizer(tokenizer())
    external = ExternalWindow.from_config(ContextConfig(
        prev_sentences=2, external=ExternalContextConfig("x", max_tokens=6)), tok)
    index = np.arange(caches["ext"].n_sentences)
    batch = collate(caches["ext"], index, WindowSpec(external=external))
    ext, pad = batch["ctx_ext"], batch["ctx_ext_pad"]
    lengths = (~pad).sum(1)
    assert (ext[torch.arange(len(index)), lengths - 1] == tok.pad_id).all()  # eos, not padding
    assert (ext[pad] == tok.pad_id).all() and pad.any() and (lengths >= 1).all()
    assert (lengths.numpy() == row_lengths(caches["ext"], WindowSpec(external=external),
                                           index)[-1]).all()


def test_a_split_without_the_stream_cannot_give_ctx_ext(splits):
    (caches, _), spec = splits, WindowSpec(external=ext_window())
    with pytest.raises(ValueError, match="without the external stream"):
        collate(caches["plain"], [0], spec)


# ------------------------------------------------------------------------------ datamodule
def configs(tmp_path: Path, spec: str, ext_dir: Path, pad_id: int | None = PAD, **context):
    data = DataConfig(corpus=spec, cache_dir=str(tmp_path / "cache"), max_tokens=400)
    tokenizer_spec = f"vocab:{ext_dir}" + ("" if pad_id is None else f"?pad_id={pad_id}")
    external = ExternalContextConfig(tokenizer=tokenizer_spec, max_tokens=8)
    ctx = ContextConfig(**{"prev_sentences": 2, "side": "mix", "external": external, **context})
    return data, VocabConfig(type="word", size=200), ctx


def test_datamodule_batches_and_prepare_stats(tmp_path, ext_vocab_dir):
    spec = write_jsonl(tmp_path / "c.jsonl", DOCS)
    data, vocab, context = configs(tmp_path, spec, ext_vocab_dir)
    stats = prepare(SimpleNamespace(data=data, vocab=vocab, context=context))
    assert stats["train"]["ext_subwords"] > 0
    dm = DocumentWindowDataModule(data, vocab, context)
    batches = list(dm.train_dataloader()) + list(dm.val_dataloader())
    for batch in batches:
        ext, pad = batch["ctx_ext"], batch["ctx_ext_pad"]
        assert (ext[pad] == PAD).all() and not pad[:, 0].any() and ext.shape[1] <= 8
        assert ext.shape[1] == (~pad).sum(1).max()  # padded to the longest row, no further
        first = batch["pos_in_doc"] == 0
        assert (ext[first, 0] == EOS_ID).all() and pad[first, 1:].all()
    assert sum(len(b["sent_index"]) for b in batches) == len(dm.split("train").targets) + sum(
        len(d) for d in DOCS if d.split == "valid")


def test_the_split_key_follows_the_external_tokenizer(tmp_path, ext_vocab_dir):
    spec = write_jsonl(tmp_path / "c.jsonl", DOCS)
    data, vocab, context = configs(tmp_path, spec, ext_vocab_dir)
    plain = cache_layout(data, vocab)
    layouts = [cache_layout(data, vocab, tokenizer(pad)) for pad in (7, 9)]
    for layout in layouts:
        assert layout.vocab_dir == plain.vocab_dir
    dirs = [set(layout.split_dirs.values()) for layout in (plain, *layouts)]
    assert all(not a & b for n, a in enumerate(dirs) for b in dirs[n + 1:])
    assert cache_layout(data, vocab, tokenizer(7)) == layouts[0]  # stable across loads
    dm = DocumentWindowDataModule(data, vocab, context)
    dm.setup()
    assert dm.split("train").path == layouts[0].split_dirs["train"]
    other = DocumentWindowDataModule(*configs(tmp_path, spec, ext_vocab_dir, pad_id=9))
    other.setup()  # a new tokenizer: a new cache, built next to the first
    assert other.split("train").path == layouts[1].split_dirs["train"]
    # id 9 is a word of the first tokenizer and the padding of the second
    assert 9 in np.asarray(dm.split("train").ext.ids)
    assert 9 not in np.asarray(other.split("train").ext.ids)
    assert not any(Path(d, "ext.ids").exists() for d in plain.split_dirs.values())


def test_without_the_stream_batches_have_no_external_keys(tmp_path, ext_vocab_dir):
    spec = write_jsonl(tmp_path / "c.jsonl", DOCS)
    data, vocab, context = configs(tmp_path, spec, ext_vocab_dir, external=None)
    dm = DocumentWindowDataModule(data, vocab, context)
    assert dm.external is None and dm.window.external is None
    batch = next(iter(dm.train_dataloader()))
    assert not {"ctx_ext", "ctx_ext_pad"} & set(batch)
    assert all(t.dtype == torch.int64 for t in batch.values())


# ---------------------------------------------------------------------------------- config
def test_the_config_block_is_off_by_default_and_checked():
    assert compose(None).context.external is None
    cfg = compose(None, ["context.external.tokenizer=vocab:/some/dir",
                         "context.external.max_tokens=64"])
    assert (cfg.context.external.tokenizer, cfg.context.external.max_tokens) == (
        "vocab:/some/dir", 64)
    with pytest.raises(DocMTInputError, match="context.external.tokenizr"):
        compose(None, ["context.external.tokenizr=vocab:/some/dir"])


def test_documents_binarized_for_inference_carry_the_external_stream(tmp_path, ext_vocab_dir):
    """`docmt translate` / `contrastive` binarize raw documents themselves: a model that reads
    `ctx_ext` gets it there too, built as in training."""
    _, _, context = configs(tmp_path, "unused", ext_vocab_dir, side="source")
    cfg = OmegaConf.create({"context": OmegaConf.structured(context)})
    model = LoadedModel(model=None, cfg=cfg, src_vocab=MAIN_VOCAB, tgt_vocab=MAIN_VOCAB)
    docs = [d for d in DOCS if d.split != "train"]
    split = binarize_documents(docs, model, tmp_path)
    where = [(doc, j) for doc in docs for j in range(len(doc))]
    seen = 0
    for batch in batches(split, np.arange(len(where)), model.window, 400, torch.device("cpu")):
        ext, pad = batch["ctx_ext"], batch["ctx_ext_pad"]
        for b, i in enumerate(batch["sent_index"].tolist()):
            doc, j = where[i]
            assert ext[b][~pad[b]].tolist() == expected_row(tokenizer(), doc, j, k=2, max_tokens=8)
            seen += 1
    assert seen == len(where)
