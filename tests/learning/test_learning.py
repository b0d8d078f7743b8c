"""Learning tests (slow): tiny models on the synthetic corpus use their context, or do not
(docs/design.md sections 6 and 11).

Every run goes through the public API (`config.compose` + `train.fit_run`) and is scored by its own
`metrics.json`: `eval.contrastive: [corpus]` evaluates the synthetic test split's contrastive suite.

Corpus: `synthetic:tiny?docs=2000&test_docs=200&local_cues=70` (~24,000 training sentence pairs;
70% of the sense sentences carry their own topic cue and are not items, see `data/synthetic.py`).

Why local cues. Zhang's step 2 trains theta_d alone on top of a frozen theta_s, so the context can
only act through computations theta_s already has. Pronouns have an in-sentence analogue in every
corpus (the article le|la agrees with the noun), so theta_s already maps a noun's gender to a target
choice and theta_d has only to bring the antecedent in. Without local cues nothing in any sentence
tells theta_s which cue selects which sense of the 8 ambiguous verbs, and step 2 left the sense
items at chance: seed 1, default corpus, 1,500 theta_d steps: 78.7% overall (pronouns 95-100%,
sense 49%); residual instead of the gate 80.4% / sense 50.6%; theta_s unfrozen at step 1,000 of
2,000 (a `StagedUnfreezing` milestone) 79.5% / 49.4%. With local cues the frozen Transformer learns
the cue -> sense rule inside the sentence (measured on a suite of the test sense items with their
cue moved into the sentence: 68.5% and 100% in two runs whose step 2 then resolved every sense
item, 49.8% and 48.5% in two whose sense items stayed at chance: `local_cues=30` seed 1 and
`local_cues=50` seed 2). 70% made it reliable; real text, too, disambiguates most words within
their own sentence.

Context-free ceiling. A sentence-level model sees nothing of the antecedent or the topic, so its
choices are a function of the source sentence, which is independent of the labels: its accuracy on
n items is a binomial proportion around the documented rate (`expected_context_free_accuracy`, 50%
for every phenomenon here) with standard deviation 0.5 / sqrt(n). With `test_docs=200` the suite has
451 items (sd 2.4 points); the tolerance is 4 sd (9.4 points), a false alarm rate of about 1e-4.

Settings (the cheapest found to pass with margin): word vocabulary (a 500-piece BPE splits every
made-up word into ~3 pieces, which tripled the sequences and delayed learning by thousands of
steps), d_model 64 / 4 heads / FFN 256, one layer each side, lr 3e-3 with 300 warmup steps, greedy
test decoding, one validation at the end. The concatenation and Flat tests compare with one
sentence Transformer (`sent`, the `tiny` profile's inverse square root) shared through stage reuse.

Positive controls of the tables (tests/learning/learning_recipe.py): a test whose stages follow a table's
recipe, scaled to this corpus, shows that the recipe can teach the model to read its context at
all. The RNN tests follow Yamagishi & Komachi's Table 2 (`rnn_run`) and the Zhang tests Zhang's
Table 8 (`zhang_run`); the co-attention test keeps the recipe it was calibrated on, because no
recipe of Li & Feng's Table 2 tried so far passes in every seed (`coattn_run` gives the numbers).
tests/learning/test_learning_recipe.py checks the parity of those that follow a table. Each docstring says
over which seeds and CPU types its thresholds were measured.

The concatenation
model learns the sense items last, at a point that moves with the floating-point details of the
CPU: after 3,000 steps 99.3 / 100 % (seeds 1 / 2) on one machine type, but 92.7 % with sense at
62.4 % (seed 1) on an AVX-512 Xeon; after 4,500 steps, which the test uses, 99.3 / 100 / 99.3 %
(seeds 1 / 2 / 3, sense 96.5 / 100 / 98.8 %) there, and 100 % after 6,000. The whole file: about
10 minutes of one CPU core (614 s of calls and set-ups in a fresh-clone suite on the Xeon).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_docmt.data import synthetic
from tests.learning.learning_checks import (
    MIN_CXMI,
    assert_at_ceiling,
    assert_beats_ceiling_on_what_its_window_holds,
    assert_context_blind,
    assert_context_usage,
    assert_resolves,
    assert_uses_context,
    fit,
)
from tests.learning.learning_runs import (
    NAME,
    coattn_run,
    rnn_run,
    sentence_run,
    single_stage_run,
    zhang_run,
)

pytestmark = pytest.mark.slow

COATTN_STEPS = 1000  # the co-attention trained on with a selection cost
COATTN_PHASE = 100  # updates per phase
SELECTION_COST = 0.02  # nats per kept context token in the selector's reward (reading L19)
@pytest.fixture(scope="module")
def sentence(workspace: Path) -> dict:
    return fit(workspace, "sentence", sentence_run())


def test_sentence_transformer_stays_at_the_ceiling_and_concat_beats_it(workspace, sentence, ceiling):
    assert_at_ceiling(sentence["metrics"]["contrastive/accuracy"], ceiling)
    assert_context_blind(sentence["metrics"])
    concat = fit(workspace, "concat", single_stage_run("model: {arch: concat}\ncontext: {prev_sentences: 3}\n"))
    assert_uses_context(concat["metrics"], ceiling)
    assert_context_usage(concat["metrics"])
    assert abs(concat["metrics"]["cxmi/first"]) < 1e-6  # previous sentences only: none there


def test_flat_with_one_previous_and_one_next_sentence_reads_the_topic_cue(workspace, sentence):
    """Ma et al. 2020's window: the first sentence of a document has context too (the next one).

    What Flat learns here depends on the CPU. On an AMD EPYC (AVX2, float32) seed 1 resolves the
    topic cue and the antecedent one sentence back (pronoun_d1 and sense >= 75%). On an AMX Xeon
    (AVX-512, float32) it resolves the topic cue only: sense 100% in seeds 1 and 2 at these 4,500
    updates and in seed 1 at 6,000, pronoun_d1 45.8 / 55.0 / 55.0% (chance). So the test asserts what
    holds on both: the topic cue, read from the context (CXMI, another document's context). Whether
    Flat's bottom block can carry the antecedent's gender reliably is open (docs/papers/ma2020.md)."""
    flat = fit(workspace, "flat", single_stage_run("model: {arch: flat}\n"), "model.enc_layers=2")  # 1 bottom + 1 top
    assert_resolves(flat["metrics"], ("sense",))
    assert_context_usage(flat["metrics"])


@pytest.fixture(scope="module")
def zhang_sentence(workspace: Path) -> dict:
    return fit(workspace, "zhang_sentence", zhang_run(stages=1))


def test_zhang_two_step_learns_from_context_while_its_frozen_stage_one_cannot(
        workspace, zhang_sentence, ceiling):
    run = fit(workspace, "zhang", zhang_run())
    assert run["stages"]["sent"]["reused"] is True  # the sentence run's Transformer, frozen
    assert run["stages"]["sent"]["key"] == zhang_sentence["stages"]["sent"]["key"]
    assert abs(run["metrics"]["initial_damage"]) < 0.01  # the intact start (reading Z17)
    assert_uses_context(run["metrics"], ceiling)
    assert_context_usage(run["metrics"])
    assert abs(run["metrics"]["cxmi/first"]) < 1e-6
    assert_at_ceiling(zhang_sentence["metrics"]["contrastive/accuracy"], ceiling)  # its frozen stage 1


def test_zhang_without_context_attention_stays_at_the_ceiling(workspace, zhang_sentence, ceiling):
    """The control: the same two-step schedule and steps with both context attentions switched
    off; nothing reads the context, so step 2 trains every parameter (theta_d is empty)."""
    run = fit(workspace, "zhang_off", zhang_run(doc={"trainable": ["*"]}), "model.context_attn.encoder=false",
              "model.context_attn.decoder=false")
    assert run["stages"]["sent"]["reused"] is True
    assert_at_ceiling(run["metrics"]["contrastive/accuracy"], ceiling)
    assert run["metrics"]["cxmi"] == 0.0 and run["metrics"]["random_ctx/cxmi"] == 0.0


def antecedent_selection(run_dir: Path, stage: str) -> dict[str, float]:
    """How the co-attention selector treats the antecedent noun of the test suite's pronoun items:
    `precision`, the share of the kept context tokens that are the antecedent; `base_rate`, the
    antecedent's share of all context tokens (the precision of a selector that keeps tokens at
    random); `recall`, the share of items whose antecedent is kept; `kept`, the share of context
    tokens kept. Context tokens include each sentence's `</s>` (what H^doc holds)."""
    from lightning_docmt.data.types import Document
    from lightning_docmt.inference.loaded_model import load_checkpoint
    from lightning_docmt.inference.translate import explain_selection

    model = load_checkpoint(run_dir / stage / "checkpoints" / "last.ckpt")
    items = [e for e in synthetic.contrastive_suite(NAME) if e["phenomenon"].startswith("pronoun")]
    window = model.window.prev_src
    # one document per item: its context, then the pronoun sentence
    documents = [Document(f"{n}", [*e["src_context"][-window:], e["src"]],
                          [""] * (min(window, len(e["src_context"])) + 1))
                 for n, e in enumerate(items)]
    last = {doc.doc_id: len(doc.src) - 1 for doc in documents}
    explained = [line for line in explain_selection(model, documents) if line["sentence"] == last[line["doc_id"]]]
    hits = kept = context = found = 0
    for item, line in zip(items, explained):
        distance = int(item["phenomenon"][-1])
        words = item["src_context"][-distance].split()
        noun = words[words.index("the") + 1]
        hits += line["kept"].count(noun)
        kept += len(line["kept"])
        context += sum(len(sentence.split()) + 1 for sentence in line["context"])
        found += noun in line["kept"]
    return {"precision": hits / max(kept, 1), "base_rate": len(explained) / context,
            "recall": found / len(explained), "kept": kept / context}


