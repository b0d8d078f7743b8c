from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_docmt.batch import PAD_ID
from lightning_docmt.config.schema import ContextConfig, DataConfig, VocabConfig
from lightning_docmt.data import prepare as prepare_module
from lightning_docmt.data.datamodule import DocumentWindowDataModule
from lightning_docmt.data.prepare import prepare
from tests.helpers.corpus_fixtures import random_documents, write_jsonl

DOCS = random_documents(16, seed=11, splits=("train", "train", "valid", "test"))
CONTEXT = ContextConfig(prev_sentences=2, next_sentences=1, side="mix", max_tokens=32)


@pytest.fixture
def spec(tmp_path) -> str:
    return write_jsonl(tmp_path / "corpus.jsonl", DOCS)


def configs(spec: str, tmp_path: Path, **data) -> tuple[DataConfig, VocabConfig]:
    data = DataConfig(corpus=spec, cache_dir=str(tmp_path / "cache"), **{"max_tokens": 300, **data})
    return data, VocabConfig(type="bpe", size=90)


def sentences(split: str) -> list[tuple[str, str]]:
    return [(s, t) for d in DOCS if d.split == split for s, t in zip(d.src, d.tgt)]


def test_prepare_reports_counts_per_split(spec, tmp_path):
    data, vocab = configs(spec, tmp_path, max_len=8)
    stats = prepare(SimpleNamespace(data=data, vocab=vocab))
    dm = DocumentWindowDataModule(data, vocab, CONTEXT)
    for split in ("train", "valid", "test"):
        pairs = sentences(split)
        got = stats[split]
        assert got["documents"] == sum(d.split == split for d in DOCS)
        assert got["sentences"] == len(pairs)
        assert got["src_tokens"] == sum(len(s.split()) for s, _ in pairs)
        assert got["tgt_subwords"] == sum(len(dm.tgt_vocab.encode(t)) for _, t in pairs)
        too_long = sum(max(len(dm.src_vocab.encode(s)), len(dm.tgt_vocab.encode(t))) > 8
                       for s, t in pairs)
        assert got["filtered"] == (too_long if split == "train" else 0)
        assert got["targets"] == got["sentences"] - got["filtered"]
    assert stats["train"]["filtered"] > 0
    assert stats["vocab"]["joint"] and stats["vocab"]["src_size"] <= 90


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.subprocess)])  # 2: loader processes
def test_end_to_end_batches_cover_the_splits(spec, tmp_path, workers):
    data, vocab = configs(spec, tmp_path, max_len=12, num_workers=workers)
    dm = DocumentWindowDataModule(data, vocab, CONTEXT)
    dm.prepare_data()
    dm.setup("fit")
    seen = []
    for batch in dm.train_dataloader():
        assert {"src", "tgt_in", "tgt_out", "ctx_src", "ctx_next", "ctx_tgt"} <= set(batch)
        assert batch["src"].shape[0] * (batch["src"].shape[1] + batch["tgt_in"].shape[1]) <= 300
        seen += batch["sent_index"].tolist()
    assert sorted(seen) == dm.split("train").targets.tolist()
    valid = [i for batch in dm.val_dataloader() for i in batch["sent_index"].tolist()]
    assert sorted(valid) == list(range(len(sentences("valid"))))
    assert dm.references("valid") == [t for _, t in sentences("valid")]
    assert dm.source_texts("test") == [s for s, _ in sentences("test")]


def test_split_override_takes_an_unlabelled_corpus_whole(tmp_path):
    train_spec = write_jsonl(tmp_path / "train.jsonl", random_documents(4, seed=1))
    extra = random_documents(3, seed=2, splits=(None,))
    test_spec = write_jsonl(tmp_path / "extra.jsonl", extra)
    data, vocab = configs(train_spec, tmp_path, test=test_spec)
    dm = DocumentWindowDataModule(data, vocab, ContextConfig())
    dm.setup()
    assert dm.references("test") == [t for d in extra for t in d.tgt]
    assert dm.val_dataloader() == []  # no valid documents anywhere: Lightning skips validation


def test_setup_without_prepare_builds_then_later_runs_only_load(spec, tmp_path, monkeypatch):
    data, vocab = configs(spec, tmp_path)
    DocumentWindowDataModule(data, vocab, CONTEXT).setup()  # builds: prepare_data never ran

    def no_reading(spec):
        raise AssertionError("corpora must not be read once the caches exist")

    monkeypatch.setattr(prepare_module, "read_corpus", no_reading)
    dm = DocumentWindowDataModule(data, vocab, CONTEXT)
    dm.prepare_data()
    dm.setup()
    assert len(dm.references("valid")) == len(sentences("valid"))


