"""Learning test (slow) of Donato, Yu & Dyer 2021's parallel attention stack: the positive control of
the `experiments/donato2021/` tables (docs/papers/donato2021.md section 8).

The stages follow Table 5's recipe (`pas_run`, tests/learning/learning_recipe.py): the sentence
Transformer, then the stack alone on it, frozen, for six times its updates on a schedule of its own.
Its blocks read a frozen 1-layer encoder at its seeded random start, whose features keep which word
stands where; the encoders pretrained here by masked LM on the synthetic corpus lose that (their
masked words are drawn at random, so they learn a word's class) and the stack read nothing through
them. The corpus is the learning tests' with the source article marking the antecedent's gender
(`gendered_articles=1`, data/synthetic.py): the stack's encoders are apart from the Transformer, so
nothing they compute knows a made-up noun's arbitrary target gender, and over the unmarked corpus
the stack learnt the topic cue (sense 96-100%) but the antecedent barely (pronoun_d1 52-65% after
9,000 and 18,000 updates). The suite's items, labels and context-free bounds are those of the
unmarked corpus (tests/data/test_synthetic.py).

A stack over a three-sentence window (P_s(3p,c), concatenated, over a PEGASUS-style encoder at its
random start: the blocks of Multi-context and of Table 7) learns less reliably at the tables' recipe:
it resolved every distance in seed 2, most in seed 1 (pronoun_d1-d3 95.0 / 81.9 / 73.1%) and hardly
any in seed 3 (70.0 / 55.2 / 59.2%; sweep row `gendered_window3_9000`). Its test trains the stack
twice as long (twelve times stage 1, `WINDOW_LONGER`; sweep row `gendered_window3_18000`), where
seeds 1-3 resolve every distance and seed 4, as over the previous sentence, the topic cue only
(docs/papers/donato2021.md section 8; AMX Xeon: the AMD EPYC was not measured at that length).

This module runs apart from tests/learning/test_learning.py, so that the two slow modules start at
once on two workers. The previous-sentence stack run takes 8-13 minutes of one core of an AMD EPYC
(13:00 with the machine's two cores shared by three processes) and 4-5 of an AMX Xeon, the window's
twice that, the sentence Transformer about one each. Seeds 1-3 of the previous-sentence recipe pass on both CPUs,
seed 4 on neither (docs/papers/donato2021.md section 8): the tests run seed 1, as every learning test
does.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from lightning_docmt.config.pretraining import load_pretrain_config
from lightning_docmt.data import synthetic
from lightning_docmt.pretraining.run import pretrain
from tests.helpers.experiment_files import EXPERIMENTS
from tests.learning.learning_checks import (
    MIN_CXMI,
    assert_at_ceiling,
    assert_beats_ceiling_on_what_its_window_holds,
    assert_context_blind,
    assert_uses_context,
    fit,
)
from tests.learning.learning_runs import NAME, WINDOW_LONGER, pas_run

pytestmark = pytest.mark.slow

ENCODERS = {  # name: its pretraining file in experiments/donato2021/, used at its random start
    "bert": "pretrain_bert1_synthetic_gendered.yaml",
    "pegasus": "pretrain_pegasus1_synthetic_gendered.yaml",
}
PREVIOUS = "{format: pair, prev: 1}"  # B_s(p,c): [CLS] previous [SEP] current [SEP]
WINDOW = "{format: concat, prev: 3}"  # P_s(3p,c): the three previous sentences and the current one


@pytest.fixture(scope="module")
def encoders(workspace: Path) -> dict[str, str]:
    """The encoders' pretraining files with the workspace's cache, pretrained there (seconds: their
    tokenizers and sizes; the runs do not load their weights)."""
    files = {}
    for name, file in ENCODERS.items():
        path = workspace / file
        path.write_text((EXPERIMENTS / "donato2021" / file).read_text() + f"\ncache_dir: {workspace / 'cache'}\n")
        pretrain(load_pretrain_config(path))
        files[name] = str(path)
    return files


def out_of_window_bound(phenomenon: str) -> float:
    """The most a model that cannot see `phenomenon`'s cue scores on its items: the context-free
    rate plus 4 sd of a proportion over their number."""
    count = sum(e["phenomenon"] == phenomenon for e in synthetic.contrastive_suite(NAME))
    return synthetic.expected_context_free_accuracy(NAME)[phenomenon] + 4 * 0.5 / math.sqrt(count)


@pytest.mark.timeout(2700)  # two fits, the stack's 9,000 updates 8-13 minutes: past the suite's 900 s
def test_a_stack_over_the_previous_sentence_resolves_what_it_holds_and_nothing_further(
        workspace, encoders, ceiling):
    """B_s(p,c) at Table 5's recipe: the frozen Transformer stays at the context-free ceiling; the
    stack on it resolves the antecedents one sentence back and the topic cue, not the antecedents
    two and three back (outside its window); another example's context brings the suite back to
    the ceiling, and another document's context costs BLEU.
    Measured at this recipe on an AMD EPYC (float32), seed 1 (experiments/sweeps/
    pas_synthetic_control.yaml, row `gendered_random_one_layer_9000`): pronoun_d1 93.3%, sense 100%,
    pronoun_d2 48.3%, pronoun_d3 52.3%, 54.8% with another example's context, cxmi 0.031,
    random_ctx/cxmi 0.0042, random-context BLEU -1.20; seeds 2 and 3 passed too (pronoun_d1 100 /
    98.3%, sense 97.6 / 87.1%), seed 4 learnt the topic cue only (pronoun_d1 57.5%, sense 100%): the
    recipe's limit, which the tables are read with (docs/papers/donato2021.md section 8). At half the
    updates (4,500 here) seed 1 reached pronoun_d1 71.7%, sense 94.1%."""
    sentence = fit(workspace, "pas_sentence", pas_run(encoders["bert"], PREVIOUS, stages=1))
    assert_at_ceiling(sentence["metrics"]["contrastive/accuracy"], ceiling)
    assert_context_blind(sentence["metrics"])
    run = fit(workspace, "pas_previous", pas_run(encoders["bert"], PREVIOUS))
    metrics = run["metrics"]
    assert run["stages"]["sent"]["reused"] is True  # the very Transformer above, frozen
    assert_beats_ceiling_on_what_its_window_holds(metrics, ceiling)
    for phenomenon in ("pronoun_d2", "pronoun_d3"):
        assert metrics[f"contrastive/{phenomenon}"] <= out_of_window_bound(phenomenon), (phenomenon, metrics)
    assert_at_ceiling(metrics["contrastive/random_ctx/accuracy"], ceiling)
    assert metrics["cxmi"] >= MIN_CXMI and metrics["random_ctx/cxmi"] > 0, metrics
    assert metrics["random_ctx/bleu_delta"] < 0, metrics


@pytest.mark.timeout(3600)  # the stack's 18,000 updates: 8-10 minutes of an AMX Xeon, twice that of an AMD EPYC
def test_a_stack_over_a_three_sentence_window_resolves_every_antecedent_distance(workspace, encoders, ceiling):
    """P_s(3p,c), a PEGASUS-style window, at twice the tables' stack updates (`WINDOW_LONGER`): the
    stack resolves the antecedents one, two and three sentences back and the topic cue; another
    example's context brings the suite back to the ceiling, and another document's context costs
    BLEU.
    Measured at this recipe on an AMX Xeon (float32; experiments/sweeps/pas_synthetic_control.yaml,
    row `gendered_window3_18000`), seeds 1-3: accuracy 97.6 / 98.4 / 96.0%, pronoun_d1 96.7 / 99.2 /
    96.7%, pronoun_d2 100 / 100 / 98.3%, pronoun_d3 100 / 100 / 96.2%, sense 91.8 / 92.9 / 91.8%,
    another example's context 51.2 / 49.9 / 51.2%, cxmi 0.033 / 0.038 / 0.025 against a random-context
    cxmi of 0.008 / 0.010 / 0.004, random-context BLEU -2.31 / -2.36 / -2.04 (floor 0.00); this test's
    run reproduced seed 1. Seed 4 learnt the topic cue only (sense 97.6%, pronouns 47-52%), as it
    does over the previous sentence at the tables' recipe. At the tables' recipe (9,000 updates)
    seed 3 reached pronoun_d1-d3 70.0 / 55.2 / 59.2% only."""
    run = fit(workspace, "pas_window", pas_run(encoders["pegasus"], WINDOW, longer=WINDOW_LONGER))
    metrics = run["metrics"]
    assert_uses_context(metrics, ceiling)  # every phenomenon, d2 and d3 included, at 75% or more
    assert_at_ceiling(metrics["contrastive/random_ctx/accuracy"], ceiling)
    assert metrics["cxmi"] >= MIN_CXMI and metrics["random_ctx/cxmi"] > 0, metrics
    assert metrics["random_ctx/bleu_delta"] < 0, metrics