def test_co_attention_uses_its_context_and_a_selection_cost_makes_it_select_the_antecedent(
        workspace, sentence, ceiling):
    """Li & Feng 2019 with 3 previous sentences, the paper's default. First the paper's objective
    (Eq. 29, no selection cost) at Table 2's recipe (`coattn_run`, reading L24): the sentence
    Transformer; the co-attention alone on it, frozen, with every context token kept (`warm_up`,
    reading L23, not in the paper); then cross-training (theta_s and theta_r phases of COATTN_PHASE
    updates, the selector at a tenth of the lr, reading L18). It resolves the items through the
    soft attention and its selector keeps every token (nothing in Eq. 29 asks it to drop any,
    reading L19). Then that model trained on with a cost per kept token (`rl.selection_cost`): the
    selector keeps few tokens, and the antecedent among them far above its share of the context."""
    phases = [f"model.cross_training.translator_steps={COATTN_PHASE}",
              f"model.cross_training.selector_steps={COATTN_PHASE}", "model.rl.lr_scale=0.1"]
    header = "model: {arch: lifeng_coattn}\ncontext: {prev_sentences: 3}\n"
    run = fit(workspace, "coattn", coattn_run(), *phases)
    selection = antecedent_selection(Path(run["run_dir"]), "coattn")
    print(f"[learning] coattn (the paper's objective) antecedent selection: {selection}")
    assert_uses_context(run["metrics"], ceiling)
    assert_context_usage(run["metrics"])

    checkpoint = Path(run["run_dir"]) / "coattn" / "checkpoints" / "last.ckpt"
    sparse = fit(workspace, "coattn_sparse", (f"{header}train:\n  stages: {{sparse: {{arch: lifeng_coattn, "
                 f"init_from: {checkpoint}, max_steps: {COATTN_STEPS}}}}}\n  schedule: [sparse]\n", []), *phases,
                 f"model.rl.selection_cost={SELECTION_COST}", "train.optim.schedule=constant", "train.optim.lr=1e-3")
    selection = antecedent_selection(Path(sparse["run_dir"]), "sparse")
    print(f"[learning] coattn with a selection cost, antecedent selection: {selection}")
    # The antecedent's share of the kept tokens against its share of the context (what a selector that
    # keeps tokens at random gets): at Table 2's recipe 7.2 / 7.0 / 12.2 / 8.5 times it in seeds 1-4 on an
    # AVX-512 Xeon, 4.5 times with bf16 autocast (seed 1); the layout this test had before (its own
    # inverse square root) gave 7.8-9.5 there and 3.8 times in seed 1 on an AMD EPYC, about half;
    # on an AMD EPYC with AVX2 and no native bf16 (float32), 8.6 / 8.6 / 9.1 / 8.1 times in seeds 1-4;
    # 2 times keeps a margin under every measurement and under half of the lowest (bf16), and stays
    # far above a blind selector's 1. The share kept: 2.8-10.3% of the context tokens.
    assert selection["kept"] <= 0.25 and selection["precision"] >= 2.0 * selection["base_rate"], selection
    for phenomenon in ("pronoun_d1", "pronoun_d2", "pronoun_d3"):
        assert sparse["metrics"][f"contrastive/{phenomenon}"] >= 0.75, (phenomenon, sparse["metrics"])
    assert sparse["metrics"]["cxmi"] >= MIN_CXMI, sparse["metrics"]


