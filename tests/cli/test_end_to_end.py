"""`docmt fit -> test -> translate -> contrastive` through the CLI entry point, in-process.

Tiny profile on `synthetic:tiny`, everything under a temporary directory (the working directory
during these tests). One fitted run is shared by the tests of the sub-commands that read it; the
two-stage schedule (Zhang et al. 2018's two-step training: a sentence Transformer, then theta_d
alone) has a run of its own. Expected counts come from the corpus and the input files.
"""

from __future__ import annotations

import json
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest
import torch

from lightning_docmt.callbacks.staged_unfreezing import StagedUnfreezing
from lightning_docmt.checkpoints import VOCAB_KEY
from lightning_docmt.data.corpora import read_corpus
from lightning_docmt.data.synthetic import write_contrastive_suite
from lightning_docmt.models.zhang_doc import THETA_D_GLOBS
from lightning_docmt.training.speed import DECODE_SPEED_METRIC
from tests.helpers.cli_run import CORPUS, FIT_SETTINGS, docmt, read_json, run_dir_of, write_config
from tests.helpers.run_checks import assert_test_bleu_rescores

TWO_STAGE = """\
model:
  arch: zhang_doc
context:
  prev_sentences: 1
eval:
  valid_bleu: false
train:
  max_steps: 4
  val_every_steps: 4
  stages:
    s1: {{arch: transformer}}
    s2: {{arch: zhang_doc, init_from: s1, trainable: {trainable}}}
  schedule: [s1, s2]
"""


def without_timing(metrics: dict[str, float]) -> dict[str, float]:
    """The metrics that a repeated test must reproduce: not the decoding speed (a wall-clock figure)
    nor what the run's training reports (`data/train_pairs`, which `docmt test` does not train)."""
    assert metrics[DECODE_SPEED_METRIC] > 0
    return {k: v for k, v in metrics.items() if k not in (DECODE_SPEED_METRIC, "data/train_pairs")}


def sources_of_test_split() -> list[list[str]]:
    return [d.src for d in read_corpus(CORPUS).documents if d.split == "test"]


@pytest.fixture(scope="module")
def fitted(workdir: Path) -> tuple[Path, Path]:
    """(config file, run dir) of one tiny `transformer` run."""
    config = write_config(workdir / "run.yaml", FIT_SETTINGS)
    return config, run_dir_of(docmt("fit", config, "--profile", "tiny"))


@pytest.mark.fit
def test_fit_writes_config_metrics_record_and_test_hypotheses(fitted):
    _, run_dir = fitted
    assert (run_dir / "config.yaml").is_file()
    assert_test_bleu_rescores(run_dir, CORPUS)
    record = read_json(run_dir / "run.json")
    assert list(record["stages"]) == ["main"] and record["stages"]["main"]["reused"] is False
    assert record["stages"]["main"]["global_step"] == 20
    assert Path(record["checkpoint"]).is_file()
    hyps = (run_dir / "test.hyp.txt").read_text(encoding="utf-8").split("\n")
    assert hyps[-1] == "" and len(hyps) - 1 == sum(len(src) for src in sources_of_test_split())


@pytest.mark.fit
def test_a_second_fit_of_the_same_config_reuses_its_stage(fitted):
    config, first = fitted
    outcome = docmt("fit", config, "--profile", "tiny")
    second = run_dir_of(outcome)
    assert second != first
    assert "reusing" in outcome.out
    before, after = (read_json(d / "run.json")["stages"]["main"] for d in (first, second))
    assert after["reused"] is True
    assert (after["key"], after["checkpoint"]) == (before["key"], before["checkpoint"])


@pytest.mark.fit
def test_fit_of_the_saved_config_repeats_the_run(fitted):
    _, first = fitted
    second = run_dir_of(docmt("fit", first / "config.yaml"))
    assert (second / "config.yaml").read_text() == (first / "config.yaml").read_text()
    assert without_timing(read_json(second / "metrics.json")) == \
        without_timing(read_json(first / "metrics.json"))


@pytest.mark.fit
def test_test_command_prints_the_metrics_of_the_run(fitted):
    _, run_dir = fitted
    outcome = docmt("test", run_dir, "--json")
    assert outcome.code == 0, outcome.err
    assert "test split decoded" in outcome.err  # what the run says, kept out of the JSON
    assert without_timing(json.loads(outcome.out)) == without_timing(read_json(run_dir / "metrics.json"))


