"""Learning tests (slow): tiny models on the synthetic corpus use their context, or do not
(DESIGN.md sections 6 and 11).

Every run goes through the public API (`config.compose` + `train.fit_run`) and is scored by its own
`metrics.json`: `eval.contrastive: [corpus]` evaluates the synthetic test split's contrastive suite.

Context-free ceiling. A sentence-level model sees nothing of the antecedent or the topic, so its
choices are a function of the source sentence, which is independent of the labels: its accuracy on
n items is a binomial proportion around the documented rate (`expected_context_free_accuracy`, 50%
for every phenomenon here) with standard deviation 0.5 / sqrt(n). With `test_docs=200` the suite has
623 items (sd 2.0 points); `TOLERANCE` is 4 sd (8 points), a false alarm rate of about 1e-4.

Settings (the cheapest found to pass with margin):
word vocabulary (a 500-piece BPE splits every made-up word into ~3 pieces, which tripled the
sequences and delayed learning by thousands of steps), d_model 64 / 4 heads / FFN 256, one layer
each side, lr 3e-3 with 300 warmup steps, greedy test decoding, one validation at the end. The
sentence Transformer is one stage (`sent`) shared by every run through stage reuse (one cache).
Measured with seeds 1 / 2 (contrastive accuracy): sentence Transformer 51.7 / 51.0%, concat
98.2 / 98.6%, Zhang two-step 78.7 / 80.9% (pronouns 95-100%, sense 49 / 52%), context-off control
50.9 / 50.6%; about 110 s of one CPU core for the whole file.

Why Zhang's two-step stays at chance on the sense items (seed 1, contrastive accuracy / sense):
the ambiguous verb's two target senses are different words for each of the 8 verbs, so the topic
must change a verb-specific output, while theta_d can only add to the frozen sentence model's
states a vector read from the context, which is the same for every verb (the context-attention
values depend on the context alone). Pronouns need one direction (il vs elle) and are learnt.
Measured: gating replaced by the residual (Table 9's switch) 80.4% / 50.6%; theta_s unfrozen
at step 1,000 of 2,000 at lr 1e-3 (a `StagedUnfreezing` milestone) 79.5% / 49.4%; 2+2 layers
49.8% / 48.5% (nothing learnt in 1,500 steps); zhang_doc trained jointly from scratch (3,000
steps, Table 7's `doc_only`) 69.7% with sense 100% but every pronoun distance at chance.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Iterator

import pytest

from lightning_docmt import config as config_lib
from lightning_docmt import train
from lightning_docmt.data import synthetic
from lightning_docmt.data.contrastive import context_free_ceiling
from lightning_docmt.models.zhang_doc import THETA_D_GLOBS
from tests.run_env import single_process_run_env

pytestmark = pytest.mark.slow

NAME = "tiny?test_docs=200"
SEED = int(os.environ.get("DOCMT_LEARNING_SEED", "1"))  # other seeds: a manual robustness check
SENT_STEPS = 1500  # the shared sentence Transformer
CONCAT_STEPS = 3000
DOC_STEPS = 1500  # Zhang's step 2 (theta_d), and the control's
SETTINGS = [
    f"data.corpus=synthetic:{NAME}", "vocab.type=word", "model.d_model=64", "model.heads=4",
    "model.ffn_dim=256", "train.optim.warmup_steps=300", f"train.max_steps={SENT_STEPS}",
    "train.val_every_steps=100000", "eval.valid_bleu=false", "decode.beam=1",
    "eval.contrastive=[corpus]", f"train.seed={SEED}",
]
SENT_STAGE = "sent: {arch: transformer}"
TOLERANCE = 4 * 0.5 / math.sqrt(623)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with single_process_run_env():
        yield tmp_path_factory.mktemp("learning")


def fit(workspace: Path, name: str, body: str, *overrides: str) -> dict:
    """Train the run config `body` (YAML) with the shared settings; its metrics and stage records."""
    path = workspace / f"{name}.yaml"
    path.write_text(body)
    cfg = config_lib.compose(path, [*SETTINGS, f"data.cache_dir={workspace / 'cache'}",
                                    f"logging.runs_dir={workspace / 'runs'}", *overrides],
                             profile="tiny")
    run_dir = train.fit_run(cfg)
    print(f"[learning] {name}: {(run_dir / 'metrics.json').read_text()}")  # shown with -s
    return {"metrics": json.loads((run_dir / "metrics.json").read_text()),
            "stages": json.loads((run_dir / "run.json").read_text())["stages"]}


@pytest.fixture(scope="module")
def ceiling() -> dict[str, float]:
    """The context-free rate of the suite (documented, weighted by phenomenon), and the empirical
    one (the majority rule learned on a large train split's suite, applied to the test suite)."""
    suite = synthetic.contrastive_suite(NAME)
    assert len(suite) == 623  # TOLERANCE is computed for this size
    rates = synthetic.expected_context_free_accuracy(NAME)
    expected = sum(rates[e["phenomenon"]] for e in suite) / len(suite)
    reference = synthetic.contrastive_suite("tiny?docs=2000", split="train")
    return {"expected": expected, "empirical": context_free_ceiling(suite, reference)["overall"]}


def assert_at_ceiling(accuracy: float, ceiling: dict[str, float]) -> None:
    low, high = sorted(ceiling.values())
    assert low - TOLERANCE <= accuracy <= high + TOLERANCE, (accuracy, ceiling)


@pytest.fixture(scope="module")
def sentence(workspace: Path) -> dict:
    return fit(workspace, "sentence", f"model: {{arch: transformer}}\ntrain:\n  stages: {{{SENT_STAGE}}}\n"
               "  schedule: [sent]\n")


def zhang_config(trainable: list[str]) -> str:
    doc = (f"doc: {{arch: zhang_doc, init_from: sent, trainable: {json.dumps(trainable)}, "
           f"continue_schedule: true, max_steps: {DOC_STEPS}}}")
    return (f"model: {{arch: zhang_doc}}\ncontext: {{prev_sentences: 3}}\n"
            f"train:\n  stages: {{{SENT_STAGE}, {doc}}}\n  schedule: [sent, doc]\n")


def test_sentence_transformer_stays_at_the_ceiling_and_concat_beats_it(workspace, sentence, ceiling):
    assert_at_ceiling(sentence["metrics"]["contrastive/accuracy"], ceiling)
    concat = fit(workspace, "concat", "model: {arch: concat}\ncontext: {prev_sentences: 3}\n",
                 f"train.max_steps={CONCAT_STEPS}")
    accuracy = concat["metrics"]["contrastive/accuracy"]
    assert accuracy >= 0.9 and accuracy >= max(ceiling.values()) + 0.25
    for phenomenon in synthetic.expected_context_free_accuracy(NAME):
        assert concat["metrics"][f"contrastive/{phenomenon}"] >= 0.75, phenomenon


def test_zhang_two_step_learns_from_context_while_its_frozen_stage_one_cannot(
        workspace, sentence, ceiling):
    run = fit(workspace, "zhang", zhang_config(THETA_D_GLOBS))
    assert run["stages"]["sent"]["reused"] is True  # the sentence run's Transformer, frozen
    assert run["stages"]["sent"]["key"] == sentence["stages"]["sent"]["key"]
    metrics = run["metrics"]
    # Measured (see the module docstring): step 2 resolves every pronoun distance (97-100%), but
    # the word-sense items stay near chance (49-61% after up to 5,000 steps of theta_d), so the
    # overall accuracy is ~80%, not the 90% of the concatenation model.
    for distance in (1, 2, 3):
        assert metrics[f"contrastive/pronoun_d{distance}"] >= 0.9
    assert metrics["contrastive/accuracy"] >= max(ceiling.values()) + 0.25


def test_zhang_without_context_attention_stays_at_the_ceiling(workspace, sentence, ceiling):
    """The control: the same two-step schedule and steps with both context attentions switched
    off; nothing reads the context, so step 2 trains every parameter (theta_d is empty)."""
    run = fit(workspace, "zhang_off", zhang_config(["*"]), "model.context_attn.encoder=false",
              "model.context_attn.decoder=false")
    assert run["stages"]["sent"]["reused"] is True
    assert_at_ceiling(run["metrics"]["contrastive/accuracy"], ceiling)
