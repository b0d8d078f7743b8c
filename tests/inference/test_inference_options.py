"""What `docmt translate`, `test` and `contrastive` are told at inference time: `--device`,
`--lenpen` and the refusal to test or translate with reference target context.

One tiny `transformer` run on `synthetic:tiny` is shared by every test. A model that reads previous
*target* sentences is made from it by rewriting `context.side` in a copy of its checkpoint (the
Transformer ignores `ctx_tgt`, so the weights still fit): the refusal depends only on the config.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import torch
from omegaconf import OmegaConf

from lightning_docmt.batch import EOS_ID, PAD_ID
from lightning_docmt.data.corpora import read_corpus
from lightning_docmt.data.synthetic import write_contrastive_suite
from lightning_docmt.data.types import Document
from lightning_docmt.inference import decoding
from lightning_docmt.inference.loaded_model import load_checkpoint
from lightning_docmt.inference.translate import translate_documents
from tests.helpers.cli_run import docmt, run_dir_of
from tests.helpers.run_env import single_process_run_env

pytestmark = pytest.mark.fit

CORPUS = "synthetic:tiny"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The run dir, its checkpoint, a two-document input file and the working directory."""
    root = tmp_path_factory.mktemp("inference")
    with single_process_run_env() as mp:
        mp.chdir(root)
        config = root / "run.yaml"
        config.write_text(f"data:\n  corpus: {CORPUS}\n  cache_dir: {root / 'cache'}\n"
                          f"logging:\n  runs_dir: {root / 'runs'}\n"
                          "train:\n  max_steps: 20\n  val_every_steps: 20\n")
        run_dir = run_dir_of(docmt("fit", config, "--profile", "tiny"))
        docs = [d.src[:3] for d in read_corpus(CORPUS).documents if d.split == "test"][:2]
        source = root / "docs.jsonl"
        source.write_text("".join(json.dumps({"doc_id": f"d{i}", "src": doc}) + "\n"
                                  for i, doc in enumerate(docs)), encoding="utf-8")
        checkpoint = Path(json.loads((run_dir / "run.json").read_text())["checkpoint"])
        yield {"root": root, "run_dir": run_dir, "checkpoint": checkpoint, "source": source}


def translations(path: Path) -> list[list[str]]:
    return [json.loads(line)["hyp"] for line in path.read_text(encoding="utf-8").splitlines()]


def assert_one_error_line(outcome, *needles: str) -> None:
    assert outcome.code == 2, outcome.err
    assert len(outcome.err.strip().splitlines()) == 1, outcome.err
    assert all(n in outcome.err for n in needles), outcome.err


def test_translate_on_the_cpu_equals_the_default_device_here(run):
    out_cpu, out_default = run["root"] / "cpu.jsonl", run["root"] / "default.jsonl"
    common = ["translate", "--ckpt", run["checkpoint"], "--input", run["source"]]
    assert docmt(*common, "--output", out_cpu, "--device", "cpu").code == 0
    assert docmt(*common, "--output", out_default).code == 0
    assert translations(out_cpu) == translations(out_default)
    assert any(h for doc in translations(out_cpu) for h in doc)


def test_test_on_the_cpu_reproduces_the_runs_metrics(run):
    outcome = docmt("test", run["run_dir"], "--device", "cpu", "--json")
    assert outcome.code == 0, outcome.err
    stored = json.loads((run["run_dir"] / "metrics.json").read_text())
    scores = json.loads(outcome.out)
    assert scores["test/bleu"] == stored["test/bleu"] and scores["env/device"] == "cpu"


@pytest.mark.parametrize("device, needle", [("tpu", "tpu"), ("cuda:99", "cuda:99"),
                                            ("not a device", "not a device")])
@pytest.mark.parametrize("command", ["translate", "test", "contrastive"])
def test_a_device_that_is_not_here_is_one_error_line(run, command, device, needle):
    output = run["root"] / "never.jsonl"
    argv = {"translate": ["translate", "--ckpt", run["checkpoint"], "--input", run["source"],
                          "--output", output],
            "test": ["test", run["run_dir"]],
            "contrastive": ["contrastive", "--ckpt", run["checkpoint"], "--suite", run["source"]]}
    assert_one_error_line(docmt(*argv[command], "--device", device), "--device", needle)
    assert not output.exists()


