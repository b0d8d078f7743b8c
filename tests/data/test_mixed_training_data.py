"""A second corpus' training documents in every training batch (`data.mix`, `data/splits.py`,
`data/prepare.py`, `DocumentWindowDataModule`): Donato, Yu & Dyer 2021, Table 6 (IWSLT+)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from lightning_docmt.batch import PAD_ID
from lightning_docmt.config.schema import ContextConfig, DataConfig, MixConfig, VocabConfig
from lightning_docmt.data.corpora import read_corpus
from lightning_docmt.data.datamodule import DocumentWindowDataModule
from lightning_docmt.data.prepare import cache_layout
from lightning_docmt.data.types import Document
from lightning_docmt.training import stages
from tests.helpers.cli_run import docmt, write_config
from tests.helpers.corpus_fixtures import random_documents, write_jsonl
from tests.helpers.stage_fits import tiny_config

IN_DOMAIN = "synthetic:tiny?docs=40"
CONTEXT = ContextConfig(prev_sentences=2, next_sentences=1)
UNREAD = "ZEBRA"  # a word only in the out-of-domain corpus' own valid and test documents


def out_of_domain_documents() -> list[Document]:
    """Unlabelled documents in upper-case words (the synthetic corpus has none), and a valid and a
    test document that the mixture must not read."""
    docs = [Document(d.doc_id, [s.upper() for s in d.src], [s.lower() for s in d.tgt], None)
            for d in random_documents(60, seed=5)]
    return docs + [Document(f"held-{split}", [UNREAD], [UNREAD.lower()], split) for split in ("valid", "test")]


@pytest.fixture
def data(tmp_path) -> DataConfig:
    other = write_jsonl(tmp_path / "other.jsonl", out_of_domain_documents())
    return DataConfig(corpus=IN_DOMAIN, cache_dir=str(tmp_path / "cache"), max_tokens=1200,
                      mix=MixConfig(corpus=other, share=0.5))


def module(data: DataConfig, share: float = 0.5, **kwargs) -> DocumentWindowDataModule:
    mixed = dataclasses.replace(data, mix=dataclasses.replace(data.mix, share=share))
    return DocumentWindowDataModule(mixed, VocabConfig(type="word", size=1000), CONTEXT, **kwargs)


def batches(dm: DocumentWindowDataModule) -> list[dict]:
    return list(dm.train_dataloader())


def test_the_training_split_holds_both_corpora_valid_and_test_only_the_in_domain_one(data):
    dm = module(data)
    corpus = read_corpus(IN_DOMAIN)
    own, other = dm.training_targets()
    assert len(own) == sum(len(d) for d in corpus.split("train"))
    assert len(other) == sum(len(d) for d in out_of_domain_documents() if d.split is None)
    for split in ("valid", "test"):
        assert dm.references(split) == [t for d in corpus.split(split) for t in d.tgt]
    assert dm.src_vocab.encode(UNREAD) == dm.src_vocab.encode("<unk>")  # its valid/test never read


def test_share_1_trains_on_the_in_domain_documents_alone_with_the_same_vocabulary_and_split(data):
    layouts = [cache_layout(module(data, share).data_cfg, module(data, share).vocab_cfg) for share in (1.0, 0.5)]
    assert layouts[0] == layouts[1]  # one vocabulary and one training split for every share
    dm = module(data, share=1.0)
    own, other = dm.training_targets()
    seen = np.concatenate([b["sent_index"].numpy() for b in batches(dm)])
    assert sorted(seen.tolist()) == own.tolist()
    upper = dm.src_vocab.encode(" ".join(w.upper() for w in ("cat", "river", "stone")))
    assert len(set(upper)) == 3 and dm.src_vocab.encode("<unk>")[0] not in upper  # learnt from both sides
    assert dm.training_pairs() == {"train_pairs": len(own), "mix": {
        "corpus": data.mix.corpus, "share": 1.0, "realised_share": 1.0, "in_domain_pairs": len(own),
        "out_of_domain_pairs": len(other)}}


@pytest.mark.parametrize("seed", [1, 2])
def test_batches_hold_the_share_and_the_record_says_what_they_held(data, seed):
    dm = module(data, seed=seed)
    first_other = dm.training_targets()[1][0]
    own = total = 0
    for batch in batches(dm):
        tokens = (batch["tgt_out"] != PAD_ID).sum(dim=1).numpy()
        in_domain = batch["sent_index"].numpy() < first_other
        assert in_domain.any() and not in_domain.all()
        own, total = own + tokens[in_domain].sum(), total + tokens.sum()
    record = dm.training_pairs()["mix"]
    assert record["realised_share"] == pytest.approx(own / total) and abs(own / total - 0.5) < 0.02


def test_context_windows_never_cross_from_one_corpus_into_the_other(data):
    dm = module(data)
    first_other = dm.training_targets()[1][0]
    upper = set(dm.src_vocab.encode(" ".join({w.upper() for d in out_of_domain_documents() for s in d.src
                                              for w in s.split()} - {UNREAD})))
    read = 0
    for batch in batches(dm):
        for row, sentence in enumerate(batch["sent_index"].tolist()):
            words = {int(i) for key in ("ctx_src", "ctx_next") for i in batch[key][row]} - set(range(5))
            assert words <= upper if sentence >= first_other else not words & upper
            read += bool(words)
    assert read > 100  # windows with words in them were checked


def test_the_mixed_loader_resumes_mid_epoch_and_two_ranks_share_its_epoch(data):
    def order(dm: DocumentWindowDataModule) -> list[list[int]]:
        return [b["sent_index"].tolist() for b in batches(dm)]

    full = order(module(data, seed=3))
    dm = module(data, seed=3)
    it = iter(dm.train_dataloader())
    head = [next(it)["sent_index"].tolist() for _ in range(3)]
    resumed = module(data, seed=3)
    resumed.load_state_dict(dm.state_dict())
    assert head + order(resumed) == full
    shards = [order(module(data, seed=3, rank=r, world_size=2)) for r in range(2)]
    assert len(shards[0]) == len(shards[1])
    assert sorted(i for s in shards for b in s for i in b) == sorted(i for b in full for i in b)


def test_a_stage_sets_the_share_and_keeps_the_corpus(tmp_path):
    cfg = tiny_config(tmp_path, "data.mix.corpus=synthetic:tiny?seed=2",
                      "train.stages.sent={}", "train.stages.mixed={init_from: sent, data: {mix: {share: 0.5}}}",
                      "train.schedule=[sent,mixed]")
    sent, mixed = stages.stage_config(cfg, "sent"), stages.stage_config(cfg, "mixed")
    assert (sent.data.mix.share, mixed.data.mix.share) == (1.0, 0.5)
    assert mixed.data.mix.corpus == sent.data.mix.corpus == "synthetic:tiny?seed=2"


@pytest.mark.parametrize("overrides, culprit", [
    (["data.mix.corpus=synthetic:tiny?seed=2", "data.mix.share=1.5"], "data.mix.share"),
    (["data.mix.corpus=synthetic:tiny?seed=2", "data.mix.share=0"], "data.mix.share"),
    (["data.mix.share=0.5"], "data.mix.corpus"),  # no corpus to draw the rest from
    (["data.mix.corpus=nonesuch:x", "data.mix.share=0.5"], "data.mix.corpus"),
    (["data.mix.corpus=bible:en-fr", "data.corpus=bible:en-de", "data.mix.share=0.5"], "data.mix.corpus"),
    (["data.mix.corpus=synthetic:tiny?seed=2", "data.mix.share=0.5", "data.document_order=true"],
     "data.mix.share"),
])
def test_a_bad_mix_exits_2_with_one_line_naming_the_key_before_the_run_starts(tmp_path, overrides, culprit):
    config = write_config(tmp_path / "run.yaml", "")
    outcome = docmt("fit", config, "--profile", "tiny", *overrides)
    assert outcome.code == 2
    assert len(outcome.err.strip().splitlines()) == 1 and f"key '{culprit}'" in outcome.err
    assert not Path(tmp_path / "runs").exists()