RNN_SETTINGS = ["train.optim.optimizer=adam"]  # the `cpu` profile's, as in Table 2 (reading Y17)


@pytest.fixture(scope="module")
def rnn_baseline(workspace: Path) -> dict:
    return fit(workspace, "rnn_base", rnn_run("none", "source"), *RNN_SETTINGS)


@pytest.mark.parametrize("side", ["source", "target"])
def test_the_shared_context_rnn_beats_its_baseline_on_what_the_previous_sentence_holds(
        workspace, rnn_baseline, ceiling, side):
    """Yamagishi & Komachi 2019, Sh-Src and Sh-Tgt: the encoder states of the previous source
    sentence, or the decoder states of the previous target sentence (teacher-forced), carried from
    sentence to sentence. The baseline RNN stays at the context-free ceiling; each shared model,
    trained on from it, resolves what the previous sentence holds (pronoun_d1 and sense), beats the
    baseline by more than the tolerance, and uses its context: positive CXMI against no context and
    against another document's state, another document's state costs BLEU, and another example's
    context loses at least half its gain.
    The contrastive suite walks each candidate document in order (`evaluation/contrastive_scoring.py`).
    NOT IN PAPER: Adam, as Table 2 at the `cpu` profile (reading Y17), instead of AdaGrad at 0.01.
    The stages follow Table 2's recipe (`rnn_run`): the base 1,500 updates of a linear decay, then
    `ctx` as many (1,500 updates) on a schedule of its own. Measured at that recipe on an AVX-512
    Xeon (baseline 48.8-53.4%): Sh-Src float32 seeds 1-4 74.5 / 71.8 / 75.2 / 72.1%, bf16 and
    AVX2-held float32 seed 1 73.2 / 72.5%; Sh-Tgt float32 seeds 1-3 73.0 / 68.1 / 76.1%, bf16 and
    AVX2-held float32 seed 2 70.3 / 68.3%; in those 11 runs pronoun_d1 >= 99.2% and sense >= 92.9%,
    49.7-55.4% with another example's context, cxmi 0.0095-0.028 (Sh-Src) and 0.0082-0.014
    (Sh-Tgt; MIN_CXMI 0.005), random_ctx/cxmi 0.019-0.038, random-context BLEU -1.1 to -1.8.
    Table 2's earlier `ctx` of a third of the base (500 updates here) failed seed 3 (Sh-Src pronoun_d1
    60%: the topic cue only), also at a quarter of the peak lr (experiments/sweeps/yk_rnn_ctx_stage.yaml)."""
    base = rnn_baseline["metrics"]
    assert_at_ceiling(base["contrastive/accuracy"], ceiling)
    assert_context_blind(base)
    shared = fit(workspace, f"rnn_shared_{side}", rnn_run("shared", side), *RNN_SETTINGS)
    metrics = shared["metrics"]
    assert shared["stages"]["base"]["reused"] is True  # trained on from the very baseline above
    assert metrics["contrastive/accuracy"] >= base["contrastive/accuracy"] + ceiling["tolerance"], metrics
    assert_beats_ceiling_on_what_its_window_holds(metrics, ceiling)
    assert_context_usage(metrics)  # from the document-order test loop (evaluation/carried_context.py)