def test_rank_and_world_size_from_arguments_shard_the_training_epoch(spec, tmp_path):
    data, vocab = configs(spec, tmp_path, max_tokens=120)
    shards = []
    for rank in range(2):
        dm = DocumentWindowDataModule(data, vocab, CONTEXT, rank=rank, world_size=2)
        shards.append([b["sent_index"].tolist() for b in dm.train_dataloader()])
    assert len(shards[0]) == len(shards[1])
    assert {i for s in shards for b in s for i in b} == set(dm.split("train").targets.tolist())


def test_document_order_mode(spec, tmp_path):
    data, vocab = configs(spec, tmp_path, document_order=True, max_documents=2)
    dm = DocumentWindowDataModule(data, vocab, CONTEXT)
    position: dict[int, int] = {}
    for batch in dm.train_dataloader():
        assert len(set(batch["doc_index"].tolist())) == len(batch["doc_index"]) <= 2
        for d, p in zip(batch["doc_index"].tolist(), batch["pos_in_doc"].tolist()):
            assert p == position.get(d, -1) + 1  # no filtering here: every sentence, in order
            position[d] = p
        first = batch["pos_in_doc"] == 0
        assert (batch["ctx_tgt"][first, 1:] == PAD_ID).all()  # empty context: one <eos>


def test_seed_defaults_to_the_lightning_global_seed(spec, tmp_path, monkeypatch):
    data, vocab = configs(spec, tmp_path, max_tokens=120)

    def order(**kwargs):
        dm = DocumentWindowDataModule(data, vocab, CONTEXT, **kwargs)
        return [b["sent_index"].tolist() for b in dm.train_dataloader()]

    monkeypatch.setenv("PL_GLOBAL_SEED", "5")
    assert order() == order(seed=5) != order(seed=6)


def test_datamodule_state_resumes_the_training_loader(spec, tmp_path):
    data, vocab = configs(spec, tmp_path, max_tokens=120)
    full = [b["sent_index"].tolist() for b in DocumentWindowDataModule(data, vocab, CONTEXT, seed=3)
            .train_dataloader()]
    dm = DocumentWindowDataModule(data, vocab, CONTEXT, seed=3)
    it = iter(dm.train_dataloader())
    head = [next(it)["sent_index"].tolist() for _ in range(3)]
    resumed = DocumentWindowDataModule(data, vocab, CONTEXT, seed=3)
    resumed.load_state_dict(dm.state_dict())
    assert head + [b["sent_index"].tolist() for b in resumed.train_dataloader()] == full


class _RecordingModule(pl.LightningModule):
    """Trains one scalar and records the sentences of every training batch."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[list[int]] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch["sent_index"].tolist())
        return (self.w * batch["src"].float().mean()).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.fit
@pytest.mark.parametrize("workers,stop", [(0, "step"), (2, "step"), (2, "epoch")])
def test_lightning_resume_sees_exactly_the_uninterrupted_batches(spec, tmp_path, workers, stop):
    data, vocab = configs(spec, tmp_path, max_tokens=120, num_workers=workers)
    trainer_args = dict(max_epochs=2, logger=False, enable_progress_bar=False, accelerator="cpu",
                        enable_model_summary=False, limit_val_batches=0)

    def fit(module, ckpt_path=None, **overrides):
        kwargs = {**trainer_args, "enable_checkpointing": False, **overrides}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dm = DocumentWindowDataModule(data, vocab, CONTEXT)
            pl.Trainer(**kwargs).fit(module, datamodule=dm, ckpt_path=ckpt_path)

    full = _RecordingModule()
    fit(full)
    every = 3 if stop == "step" else None
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=every,
                                 save_top_k=-1)
    head = _RecordingModule()
    limit = {"max_steps": 3} if stop == "step" else {"max_epochs": 1}
    fit(head, callbacks=[checkpoint], enable_checkpointing=True, **limit)
    tail = _RecordingModule()
    fit(tail, ckpt_path=checkpoint.last_model_path or checkpoint.best_model_path)
    assert 0 < len(head.seen) < len(full.seen)
    assert head.seen + tail.seen == full.seen
