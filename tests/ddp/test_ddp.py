"""A real 2-process CPU DDP fit (gloo), run in a subprocess (docs/design.md section 11).

Lightning's `ddp` strategy starts rank 1 by re-running `sys.argv`, which inside pytest would re-run
pytest: the fit therefore runs `tests/ddp/ddp_fit_script.py` (`docmt fit` plus a callback that records,
per rank and stage, the `sent_index` and target tokens of every training batch, the `sent_index`
and loss sums of every validation batch, the logged validation metrics, and the weights when
training starts and ends). One run of the tiny profile on `synthetic:tiny` is shared
by the tests below: stage `main` (two epochs, validation every few steps), then a short stage
`tune` from it that freezes all but `TUNE_TRAINABLE` and unfreezes `TUNE_MILESTONE` at step
`TUNE_MILESTONE_STEP`, after DDP wrapped the model (callbacks/staged_unfreezing.py), then the run's test.

Loss normalisation: `tests/ddp/ddp_grad_script.py` makes one DDP update on two batches with different
numbers of target tokens; its gradient must be the single-process gradient of their union.

Expected sentence counts come from the corpus itself (`read_corpus`), not from the pipeline.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest
import torch

from lightning_docmt.batch import PAD_ID
from lightning_docmt.data.corpora import read_corpus
from lightning_docmt.distributed import progress
from lightning_docmt.training.speed import TRAIN_SPEED_KEY
from tests.helpers.grad_update import RANK_BATCHES, union_batch
from tests.helpers.grad_update import build_module as build_grad_module
from tests.helpers.hook_stand_ins import PHASED
from tests.helpers.paths import DDP_SCRIPTS
from tests.helpers.run_checks import assert_test_bleu_rescores
from tests.helpers.run_env import subprocess_env

SCRIPT = DDP_SCRIPTS / "ddp_fit_script.py"
GRAD_SCRIPT = DDP_SCRIPTS / "ddp_grad_script.py"
CORPUS = "synthetic:tiny"
WORLD = 2
VAL_EVERY = 3
TUNE_TRAINABLE, TUNE_MILESTONE, TUNE_MILESTONE_STEP = ["decoder.*"], ["encoder.layers.*.ffn.*"], 2
TUNE_STAGE = (f"train.stages.tune={{init_from: main, max_steps: 4, trainable: {json.dumps(TUNE_TRAINABLE)}, "
              f"unfreeze: [{{globs: {json.dumps(TUNE_MILESTONE)}, at_step: {TUNE_MILESTONE_STEP}, lr: 1.0e-3}}]}}")


@dataclass
class DDPRun:
    stdout: str
    runs_dir: Path
    records: list[dict[str, Any]]  # per rank, stage `main`, see ddp_fit_script.py
    initial: list[dict[str, torch.Tensor]]  # per rank, stage `main`
    final: list[dict[str, torch.Tensor]]
    tune_initial: list[dict[str, torch.Tensor]]  # per rank, stage `tune`
    tune_final: list[dict[str, torch.Tensor]]


def sentence_count(split: str) -> int:
    return sum(len(d.src) for d in read_corpus(CORPUS).documents if d.split == split)


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> DDPRun:
    tmp = tmp_path_factory.mktemp("ddp")
    config = tmp / "run.yaml"
    config.write_text(f"data:\n  corpus: {CORPUS}\n  cache_dir: {tmp / 'cache'}\n"
                      f"logging:\n  runs_dir: {tmp / 'runs'}\n")
    record_dir = tmp / "records"
    command = [sys.executable, str(SCRIPT), str(record_dir), "fit", str(config), "--profile", "tiny",
               f"trainer.devices={WORLD}", "trainer.strategy=ddp", "trainer.accelerator=cpu",
               "train.max_steps=-1", "train.step_cap=null", "train.max_epochs=2", f"train.val_every_steps={VAL_EVERY}",
               "data.max_tokens=6000", TUNE_STAGE, "train.schedule=[main,tune]"]
    proc = subprocess.run(command, cwd=tmp, env=subprocess_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"DDP fit failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    ranks = range(WORLD)

    def load(stage: str, which: str) -> list[dict[str, torch.Tensor]]:
        return [torch.load(record_dir / f"rank{r}.{stage}.{which}.pt") for r in ranks]

    return DDPRun(stdout=proc.stdout, runs_dir=tmp / "runs",
                  records=[json.loads((record_dir / f"rank{r}.main.json").read_text()) for r in ranks],
                  initial=load("main", "initial"), final=load("main", "final"),
                  tune_initial=load("tune", "initial"), tune_final=load("tune", "final"))


def epochs(record: dict[str, Any]) -> dict[int, list[list[int]]]:
    """The rank's training batches (lists of sent_index), by epoch."""
    out: dict[int, list[list[int]]] = {}
    for batch in record["train"]:
        out.setdefault(batch["epoch"], []).append(batch["sent_index"])
    return out


