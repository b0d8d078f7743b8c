"""Li & Feng 2019's co-attention model (`models/lifeng_coattn.py`): the context sentences, the hard
selector and its beam, REINFORCE, the soft attention and gate, the cross-training phases (each
group bit-identical while the other trains, resumed mid-phase), decoding and a tiny `docmt fit`."""

from __future__ import annotations

import csv
import itertools
import json
from fnmatch import fnmatchcase
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from lightning_docmt.batch import EOS_ID, PAD_ID, SEP_ID
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.models.lifeng_coattn import (
    SELECTOR_PHASE,
    THETA_R_GLOBS,
    THETA_S_GLOBS,
    TRANSLATOR_PHASE,
    CoAttention,
    LiFengCoAttentionSeq2Seq,
    LiFengConfig,
    ReinforceConfig,
)
from lightning_docmt.models.transformer import TransformerConfig, TransformerSeq2Seq
from lightning_docmt.nn.context_sentences import pack_left, split_sentences
from lightning_docmt.nn.hard_selection import HardSelector
from lightning_docmt.nn.output_loss import output_label_smoothed_nll
from lightning_docmt.nn.reinforce import advantages, policy_loss
from lightning_docmt.training import trainer as trainer_factory
from tests.helpers.cli_run import docmt, run_dir_of
from tests.helpers.hook_stand_ins import PhaseRecorder
from tests.helpers.model_inputs import SIZES, VOCAB, padded, sentence
from tests.helpers.run_env import single_process_run_env
from tests.helpers.stage_fits import fit_then_resume, tiny_config
from tests.models.model_checks import (
    assert_beam_scores_are_log_probs_and_batching_invisible,
    assert_incremental_matches_full,
    assert_packing_changes_nothing,
    assert_padding_and_batching_invisible,
)

D = SIZES["d_model"]


def coattn_model(seed: int = 0, **overrides) -> LiFengCoAttentionSeq2Seq:
    torch.manual_seed(seed)
    cfg = LiFengConfig(**{**SIZES, "dropout": 0.1, "attn_dropout": 0.1, "relu_dropout": 0.1, **overrides})
    model = LiFengCoAttentionSeq2Seq(cfg, VOCAB, VOCAB).eval()
    torch.nn.init.normal_(model.selector.out.weight, std=3.0)  # a selector that keeps some tokens
    return model


def joined_context(lengths: list[int], g: torch.Generator) -> tuple[list[int], list[int]]:
    """`ctx_src` and `ctx_src_seg` rows of previous sentences of `lengths` (oldest first), joined
    without separator and ending in `<eos>` (the batch contract); [] is the empty context."""
    tokens, segments = [], []
    for distance, n in zip(range(len(lengths), 0, -1), lengths):
        tokens += sentence(n, g)
        segments += [distance] * n
    return tokens + [EOS_ID], segments + ([1] if lengths else [0])


def doc_batch(seed: int = 0) -> dict[str, Tensor]:
    """Four sentences with previous sentences of lengths [3, 4], [], [5], [2, 1, 3]."""
    g = torch.Generator().manual_seed(seed)
    contexts = [joined_context(lengths, g) for lengths in ([3, 4], [], [5], [2, 1, 3])]
    targets = [sentence(n, g) for n in [4, 6, 1, 2]]
    return {"src": padded([sentence(n, g) + [EOS_ID] for n in [5, 2, 7, 3]]),
            "tgt_in": padded([[2] + t for t in targets]), "tgt_out": padded([t + [EOS_ID] for t in targets]),
            "ctx_src": padded([c for c, _ in contexts]), "ctx_src_seg": padded([s for _, s in contexts])}


def output_loss(model):
    return lambda hidden, target: output_label_smoothed_nll(hidden, model.output.weight, target, 0.1, PAD_ID)


# ---------------------------------------------------------------- the context sentences (reading L7)
def test_the_joined_context_is_cut_back_into_sentences_each_ending_in_eos():
    ctx = torch.tensor([[5, 6, 7, 8, 9, EOS_ID], [EOS_ID, 0, 0, 0, 0, 0], [10, SEP_ID, 11, EOS_ID, 0, 0]])
    seg = torch.tensor([[2, 2, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0], [2, 2, 1, 1, 0, 0]])
    cut = split_sentences(ctx, seg, 2)
    assert cut.tokens.tolist() == [[[5, 6, EOS_ID, PAD_ID], [7, 8, 9, EOS_ID]],
                                   [[EOS_ID, PAD_ID, PAD_ID, PAD_ID], [EOS_ID, PAD_ID, PAD_ID, PAD_ID]],
                                   [[10, EOS_ID, PAD_ID, PAD_ID], [11, EOS_ID, PAD_ID, PAD_ID]]]  # <sep> dropped
    assert cut.present.tolist() == [[True, True], [False, False], [True, True]]