@pytest.mark.fit
def test_translate_keeps_the_layout_of_plain_text_and_agrees_with_jsonl(fitted, workdir):
    _, run_dir = fitted
    checkpoint = read_json(run_dir / "run.json")["checkpoint"]
    docs = [src[:3] for src in sources_of_test_split()[:2]]
    plain = workdir / "docs.txt"
    plain.write_text("\n".join("".join(s + "\n" for s in doc) for doc in docs), encoding="utf-8")
    jsonl = workdir / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"doc_id": f"d{i}", "src": doc}) + "\n"
                             for i, doc in enumerate(docs)), encoding="utf-8")

    assert docmt("translate", "--ckpt", checkpoint, "--input", plain, "--output", "out.txt").code == 0
    assert docmt("translate", "--ckpt", checkpoint, "--input", jsonl, "--output", "out.jsonl").code == 0

    lines = Path("out.txt").read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == len(plain.read_text(encoding="utf-8").split("\n"))
    assert lines[len(docs[0])] == ""  # the document boundary
    rows = [json.loads(line) for line in Path("out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["doc_id"] for r in rows] == ["d0", "d1"]
    assert [len(r["hyp"]) for r in rows] == [len(doc) for doc in docs]
    assert any(h for r in rows for h in r["hyp"])  # the positional comparison below is not vacuous
    assert lines[:-1] == [*rows[0]["hyp"], "", *rows[1]["hyp"]]


@pytest.mark.fit
def test_contrastive_accuracy_on_the_synthetic_suite(fitted, workdir):
    _, run_dir = fitted
    suite = workdir / "suite.jsonl"
    n = write_contrastive_suite("tiny", suite)
    assert n == len(suite.read_text(encoding="utf-8").splitlines()) > 0
    outcome = docmt("contrastive", "--ckpt", read_json(run_dir / "run.json")["checkpoint"],
                    "--suite", suite, "--json")
    assert outcome.code == 0, outcome.err
    result = json.loads(outcome.out)
    parts = result["by_phenomenon"].values()
    assert result["n"] == n and sum(p["n"] for p in parts) == n
    # the overall accuracy is the per-phenomenon accuracies weighted by their item counts
    assert result["accuracy"] == pytest.approx(sum(p["accuracy"] * p["n"] for p in parts) / n)


@pytest.fixture(scope="module")
def two_stage(workdir: Path) -> dict[str, Any]:
    """A `zhang_doc` run whose stage s2 trains theta_d only, from the stage-1 Transformer s1.
    Returns the run dir and the weights of s2 when its training started."""
    config = write_config(workdir / "two_stage.yaml",
                          TWO_STAGE.format(trainable=json.dumps(THETA_D_GLOBS)))
    started: dict[str, dict[str, torch.Tensor]] = {}
    setup = StagedUnfreezing.setup

    def recording(self, trainer, pl_module, stage):
        started[self.stage_name] = {k: v.clone() for k, v in pl_module.model.state_dict().items()}
        setup(self, trainer, pl_module, stage)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(StagedUnfreezing, "setup", recording)
        run_dir = run_dir_of(docmt("fit", config, "--profile", "tiny"))
    return {"run_dir": run_dir, "s2_start": started["s2"]}


def model_weights(checkpoint: str) -> dict[str, torch.Tensor]:
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    return {k.removeprefix("model."): v for k, v in state.items()}


@pytest.mark.fit
def test_two_stage_schedule_trains_theta_d_and_keeps_theta_s_bit_identical(two_stage):
    stages = read_json(two_stage["run_dir"] / "run.json")["stages"]
    assert list(stages) == ["s1", "s2"]
    s1, s2 = (model_weights(stages[name]["checkpoint"]) for name in ("s1", "s2"))
    theta_d = [k for k in s2 if any(fnmatchcase(k, g) for g in THETA_D_GLOBS)]
    assert theta_d and sorted(theta_d) == sorted(set(s2) - set(s1))  # s2 adds exactly theta_d
    assert all(torch.equal(s2[k], s1[k]) for k in s1)  # theta_s: bit-identical to stage 1
    start = two_stage["s2_start"]
    assert all(torch.equal(start[k], s1[k]) for k in s1)  # s2 started from s1
    changed = [k for k in theta_d if not torch.equal(s2[k], start[k])]
    assert changed == theta_d  # every theta_d tensor was trained


@pytest.mark.fit
def test_a_trainable_glob_matching_nothing_fails_before_training(two_stage, workdir):
    config = write_config(workdir / "no_match.yaml",
                          TWO_STAGE.format(trainable='["context_encoder.*", "nothing.*"]'))
    stages = workdir / "cache" / "stages"
    stored_before = sorted(stages.iterdir())
    runs_before = sorted((workdir / "runs").rglob("*"))
    outcome = docmt("fit", config, "--profile", "tiny", "train.seed=7")
    assert outcome.code == 2
    assert len(outcome.err.splitlines()) == 1
    assert "train.stages.s2.trainable" in outcome.err and "nothing.*" in outcome.err
    assert sorted(stages.iterdir()) == stored_before  # stage s1 was not trained
    assert sorted((workdir / "runs").rglob("*")) == runs_before


def test_prepare_builds_the_data_of_a_table_row(workdir):
    table = workdir / "prep_table.yaml"
    table.write_text(f"id: prep\ntitle: prepare a row\nmetrics: [test/bleu]\n"
                     f"base: [data.corpus={CORPUS}, data.cache_dir={workdir / 'prep_cache'}]\n"
                     "rows:\n  - {name: sent, overrides: [model.arch=transformer]}\n")
    outcome = docmt("prepare", table, "--row", "sent", "--profile", "tiny")
    assert outcome.code == 0, outcome.err
    stats = json.loads(outcome.out)
    train_docs = [d for d in read_corpus(CORPUS).documents if d.split == "train"]
    assert stats["train"]["sentences"] == sum(len(d.src) for d in train_docs)
    assert (workdir / "prep_cache").is_dir()
    missing_row = docmt("prepare", table, "--profile", "tiny")
    assert missing_row.code == 2 and len(missing_row.err.strip().splitlines()) == 1
    assert "--row" in missing_row.err and "sent" in missing_row.err


@pytest.mark.fit
def test_an_exported_checkpoint_is_smaller_translates_and_starts_a_stage_of_a_run(fitted, workdir):
    """`docmt export --dtype bfloat16`: no optimizer state, halved weights; it serves `translate`
    and a stage's `init_from` like the checkpoint it came from (the demo's shipped model)."""
    config, run_dir = fitted
    checkpoint = Path(read_json(run_dir / "run.json")["checkpoint"])
    exported = workdir / "exported.ckpt"
    outcome = docmt("export", checkpoint, "--out", exported, "--dtype", "bfloat16")
    assert outcome.code == 0, outcome.err
    state = torch.load(exported, weights_only=True)
    assert "optimizer_states" not in state and state["exported_dtype"] == "bfloat16"
    floats = [t for t in state["state_dict"].values() if t.is_floating_point()]
    assert floats and {t.dtype for t in floats} == {torch.bfloat16}
    original = torch.load(checkpoint, weights_only=True)["state_dict"].values()
    assert 2 * sum(t.nbytes for t in floats) == sum(t.nbytes for t in original if t.is_floating_point())
    assert exported.stat().st_size < checkpoint.stat().st_size
    plain = workdir / "one.txt"
    plain.write_text(sources_of_test_split()[0][0] + "\n", encoding="utf-8")
    assert docmt("translate", "--ckpt", exported, "--input", plain, "--output", workdir / "one.out").code == 0
    further = ["train.stages.more={arch: transformer, max_steps: 2, val_every_steps: 2, init_from: "
               f"{exported}}}", "train.schedule=[more]"]
    assert docmt("fit", config, "--profile", "tiny", *further).code == 0


@pytest.mark.fit
def test_a_stage_refuses_a_checkpoint_built_on_other_vocabularies(fitted, workdir):
    config, run_dir = fitted
    state = torch.load(read_json(run_dir / "run.json")["checkpoint"], weights_only=True)
    name = next(iter(state[VOCAB_KEY]))
    state[VOCAB_KEY][name] = state[VOCAB_KEY][name] + b"\n"  # a vocabulary file that differs
    other = workdir / "other_vocab.ckpt"
    torch.save(state, other)
    outcome = docmt("fit", config, "--profile", "tiny", "train.schedule=[more]",
                    f"train.stages.more={{arch: transformer, max_steps: 2, init_from: {other}}}")
    assert outcome.code == 2 and len(outcome.err.strip().splitlines()) == 1
    assert "vocabularies are not the ones this run built" in outcome.err and str(other) in outcome.err