@pytest.mark.fit
@pytest.mark.subprocess
def test_both_ranks_trained_the_same_number_of_batches(ddp_run):
    assert [r["rank"] for r in ddp_run.records] == list(range(WORLD))
    assert all(r["world_size"] == WORLD for r in ddp_run.records)
    per_rank = [epochs(r) for r in ddp_run.records]
    assert all(sorted(e) == [0, 1] for e in per_rank)
    for epoch in (0, 1):
        counts = [len(e[epoch]) for e in per_rank]
        assert counts[0] > 0 and len(set(counts)) == 1, counts


@pytest.mark.fit
@pytest.mark.subprocess
def test_each_epoch_shows_every_training_sentence_once_across_ranks(ddp_run):
    n_train = sentence_count("train")
    for epoch in (0, 1):
        shards = [[i for batch in epochs(r)[epoch] for i in batch] for r in ddp_run.records]
        assert all(len(s) == len(set(s)) for s in shards)  # nothing twice on one rank
        assert not set(shards[0]) & set(shards[1])  # the ranks' sentences are disjoint
        assert sorted(shards[0] + shards[1]) == list(range(n_train))


@pytest.mark.fit
@pytest.mark.subprocess
def test_final_weights_are_identical_across_ranks_and_trained(ddp_run):
    initial, final = ddp_run.initial, ddp_run.final
    assert initial[0].keys() == final[0].keys() == final[1].keys()
    assert all(torch.equal(initial[0][k], initial[1][k]) for k in initial[0])
    assert all(torch.equal(final[0][k], final[1][k]) for k in final[0])
    changed = [k for k in final[0] if not torch.equal(final[0][k], initial[0][k])]
    assert changed, "training did not change any weight"


@pytest.mark.fit
@pytest.mark.subprocess
def test_validation_bleu_is_scored_once_on_the_gathered_validation_set(ddp_run):
    n_valid = sentence_count("valid")
    validations = [r["validations"] for r in ddp_run.records]
    n_batches = len(ddp_run.records[0]["train"])
    assert len(validations[0]) == len(validations[1]) == n_batches // VAL_EVERY
    for rank0, rank1 in zip(*validations):
        assert not set(rank0["sent_index"]) & set(rank1["sent_index"])
        assert sorted(rank0["sent_index"] + rank1["sent_index"]) == list(range(n_valid))
        assert rank0["bleu"] is not None and rank0["bleu"] == rank1["bleu"]
    (run_dir,) = (ddp_run.runs_dir / "runs").iterdir()
    with open(run_dir / "main" / "metrics.csv", newline="") as f:
        logged = [float(row["val/bleu"]) for row in csv.DictReader(f) if row["val/bleu"]]
    assert logged == pytest.approx([v["bleu"] for v in validations[0]])


@pytest.mark.fit
@pytest.mark.subprocess
def test_validation_loss_is_token_weighted_over_both_ranks_batches(ddp_run):
    """Every validation logs, on both ranks, the loss and NLL summed over every batch of both ranks
    divided by all their target tokens (`training/metrics.py`: torchmetrics sums them over the
    ranks), not a mean of the ranks' or the batches' means."""
    for rank0, rank1 in zip(*(r["validations"] for r in ddp_run.records)):
        assert (rank0["loss"], rank0["nll"]) == (rank1["loss"], rank1["nll"])
        batches = rank0["batches"] + rank1["batches"]
        tokens = sum(b["tokens"] for b in batches)
        assert rank0["nll"] == pytest.approx(sum(b["nll_sum"] for b in batches) / tokens, rel=1e-5)
        assert rank0["loss"] == pytest.approx(sum(b["loss_sum"] for b in batches) / tokens, rel=1e-5)
        rank_means = [sum(b["nll_sum"] for b in r) / sum(b["tokens"] for b in r)
                      for r in (rank0["batches"], rank1["batches"])]
        assert rank0["nll"] != pytest.approx(sum(rank_means) / 2, rel=1e-5)  # what an average would log