def test_pack_left_keeps_the_order_and_pads_the_rest():
    states = torch.arange(12.0).view(2, 6, 1)
    keep = torch.tensor([[False, True, False, True, True, False], [False] * 6])
    packed, pad = pack_left(states, keep)
    assert packed[..., 0].tolist() == [[1.0, 3.0, 4.0], [0.0, 0.0, 0.0]]
    assert pad.tolist() == [[False, False, False], [True, True, True]]


def test_each_context_sentence_is_encoded_alone_as_a_source_sentence():
    """H^doc (Eq. 15) holds, per previous sentence, the encoder's states of that sentence alone."""
    model, batch = coattn_model(), doc_batch()
    view = model.context_view(batch)
    row = 3  # previous sentences of lengths 2, 1, 3, oldest first
    tokens = batch["ctx_src"][row, :6].tolist()
    expected = [model.encode_tokens(torch.tensor([part + [EOS_ID]]))[0][0]
                for part in (tokens[:2], tokens[2:3], tokens[3:6])]
    assert torch.allclose(view.context[row, :9], torch.cat(expected), atol=1e-5)
    assert view.context_tokens[row, :9].tolist() == \
        tokens[:2] + [EOS_ID] + tokens[2:3] + [EOS_ID] + tokens[3:6] + [EOS_ID]
    assert view.context_pad.sum(1).tolist() == [view.context.size(1) - n for n in (9, 0, 6, 9)]


# ---------------------------------------------------------------- the hard selector (Eqs. 20-24)
def random_selector(seed: int, length: int = 5) -> tuple[HardSelector, Any]:
    torch.manual_seed(seed)
    selector = HardSelector(4)
    for p in selector.parameters():
        torch.nn.init.normal_(p, std=1.5)
    current, context = torch.randn(1, 3, 4), torch.randn(1, length, 4)
    inputs = selector.inputs(current, torch.zeros(1, 3, dtype=torch.bool),
                             context, torch.zeros(1, length, dtype=torch.bool))
    return selector, inputs


def test_the_step_is_the_gru_cells_formula():
    selector, _ = random_selector(0)
    x, h = torch.randn(3, 12), torch.randn(3, 4)
    input_gates = torch.nn.functional.linear(x, selector.gru.weight_ih, selector.gru.bias_ih)
    assert torch.allclose(selector.gru_step(input_gates, h), selector.gru(x, h), atol=1e-6)


def exhaustive_best(selector, inputs, length: int = 5) -> tuple[list[int], float]:
    scores = {z: float(selector.log_prob(inputs, torch.tensor([z])).log_prob.detach())
              for z in itertools.product([0, 1], repeat=length)}
    best = max(scores, key=scores.get)
    return list(best), scores[best]


def test_the_width_2_beam_finds_the_most_probable_z_where_greedy_does_not():
    """Seed 18 gives a selector whose most probable z (1 0 0 1 1) does not start with the locally
    best label (greedy: 0 1 0 0 1):
    the greedy tagger misses it, the width-2 beam finds it; in every case the beam's score is the
    teacher-forced log P(z) of what it returns and never below greedy's."""
    selector, inputs = random_selector(18)
    best, best_score = exhaustive_best(selector, inputs)
    beam, greedy = selector.beam(inputs, 2), selector.beam(inputs, 1)
    assert beam.z[0].tolist() == best and float(beam.log_prob) == pytest.approx(best_score, abs=1e-5)
    assert greedy.z[0].tolist() != best and float(greedy.log_prob) < best_score - 1e-3
    for seed in range(10):
        selector, inputs = random_selector(seed)
        beam, greedy = selector.beam(inputs, 2), selector.beam(inputs, 1)
        recomputed = selector.log_prob(inputs, beam.z).log_prob
        assert float(beam.log_prob) == pytest.approx(float(recomputed.detach()), abs=1e-5)
        assert float(beam.log_prob) >= float(greedy.log_prob) - 1e-6


