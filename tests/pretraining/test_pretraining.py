"""Encoders pretrained in the project (`docmt pretrain`, `lightning_docmt/pretraining/`): tiny BERT and
PEGASUS runs on a small stand-in text learn, write a BERT directory that `transformers` and the stack
read alike, resume to the same weights, and are named by `pretrain:FILE` only once finished."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lightning_docmt import cpu
from lightning_docmt.config import composition as config_lib
from lightning_docmt.config import pretraining as pretraining_config
from lightning_docmt.config.pretrained_files import encoder_settings
from lightning_docmt.config.pretraining import DONE_FILE, load_pretrain_config, output_dir
from lightning_docmt.config.registry import get_arch, model_config
from lightning_docmt.data.pretraining_text import Chapter
from lightning_docmt.data.vocab import WordPieceVocab
from lightning_docmt.data.windows import WindowSpec
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.pretraining import run as pretraining_run
from lightning_docmt.pretraining.archive import archive_encoder
from lightning_docmt.pretraining.bert_files import train_wordpiece
from lightning_docmt.pretraining.run import pretrain
from lightning_docmt.training.run import check_run_inputs
from lightning_docmt.training.stages import check_stages, pretrained_weights, stage_config

WORDS = "the a river stone house dog cat tree sings runs sleeps under over old green small light water".split()


def chapters_of(cfg) -> list[Chapter]:
    """40 chapters of 8 verses: each verse repeats a noun of the chapter (something to predict)."""
    rng = random.Random(3)
    out = []
    for c in range(40):
        nouns = rng.sample(WORDS, 3)
        verses = tuple(" ".join(rng.choice(WORDS + nouns * 4) for _ in range(rng.randint(4, 9))) for _ in range(8))
        out.append(Chapter("web", f"Genesis.{c + 1}", verses))
    return out


def write_config(tmp_path: Path, objective: str, name: str = "p.yaml", **settings) -> Path:
    values = {"objective": objective, "lang": "en", "vocab_size": 120, "width": 32, "heads": 2, "ffn_dim": 64,
              "layers": 2, "decoder_layers": 1, "max_tokens": 64, "batch_rows": 16, "steps": 60,
              "warmup_steps": 4, "val_every_steps": 30, "lr": 2e-3, "held_out": 0.25, "dropout": 0.1,
              "cache_dir": str(tmp_path / "cache"), **settings}
    path = tmp_path / name
    path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in values.items()))
    return path


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("bert")
    config = write_config(tmp, "mlm")
    return config, pretrain(load_pretrain_config(config), chapters_of)


def test_a_masked_lm_learns_and_writes_a_bert_directory(bert_dir):
    _, directory = bert_dir
    record = json.loads((directory / DONE_FILE).read_text())
    first, last = record["history"][0], record["history"][-1]
    assert [h["step"] for h in record["history"]] == [30, 60] and record["held_out_chapters"] >= 5
    # seeds 1-3 (Xeon, float32): held-out loss 3.26/3.27/3.29 -> 3.12/3.07/3.09 nats, against ln(89) =
    # 4.49 for a uniform guess; accuracy 0.04-0.09 against 1/89
    uniform = math.log(record["vocab_size"])
    assert last["mlm/loss"] < first["mlm/loss"] and last["mlm/loss"] < uniform - 0.8
    assert last["mlm/accuracy"] > 1 / record["vocab_size"]
    assert {p.name for p in directory.iterdir()} == {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt",
                                                     "tokenizer_config.json", "special_tokens_map.json", DONE_FILE}
    assert not (directory.parent / f"{directory.name}.work").exists()
    assert len(load_file(str(directory / "model.safetensors"))) == 5 + 2 * 16  # embeddings + 16 per layer


def test_transformers_and_the_stack_read_the_same_encoder(bert_dir):
    """`BertModel.from_pretrained` and a `pas` context encoder loaded from `pretrain:FILE` give the
    same states, token type 1 included; the tokenizer is the one AutoTokenizer loads."""
    from transformers import AutoTokenizer, BertModel

    config, directory = bert_dir
    bert = BertModel.from_pretrained(str(directory), local_files_only=True).eval()
    theirs_tok = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    vocab = WordPieceVocab.from_pretrained(str(directory))
    text = "the old dog sleeps under the green tree"
    assert vocab.tokenizer_ids(vocab.encode(text)) == theirs_tok(text, add_special_tokens=False).input_ids
    spec = f"pretrain:{config}"
    cfg = config_lib.compose(None, ["model.arch=pas", f"model.context_encoders.b.checkpoint={spec}",
                                    "model.stack=[{stream: pc, encoder: b}]", "context.streams.pc.prev=1"],
                             profile="tiny")
    assert cfg.model.context_encoders.b.width == 32 == encoder_settings(spec)["d_model"]
    model = get_arch("pas").model_class(model_config(cfg.model), 60, 60)
    model.load_pretrained(None)
    pair = theirs_tok("the river runs", text, return_tensors="pt")
    ids = torch.tensor([vocab._from_tokenizer[pair["input_ids"][0].numpy()].tolist()])  # contract ids
    types, pad = pair["token_type_ids"], torch.zeros_like(pair["input_ids"], dtype=torch.bool)
    with torch.no_grad():
        expected = bert(**pair).last_hidden_state
    assert (types == 1).any()
    assert torch.allclose(model.context_encoders["b"](ids, types, pad), expected, atol=1e-5)


def test_a_stack_stage_is_another_stage_when_its_encoders_weights_change_at_equal_size(bert_dir, tmp_path):
    """The composed config names the encoder by its files' names and sizes; the stage key also holds
    the digest of its weights, so an encoder retrained to the same sizes is never read stale; a
    random-weight control reads no file."""
    from safetensors.torch import save_file

    from lightning_docmt.training import stages

    directory = tmp_path / "encoder"
    shutil.copytree(bert_dir[1], directory)

    def key(*overrides: str) -> str:
        cfg = config_lib.compose(None, ["model.arch=pas", f"model.context_encoders.b.checkpoint={directory}",
                                        "model.stack=[{stream: pc, encoder: b}]", "context.streams.pc.prev=1",
                                        *overrides], profile="tiny")
        return stages.stage_key(stages.stage_config(cfg, "main"), "main", "")

    before, control = key(), key("model.context_encoders.b.random_weights=true")
    weights = load_file(str(directory / "model.safetensors"))
    save_file({n: t + 1e-3 if n.endswith("dense.weight") else t for n, t in weights.items()},
              str(directory / "model.safetensors"))  # retrained: the same names and sizes
    assert key() != before and key("model.context_encoders.b.random_weights=true") == control != before


def test_a_gap_sentence_model_learns_and_keeps_only_its_encoder(tmp_path):
    directory = pretrain(load_pretrain_config(write_config(tmp_path, "gap_sentence")), chapters_of)
    record = json.loads((directory / DONE_FILE).read_text())
    history = record["history"]  # seeds 1-3: 3.13/3.19/3.19 -> 3.00/3.03/3.10 nats
    assert history[-1]["gap_sentence/loss"] < history[0]["gap_sentence/loss"]
    assert history[-1]["gap_sentence/loss"] < math.log(record["vocab_size"]) - 0.8
    names = load_file(str(directory / "model.safetensors"))
    assert not any("decoder" in n for n in names) and "encoder.layer.1.output.dense.weight" in names


@pytest.mark.parametrize("save_seconds, saves_before_the_stop", [
    (pretraining_run.SAVE_SECONDS, [30]),  # the first validation's save (the run takes seconds)
    (0.0, [1, 2, 3, 4, 5, 6, 7]),  # a wall-time save at every update: stopped at update 7, between validations
])
def test_an_interrupted_run_resumes_to_the_weights_of_the_uninterrupted_one(
        tmp_path, bert_dir, monkeypatch, save_seconds, saves_before_the_stop):
    """The same settings in another cache, stopped right after a save and run again: the weights and
    the held-out history are the uninterrupted run's, whenever the state was saved."""
    config = write_config(tmp_path, "mlm", cache_dir=str(tmp_path / "other"))
    saved_steps = []
    real_save = torch.save

    def save_then_stop(state, *args, **kwargs):
        real_save(state, *args, **kwargs)
        saved_steps.append(state["step"])
        if len(saved_steps) == len(saves_before_the_stop):
            raise KeyboardInterrupt

    monkeypatch.setattr(pretraining_run, "SAVE_SECONDS", save_seconds)
    monkeypatch.setattr(pretraining_run.torch, "save", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        pretrain(load_pretrain_config(config), chapters_of)
    monkeypatch.setattr(pretraining_run.torch, "save", real_save)
    directory = pretrain(load_pretrain_config(config), chapters_of)
    ours, uninterrupted = (load_file(str(d / "model.safetensors")) for d in (directory, bert_dir[1]))
    assert saved_steps == saves_before_the_stop and all(torch.equal(ours[n], uninterrupted[n]) for n in uninterrupted)
    resumed, whole = ([{k: v for k, v in h.items() if k != "seconds"}
                       for h in json.loads((d / DONE_FILE).read_text())["history"]] for d in (directory, bert_dir[1]))
    assert resumed == whole


def test_a_table_composes_before_its_encoder_is_pretrained_and_runs_only_after(tmp_path):
    """The sizes come from the pretraining file; the tokenizer and the weights are what need the
    encoder: each is one error naming its key and the command that makes it."""
    config = write_config(tmp_path, "mlm", seed=9)
    cfg = config_lib.compose(None, ["model.arch=pas", f"model.context_encoders.b.checkpoint=pretrain:{config}",
                                    "model.stack=[{stream: pc, encoder: b}]", "context.streams.pc.prev=1"],
                             profile="tiny")
    assert (cfg.model.context_encoders.b.width, cfg.model.context_encoders.b.layout.vocab_size) == (32, 120)
    with pytest.raises(DocMTInputError, match=r"key 'context.streams.pc.tokenizer'.*docmt pretrain"):
        WindowSpec.from_config(cfg.context)
    model = get_arch("pas").model_class(model_config(cfg.model), 60, 60)
    with pytest.raises(DocMTInputError, match=r"key 'model.context_encoders.b.checkpoint'.*docmt pretrain"):
        model.load_pretrained(None)
    assert not output_dir(load_pretrain_config(config)).exists()


def test_an_archived_encoder_is_found_when_the_cache_lacks_it_and_only_under_its_settings(bert_dir, tmp_path,
                                                                                       monkeypatch):
    """`docmt archive FILE` copies the encoder bit for bit; a checkout without the cache finds the
    copy (pretraining does not run again); changed settings find nothing."""
    config, directory = bert_dir
    archive = tmp_path / "measured"
    monkeypatch.setattr(pretraining_config, "ARCHIVED_ENCODERS", archive / "pretrained")
    archived = archive_encoder(load_pretrain_config(config), archive, str(config))
    assert archived == archive / "pretrained" / directory.name
    assert {p.name: p.read_bytes() for p in archived.iterdir()} == {p.name: p.read_bytes() for p in directory.iterdir()}
    moved = write_config(tmp_path, "mlm", cache_dir=str(tmp_path / "empty_cache"))  # the settings, another cache
    assert pretraining_config.pretrained_output(str(moved), "k") == archived
    assert pretrain(load_pretrain_config(moved), lambda cfg: pytest.fail("pretrained again")) == archived
    changed = write_config(tmp_path, "mlm", name="changed.yaml", cache_dir=str(tmp_path / "empty_cache"), steps=61)
    with pytest.raises(DocMTInputError, match=r"key 'k'.*not pretrained yet.*docmt pretrain"):
        pretraining_config.pretrained_output(str(changed), "k")
    with pytest.raises(DocMTInputError, match=r"no finished encoder.*docmt pretrain"):
        archive_encoder(load_pretrain_config(changed), archive, str(changed))


def test_a_run_needs_only_the_encoders_its_stack_reads_and_checks_them_before_any_stage_trains(bert_dir, tmp_path):
    """A table declares every encoder its rows use (T5: BERT and PEGASUS); a row whose stack reads
    only BERT runs before PEGASUS is pretrained, and a row that reads a missing encoder fails in
    `check_run_inputs`, before its first stage trains (not when its stack stage starts); composing
    and `check_stages` need no encoder at all."""
    config, _ = bert_dir
    missing = write_config(tmp_path, "gap_sentence", name="missing.yaml")
    settings = ["model.arch=pas", f"model.context_encoders.b.checkpoint=pretrain:{config}",
                f"model.context_encoders.g.checkpoint=pretrain:{missing}", "context.streams.pc.prev=1",
                "train.stages.sent={arch: transformer}", "train.stages.stack={init_from: sent}",
                "train.schedule=[sent,stack]", "data.corpus=synthetic:tiny?docs=40&test_docs=10",
                "vocab.type=word", f"data.cache_dir={tmp_path / 'data'}"]
    reads_b = config_lib.compose(None, [*settings, "model.stack=[{stream: pc, encoder: b}]"], profile="tiny")
    check_stages(reads_b)
    check_run_inputs(reads_b)
    assert set(pretrained_weights(stage_config(reads_b, "stack"))) == {"encoder", "context_encoders.b"}
    reads_g = config_lib.compose(None, [*settings, "model.stack=[{stream: pc, encoder: g}]"], profile="tiny")
    check_stages(reads_g)
    with pytest.raises(DocMTInputError, match=r"key 'model.context_encoders.g.checkpoint'.*docmt pretrain"):
        check_run_inputs(reads_g)


def test_the_wordpiece_vocabulary_is_a_function_of_the_text():
    """Two trainings give the same ids (reading D24); characters first, then words by count; a word
    outside the vocabulary is spelt in characters, an unseen character is [UNK]."""
    texts = [v for c in chapters_of(None) for v in c.verses]
    first, second = (train_wordpiece(iter(texts), 60, lowercase=False) for _ in range(2))
    assert first.get_vocab() == second.get_vocab()
    vocab = first.get_vocab()
    assert [vocab[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [0, 1, 2, 3, 4]
    assert first.encode("riverdog", add_special_tokens=False).tokens == ["river", "##d", "##o", "##g"]
    assert first.encode("the river q", add_special_tokens=False).tokens == ["the", "river", "[UNK]"]
    with pytest.raises(ValueError, match="below the"):
        train_wordpiece(iter(texts), 20, lowercase=False)


@pytest.mark.parametrize("setting, key", [("objective: bert", "objective"), ("heads: 3", "heads"),
                                          ("stepz: 3", "stepz"), ("held_out: 0.9", "held_out"),
                                          ("precision: bf16-mixed", "precision")])
def test_a_bad_pretraining_file_is_one_error_naming_the_key(tmp_path, setting, key):
    path = tmp_path / "bad.yaml"
    path.write_text(f"lang: en\n{setting}\n")
    with pytest.raises(DocMTInputError, match=f"key '{key}'"):
        load_pretrain_config(path)


@pytest.mark.parametrize("flags, bf16", [("fpu avx2 avx512f avx512_bf16", True), ("fpu avx2 amx_bf16", True),
                                         ("fpu avx2 avx512f", False)])
def test_precision_fast_pretrains_in_bf16_only_on_cpus_with_native_bf16(monkeypatch, tmp_path, flags, bf16):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    monkeypatch.setattr(cpu, "CPUINFO", cpuinfo)
    assert pretraining_run.uses_bf16("fast") == bf16
    assert pretraining_run.uses_bf16("bf16") and not pretraining_run.uses_bf16("32")
    config = tmp_path / "fast.yaml"
    config.write_text("lang: en\nprecision: fast\n")
    assert load_pretrain_config(config).precision == "fast"


def test_a_long_run_reports_its_progress_between_validations(tmp_path, monkeypatch, capsys):
    """Validations are an hour apart on a CPU: between them a line at most every PROGRESS_SECONDS
    gives the update, the loss, the time per update and the time left."""
    monkeypatch.setattr(pretraining_run, "PROGRESS_SECONDS", 0.0)
    pretrain(load_pretrain_config(write_config(tmp_path, "mlm", steps=8, val_every_steps=8)), chapters_of)
    lines = [line for line in capsys.readouterr().out.splitlines() if " s/update · eta " in line]
    assert [line.split()[3] for line in lines] == [f"{n}/8" for n in range(1, 9)]
    assert all(float(line.split(" · ")[1].split()[1]) > 0 for line in lines)  # the loss
    monkeypatch.setattr(pretraining_run, "PROGRESS_SECONDS", 3600.0)
    pretrain(load_pretrain_config(write_config(tmp_path, "mlm", steps=8, val_every_steps=8, seed=2)), chapters_of)
    assert " s/update · eta " not in capsys.readouterr().out