@pytest.mark.fit
@pytest.mark.subprocess
def test_a_checkpoint_stores_the_target_tokens_that_both_ranks_trained(ddp_run):
    """The last checkpoint of stage `main` stores, for its training throughput, every target token
    that both ranks trained, once: neither the validations (every `VAL_EVERY` steps) nor the
    checkpoints written at each of them reset or re-add the count."""
    (run_dir,) = (ddp_run.runs_dir / "runs").iterdir()
    checkpoint = torch.load(run_dir / "main" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == len(ddp_run.records[0]["train"]) > 2 * VAL_EVERY  # a batch per update
    trained = sum(b["tokens"] for r in ddp_run.records for b in r["train"])
    assert checkpoint[TRAIN_SPEED_KEY]["target_tokens"] == trained


@pytest.mark.fit
@pytest.mark.subprocess
def test_one_run_directory_holds_the_test_of_every_test_sentence(ddp_run):
    run_dirs = list((ddp_run.runs_dir / "runs").iterdir())
    assert len(run_dirs) == 1  # every rank works in the directory rank zero chose
    printed = [line for line in ddp_run.stdout.splitlines() if not line.startswith("[docmt]")]
    assert printed == [str(run_dirs[0])]  # printed once; progress lines are tagged "[docmt]"
    assert_test_bleu_rescores(run_dirs[0], CORPUS)  # every rank's hypotheses, scored once
    lines = (run_dirs[0] / "test.hyp.txt").read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) - 1 == sentence_count("test")


@pytest.mark.fit
@pytest.mark.subprocess
def test_a_frozen_stage_keeps_frozen_weights_and_the_ranks_in_step(ddp_run):
    """Frozen before DDP wraps the model: bit-identical to stage `main` on both ranks. Unfrozen at a
    milestone after the wrap: trained, and identical on both ranks (their gradients are all-reduced
    by StagedUnfreezing; DDP's reducer does not know them)."""
    main_final = ddp_run.final[0]
    names = [k.removeprefix("model.") for k in main_final]
    trainable = {n for n in names if any(fnmatchcase(n, g) for g in TUNE_TRAINABLE)}
    unfrozen = {n for n in names if any(fnmatchcase(n, g) for g in TUNE_MILESTONE)} - trainable
    assert trainable and unfrozen
    for rank in range(WORLD):
        initial, final = ddp_run.tune_initial[rank], ddp_run.tune_final[rank]
        assert all(torch.equal(initial[k], main_final[k]) for k in main_final)  # `tune` starts from `main`
        for key in main_final:
            name = key.removeprefix("model.")
            changed = not torch.equal(final[key], main_final[key])
            assert changed == (name in trainable or name in unfrozen), (rank, name)
    assert all(torch.equal(ddp_run.tune_final[0][k], ddp_run.tune_final[1][k]) for k in main_final)


def test_progress_lines_are_written_whole(monkeypatch):
    """The ranks of a DDP run share stdout: a status line and its newline go out in one write."""
    writes: list[str] = []

    class Recorder:
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

        def flush(self) -> None:
            writes.append("<flush>")

    monkeypatch.setattr(sys, "stdout", Recorder())
    progress("stage 'doc': initialised")
    assert writes == ["[docmt] stage 'doc': initialised\n", "<flush>"]


# ---------------------------------------------------------------------- loss normalisation


@pytest.fixture(scope="module", params=["transformer", PHASED])
def ddp_update(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
               ) -> tuple[str, list[dict[str, dict[str, torch.Tensor]]]]:
    """One update of `tests/ddp/ddp_grad_script.py` (automatic optimisation, and the optimizer phases'
    manual optimisation): per rank, the initial weights and the update's gradients."""
    out = tmp_path_factory.mktemp("ddp_grad")
    proc = subprocess.run([sys.executable, str(GRAD_SCRIPT), str(out), request.param], cwd=out,
                          env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"DDP update failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return request.param, [torch.load(out / f"rank{r}.pt") for r in range(WORLD)]


@pytest.mark.fit
@pytest.mark.subprocess
def test_the_ddp_gradient_is_the_single_process_gradient_of_the_union_batch(ddp_update, hook_archs):
    """The ranks' batches hold 9 and 26 target tokens: dividing each rank's loss by its own tokens
    (and DDP averaging) would weigh rank 0's tokens about 3x; the global count does not."""
    arch, ranks = ddp_update
    tokens = [int(b["tgt_out"].ne(PAD_ID).sum()) for b in RANK_BATCHES]
    assert tokens == [9, 26]
    assert all(torch.equal(ranks[0]["grads"][n], ranks[1]["grads"][n]) for n in ranks[0]["grads"])
    module = build_grad_module(arch)
    module.model.load_state_dict(ranks[0]["initial"])
    loss_sum, _, ntok = module.loss_terms(union_batch(RANK_BATCHES))
    (loss_sum / ntok).backward()
    expected = {n: p.grad for n, p in module.model.named_parameters() if p.grad is not None}
    assert sorted(ranks[0]["grads"]) == sorted(expected)
    for name, grad in expected.items():
        assert torch.allclose(ranks[0]["grads"][name], grad, rtol=0, atol=1e-6), name