def test_padding_positions_are_never_selected_and_cost_nothing():
    selector, _ = random_selector(1)
    current, context = torch.randn(2, 3, 4), torch.randn(2, 6, 4)
    pad = torch.tensor([[False] * 6, [False, False, True, True, True, True]])
    inputs = selector.inputs(current, torch.zeros(2, 3, dtype=torch.bool), context, pad)
    for selection in (selector.beam(inputs, 2), selector.sample(inputs.repeat(8))):
        assert not selection.z[:, 2:][pad.repeat_interleave(len(selection.z) // 2, 0)[:, 2:]].any()
    short = selector.inputs(current[1:], torch.zeros(1, 3, dtype=torch.bool), context[1:, :2],
                            torch.zeros(1, 2, dtype=torch.bool))
    assert float(selector.beam(short, 2).log_prob) == \
        pytest.approx(float(selector.beam(inputs, 2).log_prob[1]), abs=1e-5)


# ---------------------------------------------------------------- REINFORCE (Eqs. 29-30, reading L2)
@pytest.mark.parametrize("kind", ["seq_prob", "log_prob", "avg_token_log_prob"])
def test_reinforce_moves_probability_toward_the_rewarded_action(kind):
    """A one-token policy; the reference is 1,000 times likelier when z = 1 (log R -300 vs -307)."""
    selector, inputs = random_selector(2, length=1)
    inputs = type(inputs)(inputs.gates.detach(), inputs.valid)  # fixed features; the GRU and W_p learn
    optimizer = torch.optim.SGD(selector.parameters(), lr=0.5)
    first = float(selector.log_prob(inputs, torch.ones(1, 1, dtype=torch.long)).log_prob.detach().exp())
    for _ in range(30):
        selection = selector.sample(inputs.repeat(8))
        log_r = torch.where(selection.z[:, 0].eq(1), -300.0, -307.0).view(1, 8)
        loss = policy_loss(selection.log_prob.view(1, 8), advantages(log_r, torch.full((1, 8), 10), kind))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    last = float(selector.log_prob(inputs, torch.ones(1, 1, dtype=torch.long)).log_prob.detach().exp())
    assert first < 0.1 and last > first + 0.1  # avg_token_log_prob's rewards differ 10 times less
    if kind != "avg_token_log_prob":
        assert last > 0.95


def test_the_sequence_probability_advantage_survives_underflow():
    log_r = torch.tensor([[-800.0, -800.0 + torch.log(torch.tensor(3.0))], [-5.0, -5.0]])
    adv = advantages(log_r, torch.ones(2, 2), "seq_prob")
    assert adv.flatten().tolist() == pytest.approx([-0.5, 0.5, 0.0, 0.0], abs=1e-4)  # R_s / mean(R) - 1
    assert advantages(log_r, torch.full((2, 2), 4), "avg_token_log_prob").sum(1).abs().max() < 1e-6
    with pytest.raises(ValueError, match="unknown reward"):
        advantages(log_r, torch.ones(2, 2), "bleu")


# ---------------------------------------------------------------- soft attention and gate (Eqs. 25-28)
def test_the_gate_mixes_current_and_context_reading_as_a_hand_example():
    torch.manual_seed(0)
    block = CoAttention(LiFengConfig(**SIZES)).eval()
    current, context = torch.randn(2, 3, D), torch.randn(2, 4, D)
    selected = torch.tensor([[True, False, True, False], [False] * 4])
    with torch.no_grad():
        block.gate.input_proj.weight.zero_()
        block.gate.context_proj.weight.zero_()  # lambda = sigmoid(0) = 1/2
    mask = torch.tensor([[[[True, False, True, False]]]])
    d = block.ffn(block.attn(block.query(current[:1]), context[:1], mask))  # Eqs. 25-26
    mixed, gate = block.attend(current, context, selected)
    assert torch.allclose(mixed[0], 0.5 * current[0] + 0.5 * d[0], atol=1e-6)  # Eq. 28
    assert torch.equal(mixed[1], current[1])  # nothing selected: H~ = H^cur (reading L4)
    assert torch.equal(gate[0], torch.full_like(gate[0], 0.5)) and torch.equal(gate[1], torch.ones_like(gate[1]))
    assert torch.equal(block(current, context, selected), mixed)
    with torch.no_grad():
        block.gate.input_proj.weight.copy_(torch.eye(D) * 50.0)
    mixed = block(current, context, selected)  # W_h' = 50 I, W_d = 0: lambda -> 1 where h > 0.5
    positive = current[0] > 0.5
    assert torch.allclose(mixed[0][positive], current[0][positive], atol=1e-4)


def test_the_context_norm_makes_the_gate_blind_to_the_size_of_the_context_vector():
    """Reading L21: with `context_norm`, scaling d (here through the FFN's output layer) changes
    neither lambda nor H^mix; without it, the larger d moves the gate."""
    torch.manual_seed(0)
    current, context = torch.randn(1, 3, D), torch.randn(1, 4, D)
    selected = torch.tensor([[True, True, False, True]])
    for context_norm in (True, False):
        block = CoAttention(LiFengConfig(**SIZES, context_norm=context_norm)).eval()
        mixed, gate = block.attend(current, context, selected)
        with torch.no_grad():
            block.ffn.fc2.weight.mul_(30.0)
            block.ffn.fc2.bias.mul_(30.0)
        scaled_mixed, scaled_gate = block.attend(current, context, selected)
        same = torch.allclose(scaled_gate, gate, atol=1e-5) and torch.allclose(scaled_mixed, mixed, atol=1e-4)
        assert same == context_norm
        assert isinstance(block.context_norm, nn.LayerNorm) == context_norm


# ---------------------------------------------------------------- the model
def test_a_sentence_transformer_checkpoint_loads_with_only_the_new_modules_missing():
    transformer = TransformerSeq2Seq(TransformerConfig(**SIZES), VOCAB, VOCAB)
    model = coattn_model()
    result = model.load_state_dict(transformer.state_dict(), strict=False)
    assert not result.unexpected_keys
    assert result.missing_keys and all(k.startswith(("selector.", "coattn.")) for k in result.missing_keys)


def test_the_two_groups_partition_the_parameters():
    names = [n for n, _ in coattn_model().named_parameters()]
    in_s = {n for n in names if any(fnmatchcase(n, g) for g in THETA_S_GLOBS)}
    in_r = {n for n in names if any(fnmatchcase(n, g) for g in THETA_R_GLOBS)}
    assert in_s | in_r == set(names) and not in_s & in_r
    assert in_r == {n for n in names if n.startswith("selector.")}


def test_padding_and_batching_are_invisible_and_decoding_matches_teacher_forcing():
    model, batch = coattn_model(), doc_batch()
    assert any(model.kept_context_tokens(batch))  # the selector keeps something, so the check bites
    assert_padding_and_batching_invisible(model, batch, context_keys=(("ctx_src", "ctx_src_seg"),))
    assert_incremental_matches_full(model, batch)
    source_only = {k: v for k, v in batch.items() if not k.startswith("tgt")}
    assert_beam_scores_are_log_probs_and_batching_invisible(model, source_only)


def test_the_selected_context_changes_the_translation_and_an_empty_one_does_not():
    model, batch = coattn_model(), doc_batch()
    logits = model(batch)
    changed = {**batch, "ctx_src": torch.where(batch["ctx_src"].gt(EOS_ID), 7, batch["ctx_src"])}
    differs = (model(changed) - logits).abs().amax(dim=(1, 2))  # (B,)
    assert differs[1] == 0 and differs[[0, 2, 3]].min() > 1e-4  # row 1 has no context
    transformer = TransformerSeq2Seq(TransformerConfig(**SIZES), VOCAB, VOCAB).eval()
    transformer.load_state_dict(model.state_dict(), strict=False)
    assert torch.allclose(transformer(batch)[1], logits[1], atol=1e-6)  # H~ = H^cur (reading L4)


def test_the_selector_phase_trains_the_selector_only_and_logs_its_behaviour():
    model, batch = coattn_model(rl=ReinforceConfig("seq_prob", 3)), doc_batch()
    model.train()
    terms = model.loss_terms(batch, output_loss(model), SELECTOR_PHASE)
    terms.loss_sum.backward()
    with_grad = {n for n, p in model.named_parameters() if p.grad is not None}
    assert with_grad == {n for n, _ in model.named_parameters() if n.startswith("selector.")}
    assert set(terms.stats) == {"selection_rate", "policy_entropy", "reward_mean", "reward_var"}
    assert 0 < float(terms.stats["selection_rate"]) < 1 and float(terms.stats["reward_var"]) > 0
    model.zero_grad()
    terms = model.loss_terms(batch, output_loss(model), TRANSLATOR_PHASE)
    terms.loss_sum.backward()
    assert set(terms.stats) == {"selection_rate", "policy_entropy", "gate_mean", "gate_shut"}
    # a fresh gate: lambda ~ 1/2
    assert 0.2 < float(terms.stats["gate_mean"]) < 0.8 and float(terms.stats["gate_shut"]) < 0.5
    assert all(p.grad is None for n, p in model.named_parameters() if n.startswith("selector."))
    assert model.encoder.layers[0].ffn.fn.fc1.weight.grad is not None


def test_selection_all_attends_to_every_context_token_without_a_selector():
    """Reading L22: the co-attention over every real context token; no selector, no phases, and
    the cross entropy reaches every parameter (so DDP needs no unused-parameter search)."""
    torch.manual_seed(0)
    model, batch = LiFengCoAttentionSeq2Seq(LiFengConfig(**SIZES, selection="all"), VOCAB, VOCAB).eval(), doc_batch()
    view = model.context_view(batch)
    assert torch.equal(model.select(view).z.bool(), ~view.context_pad)
    everything = model.coattn(view.current, view.context, ~view.context_pad)
    assert torch.equal(model.encode(batch).memory, everything)
    assert model.selector is None and not any(n.startswith("selector.") for n, _ in model.named_parameters())
    assert LiFengCoAttentionSeq2Seq.optimizer_phases(model.cfg) == []
    model.loss_terms(batch, output_loss(model)).loss_sum.backward()
    assert all(p.grad is not None for _, p in model.named_parameters())


def test_bad_settings_are_one_clear_error():
    with pytest.raises(DocMTInputError, match="model.rl.reward"):
        coattn_model(rl=ReinforceConfig("bleu", 4))
    with pytest.raises(DocMTInputError, match="model.rl.samples"):
        coattn_model(rl=ReinforceConfig("log_prob", 1))
    with pytest.raises(DocMTInputError, match="model.selection"):
        coattn_model(selection="some")
    with pytest.raises(DocMTInputError, match="context.prev_sentences"):
        coattn_model().encode({k: v for k, v in doc_batch().items() if not k.startswith("ctx")})


# ---------------------------------------------------------------- cross-training (phases)
PHASE_STEPS, STEPS, RESUME_AT = 2, 8, 3
EXPECTED_PHASES = [(TRANSLATOR_PHASE, SELECTOR_PHASE)[step // PHASE_STEPS % 2] for step in range(STEPS)]
COATTN_RUN = ["model.arch=lifeng_coattn", "context.prev_sentences=2", f"train.max_steps={STEPS}",
              "train.val_every_steps=4", f"model.cross_training.translator_steps={PHASE_STEPS}",
              f"model.cross_training.selector_steps={PHASE_STEPS}", "model.rl.samples=2", "data.max_tokens=512"]


def group_of(name: str) -> str:
    return SELECTOR_PHASE if any(fnmatchcase(name, g) for g in THETA_R_GLOBS) else TRANSLATOR_PHASE


class GroupRecorder(PhaseRecorder):
    """The phase, weights and optimizers before every update (the stand-in's gradient norms left out)."""

    def on_after_backward(self, trainer, pl_module) -> None:
        pass

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        pass


@pytest.fixture(scope="module")
def cross_trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("coattn")
    full, resumed = GroupRecorder(), GroupRecorder()
    fit, resumed_fit = fit_then_resume(tiny_config(root, *COATTN_RUN), root, full, resumed, RESUME_AT)
    return {"full": full, "resumed": resumed, "fit": fit}


@pytest.mark.fit
def test_each_group_is_bit_identical_while_the_other_trains(cross_trained):
    full = cross_trained["full"]
    assert [full.steps[s]["phase"] for s in range(STEPS)] == EXPECTED_PHASES
    for step in range(STEPS):
        before = full.steps[step]["weights"]
        after = full.steps[step + 1]["weights"] if step + 1 < STEPS else full.end
        changed = {group_of(n) for n in before if not torch.equal(before[n], after[n])}
        assert changed == {EXPECTED_PHASES[step]}, step


@pytest.mark.fit
def test_a_fit_resumed_inside_a_selector_phase_continues_it_with_the_same_frozen_set(cross_trained):
    full, resumed = cross_trained["full"], cross_trained["resumed"]
    assert resumed.steps[RESUME_AT]["phase"] == SELECTOR_PHASE == EXPECTED_PHASES[RESUME_AT - 1]
    for step in range(RESUME_AT, STEPS):
        assert resumed.steps[step]["optimizers"] == full.steps[step]["optimizers"]
    assert all(torch.allclose(resumed.end[k], full.end[k], atol=1e-6, rtol=0) for k in full.end)


def test_the_trainer_lets_ddp_skip_the_frozen_groups_parameters(tmp_path):
    cfg = tiny_config(tmp_path, *COATTN_RUN, "trainer.strategy=ddp")
    trainer, _ = trainer_factory.build_trainer(cfg, "main", tmp_path / "run")
    assert trainer.strategy._ddp_kwargs.get("find_unused_parameters") is True


@pytest.mark.fit
def test_docmt_fit_pretrains_then_cross_trains_and_explains_the_selection(tmp_path, monkeypatch):
    """`sent` (a Transformer, Eq. 32) then `coattn` from it; the selector's figures land in the
    stage's metrics.csv; `docmt translate --explain` prints the kept context tokens per sentence."""
    config = tmp_path / "coattn.yaml"
    config.write_text(f"data:\n  corpus: synthetic:tiny\n  cache_dir: {tmp_path / 'cache'}\n"
                      f"logging:\n  runs_dir: {tmp_path / 'runs'}\n"
                      "context:\n  prev_sentences: 2\n"
                      "model:\n  arch: lifeng_coattn\n  rl: {samples: 2}\n"
                      "  cross_training: {translator_steps: 2, selector_steps: 2}\n"
                      "decode:\n  beam: 2\ntrainer:\n  log_every_n_steps: 1\n"
                      "eval:\n  context_usage: true\n"
                      "train:\n  max_steps: 6\n  val_every_steps: 6\n  schedule: [sent, coattn]\n"
                      "  stages:\n    sent: {arch: transformer}\n"
                      "    coattn: {arch: lifeng_coattn, init_from: sent}\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with single_process_run_env():
        run = run_dir_of(docmt("fit", config, "--profile", "tiny"))
    rows = list(csv.DictReader(open(run / "coattn" / "metrics.csv")))
    logged = lambda name: [float(r[name]) for r in rows if r.get(name)]  # noqa: E731
    assert logged("train/theta_s/gate_mean") and logged("train/theta_r/selection_rate")
    assert all(0.0 <= v <= 1.0 for v in logged("train/theta_r/selection_rate") + logged("train/theta_s/gate_mean")
               + logged("train/theta_s/gate_shut"))
    assert all(v >= 0.0 for v in logged("train/theta_r/reward_var") + logged("train/theta_s/policy_entropy"))
    stages = json.loads((run / "run.json").read_text())["stages"]
    done = json.loads((tmp_path / "cache" / "stages" / stages["coattn"]["key"] / "done.json").read_text())
    # phases of 2 updates: theta_s at updates 0, 1, 4, 5, theta_r at 2, 3, each optimizer's lr recorded
    assert [r["updates"] for r in done["lr"]] == [4, 2]
    scale = OmegaConf.load(run / "config.yaml").model.rl.lr_scale  # each phase warms up over its own updates
    assert done["lr"][1]["first"] == pytest.approx(scale * done["lr"][0]["first"])
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["test/bleu"] >= 0.0 and metrics["cxmi"] != 0.0  # the co-attention reads its context
    source = tmp_path / "doc.jsonl"
    source.write_text(json.dumps({"doc_id": "d", "src": ["a b c", "d e", "f g h"]}) + "\n")
    explained = docmt("translate", "--ckpt", run / "coattn" / "checkpoints" / "last.ckpt",
                      "--input", source, "--output", tmp_path / "out.jsonl", "--explain")
    assert explained.code == 0, explained.err
    lines = [json.loads(line) for line in explained.out.splitlines() if line.startswith("{")]
    assert [line["sentence"] for line in lines] == [0, 1, 2]
    assert [line["context"] for line in lines] == [[], ["a b c"], ["a b c", "d e"]]
    assert lines[0]["kept"] == []  # a first sentence has nothing to select from
    for line in lines:
        context_pieces = {piece for text in line["context"] for piece in line_pieces(run, text)} | {"</s>"}
        assert set(line["kept"]) <= context_pieces
    assert (tmp_path / "out.jsonl").exists()


def line_pieces(run, text: str) -> list[str]:
    """The source vocabulary's pieces of `text` (what --explain prints)."""
    from lightning_docmt.inference.loaded_model import load_checkpoint
    vocab = load_checkpoint(run / "coattn" / "checkpoints" / "last.ckpt").src_vocab
    return [vocab.piece(i) for i in vocab.encode(text)]


def test_packed_context_sentences_change_nothing(monkeypatch):
    assert_packing_changes_nothing(coattn_model, doc_batch(), monkeypatch)