def test_lenpen_reaches_beam_search_and_leaves_the_model_config_alone(run, monkeypatch):
    model = load_checkpoint(run["checkpoint"], "cpu")
    configured = model.cfg.decode.len_penalty
    assert configured != 0.25  # the value below must differ from the configured one
    seen: list[float] = []
    search = decoding.beam_search

    def recording(*args, **kwargs):
        seen.append(kwargs["len_penalty"])
        return search(*args, **kwargs)

    monkeypatch.setattr(decoding, "beam_search", recording)
    documents = [Document(doc_id="d", src=["the dog ."], tgt=[""])]
    translate_documents(model, documents, beam=2, len_penalty=0.25)
    assert seen and set(seen) == {0.25}
    assert model.cfg.decode.len_penalty == configured


@pytest.fixture(scope="module")
def target_context(run: dict[str, Path]) -> dict[str, Path]:
    """A copy of the run (checkpoint and config.yaml) whose config reads one previous target
    sentence."""
    checkpoint = torch.load(run["checkpoint"], map_location="cpu", weights_only=False)
    config = checkpoint["hyper_parameters"]["config"]
    config["context"].update(side="target", prev_sentences=1)
    run_dir = run["root"] / "target_run"
    run_dir.mkdir()
    torch.save(checkpoint, run_dir / "target.ckpt")
    OmegaConf.save(OmegaConf.create(config), run_dir / "config.yaml")
    return {"run_dir": run_dir, "checkpoint": run_dir / "target.ckpt"}


def test_translating_with_target_context_reads_the_models_own_previous_translations(target_context, monkeypatch):
    """Each document in order; `ctx_tgt` of sentence j is the translation just output for sentence
    j - 1 (then `<eos>`), never a reference (the input has none)."""
    model = load_checkpoint(target_context["checkpoint"])
    seen = []  # (sent_index, ctx_tgt rows, outputs) per decoded batch
    decode = decoding.best_tokens

    def recording(network, batch, *args, **kwargs):
        outputs = decode(network, batch, *args, **kwargs)
        seen.append((batch["sent_index"].tolist(), batch["ctx_tgt"].tolist(), outputs))
        return outputs

    monkeypatch.setattr(decoding, "best_tokens", recording)
    documents = [Document("a", ["the dog .", "the cat .", "a dog ."], ["", "", ""]),
                 Document("b", ["the cat ."], [""])]
    translate_documents(model, documents, beam=2, len_penalty=0.6)
    output = {i: out for indices, _, outs in seen for i, out in zip(indices, outs)}
    read = {i: [t for t in row if t != PAD_ID] for indices, rows, _ in seen for i, row in zip(indices, rows)}
    assert sorted(read) == [0, 1, 2, 3]
    assert read[0] == read[3] == [EOS_ID]  # first sentences: the empty context
    assert read[1] == output[0] + [EOS_ID] and read[2] == output[1] + [EOS_ID]


def test_testing_with_target_context_needs_document_order(target_context, tmp_path):
    """`docmt test` tests the config of the stage it tests: here one of a model that reads its
    context (the concatenation model; a Transformer's stage reads none)."""
    config = OmegaConf.load(target_context["run_dir"] / "config.yaml")
    config.model.arch = "concat"
    OmegaConf.save(config, tmp_path / "config.yaml")
    outcome = docmt("test", tmp_path, "--ckpt", target_context["checkpoint"])
    assert_one_error_line(outcome, "data.document_order", "test BLEU")


def test_fitting_with_target_context_without_document_order_is_refused_before_training(run):
    config = run["root"] / "target.yaml"
    config.write_text(f"data:\n  corpus: {CORPUS}\n  cache_dir: {run['root'] / 'cache'}\n"
                      f"logging:\n  runs_dir: {run['root'] / 'target_runs'}\n"
                      "context:\n  side: mix\n  prev_sentences: 1\ntrain:\n  max_steps: 2\n")
    outcome = docmt("fit", config, "--profile", "tiny")
    assert_one_error_line(outcome, "data.document_order")
    assert not (run["root"] / "target_runs").exists()


def test_the_test_loop_gives_a_target_context_model_its_own_previous_translations(run, monkeypatch):
    """With document-order batches a fit tests: every decoded batch's `ctx_tgt` is the model's own
    translation of each row's previous sentence (then `<eos>`), and a first sentence's is empty."""
    from lightning_docmt.training.module import DocMTModule

    seen = []  # (loop, sent_index, pos_in_doc, ctx_tgt rows, outputs) per decoded batch
    current, walks = {}, []  # the evaluation loop now running: (split, its id); every loop, kept alive
    reset, decode = DocMTModule._reset_eval, decoding.best_tokens

    def resetting(self, split):
        reset(self, split)
        walks.append(self._eval)  # so that no later loop reuses its id
        current["loop"] = (split, id(self._eval))  # every evaluation loop has its own

    def recording(network, batch, *args, **kwargs):
        outputs = decode(network, batch, *args, **kwargs)
        seen.append((current["loop"], batch["sent_index"].tolist(), batch["pos_in_doc"].tolist(),
                     batch["ctx_tgt"].tolist(), outputs))
        return outputs

    monkeypatch.setattr(DocMTModule, "_reset_eval", resetting)
    monkeypatch.setattr(decoding, "best_tokens", recording)
    config = run["root"] / "target_doc_order.yaml"
    config.write_text(f"data:\n  corpus: {CORPUS}\n  cache_dir: {run['root'] / 'cache'}\n  document_order: true\n"
                      f"logging:\n  runs_dir: {run['root'] / 'target_doc_runs'}\n"
                      "model:\n  arch: yk_rnn\n  context: separated\n  d_model: 16\n"  # Sep-Tgt
                      "context:\n  side: target\n  prev_sentences: 1\n"
                      "train:\n  max_steps: 2\n  val_every_steps: 2\n")
    with single_process_run_env():
        run_dir_of(docmt("fit", config, "--profile", "tiny"))
    output = {(loop, i): out for loop, indices, _, _, outs in seen for i, out in zip(indices, outs)}
    checked = set()
    for loop, indices, positions, rows, _ in seen:  # validation loops, then the test loop
        for i, position, row in zip(indices, positions, rows):
            read = [t for t in row if t != PAD_ID]
            assert read == ([EOS_ID] if position == 0 else output[loop, i - 1] + [EOS_ID]), (loop, i)
            checked |= {loop[0]} if position > 0 else set()
    assert checked == {"valid", "test"}


def test_contrastive_scoring_with_target_context_stays_allowed(run, target_context):
    suite = run["root"] / "suite.jsonl"
    n = write_contrastive_suite("tiny", suite)
    outcome = docmt("contrastive", "--ckpt", target_context["checkpoint"], "--suite", suite, "--json")
    assert outcome.code == 0, outcome.err
    assert json.loads(outcome.out)["n"] == n


@pytest.mark.subprocess
def test_translate_and_contrastive_run_without_lightning(run):
    """`docmt translate` and `docmt contrastive` load the trained checkpoint as a plain model
    (`inference/loaded_model.py`): in a fresh process, Lightning never enters `sys.modules`."""
    output, suite = run["root"] / "plain.jsonl", run["root"] / "plain_suite.jsonl"
    write_contrastive_suite("tiny", suite)
    translate = ["translate", "--ckpt", str(run["checkpoint"]), "--input", str(run["source"]),
                 "--output", str(output), "--device", "cpu"]
    contrastive = ["contrastive", "--ckpt", str(run["checkpoint"]), "--suite", str(suite), "--device", "cpu"]
    code = (f"import sys; from lightning_docmt.cli import main; "
            f"assert main({translate!r}) == 0 and main({contrastive!r}) == 0; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('lightning', 'pytorch_lightning', 'lightning_fabric')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=run["root"],
                          env={**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert len(translations(output)) == len(run["source"].read_text(encoding="utf-8").splitlines()) == 2

