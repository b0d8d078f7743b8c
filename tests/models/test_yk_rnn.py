"""Yamagishi & Komachi 2019's attentional LSTM (`models/yk_rnn.py`): every context variant decodes
incrementally as it scores, ignores padding and its batch neighbours; dot attention and the sum of
mix; c^0 = 0; the carried states (what the shared models hand on, and how they reach the next
sentence of the same document only); initialisation from the baseline (reading Y7); the preset."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from lightning_docmt.batch import EOS_ID, PAD_ID
from lightning_docmt.checkpoints import read_checkpoint
from lightning_docmt.config.composition import compose
from lightning_docmt.config.registry import build_model, model_config
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.inference import decoding
from lightning_docmt.models.yk_rnn import SharedContextRNN, YKRNNConfig, YKRNNSeq2Seq
from lightning_docmt.nn.carried_state import CarriedState, map_tensors
from lightning_docmt.nn.luong_attention import Memory, dot_attention
from lightning_docmt.nn.model_hooks import CARRY_KEY
from lightning_docmt.nn.output_loss import output_label_smoothed_nll
from lightning_docmt.nn.seq2seq import select_rows
from lightning_docmt.training.module import DocMTModule
from lightning_docmt.training.run import load_weights
from tests.helpers.model_inputs import VOCAB, padded, random_batch, sentence
from tests.helpers.run_env import single_process_run_env
from tests.helpers.stage_fits import fit_stage, tiny_config
from tests.models.model_checks import (
    assert_beam_scores_are_log_probs_and_batching_invisible,
    assert_incremental_matches_full,
    assert_padding_and_batching_invisible,
)

D = 16
CARRY_TOKENS = 8  # every sentence below fits: the carry keeps 9 positions
VARIANTS = [("none", "source"), ("separated", "source"), ("separated", "target"), ("separated", "mix"),
            ("shared", "source"), ("shared", "target"), ("shared", "mix")]
CONTEXT_VARIANTS = VARIANTS[1:]
SHARED = [v for v in VARIANTS if v[0] == "shared"]
SIDES = {"source": {"source"}, "target": {"target"}, "mix": {"source", "target"}}


def check_only_new_parameters_missing(missing: list[str], encoder_sides: set[str], prefix: str = "") -> None:
    """`missing` (of a baseline's weights) is W_h's context columns and the separated encoders of
    `encoder_sides`, nothing else (readings Y7, Y14); `prefix`: that of the model's names."""
    encoders = f"{prefix}context_encoders."
    assert {n for n in missing if not n.startswith(encoders)} == {f"{prefix}attn_hidden.context.weight"}
    assert {n.removeprefix(encoders).split(".")[0] for n in missing if n.startswith(encoders)} == encoder_sides


def rnn(context: str = "none", side: str = "source", seed: int = 0, **overrides) -> YKRNNSeq2Seq:
    """A small random model in eval mode, separate embeddings and W_o (the preset's)."""
    torch.manual_seed(seed)
    cfg = YKRNNConfig(**{"d_model": D, "enc_layers": 2, "dec_layers": 2, "dropout": 0.1,
                         "share_embeddings": False, "tie_output": False, "context": context,
                         "context_side": side, "carry_tokens": CARRY_TOKENS, **overrides})
    return YKRNNSeq2Seq(cfg, VOCAB, VOCAB).eval()


def doc_batch(seed: int = 0) -> dict[str, Tensor]:
    """Four sentences; the previous sentences (source, target) of rows 1 and 3 are empty (`<eos>`
    alone: first sentences of their documents)."""
    batch = random_batch([5, 2, 7, 3], [4, 6, 1, 2], seed=seed)
    g = torch.Generator().manual_seed(seed + 100)
    for key, lengths in (("ctx_src", [3, 0, 5, 0]), ("ctx_tgt", [6, 0, 2, 0])):
        batch[key] = padded([sentence(n, g) + [EOS_ID] for n in lengths])
    return batch


def output_loss(model: YKRNNSeq2Seq):
    return lambda hidden, target: output_label_smoothed_nll(hidden, model.output.weight, target, 0.0, PAD_ID)


def with_first_sentences(carry: dict[str, Memory], first: Tensor, initial: dict[str, Memory]) -> dict[str, Memory]:
    """`carry` with the rows where `first` (B,) bool is true reset to `initial`."""
    return map_tensors(lambda kept, reset: torch.where(first.view(-1, *[1] * (kept.dim() - 1)), reset, kept),
                       carry, initial)


def previous_carry(model: SharedContextRNN, batch: dict[str, Tensor]) -> dict[str, Memory]:
    """What the previous sentences (another random batch) handed on, rows 1 and 3 being first sentences."""
    previous = doc_batch(seed=7)
    handed_on = model.loss_terms({**previous, CARRY_KEY: model.initial_carry(previous)}, output_loss(model)).carry
    return with_first_sentences(handed_on, torch.tensor([False, True, False, True]), model.initial_carry(batch))


class CarriedRows(nn.Module):
    """A shared model reading row `batch["carry_row"][:, 0]` of a fixed carry: the model_checks
    helpers slice every batch tensor by row and trim it, and so slice the carry too."""

    def __init__(self, model: SharedContextRNN, carry: dict[str, Memory]):
        super().__init__()
        self.model, self.carry = model, carry

    def with_carry(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        return {**batch, CARRY_KEY: select_rows(self.carry, batch["carry_row"][:, 0] - 1)}

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return self.model(self.with_carry(batch))

    def encode(self, batch: dict[str, Tensor]):
        return self.model.encode(self.with_carry(batch))

    def init_cache(self, state):
        return self.model.init_cache(state)

    def decode_step(self, tokens, state, cache) -> Tensor:
        return self.model.decode_step(tokens, state, cache)


def subject(context: str, side: str) -> tuple[nn.Module, dict[str, Tensor]]:
    """The model of a variant and a batch for it (a shared model wrapped in `CarriedRows`)."""
    model, batch = rnn(context, side), doc_batch()
    if context != "shared":
        return model, batch
    rows = torch.arange(1, batch["src"].size(0) + 1)[:, None]  # (B, 1), from 1: never PAD_ID
    return CarriedRows(model, previous_carry(model, batch)), {**batch, "carry_row": rows}


def hand_attention(h: Tensor, memory: Memory) -> Tensor:
    """Eqs. 8-9 row by row over the real positions only; zero without any (B, T, H)."""
    rows = []
    for b in range(h.size(0)):
        z = memory.states[b][~memory.pad[b]]  # (L, H)
        rows.append(torch.softmax(h[b] @ z.T, dim=-1) @ z if len(z) else torch.zeros_like(h[b]))
    return torch.stack(rows)


# ---------------------------------------------------------------- the interface, every variant
@pytest.mark.parametrize("context,side", VARIANTS)
def test_incremental_decoding_matches_the_full_forward(context, side):
    model, batch = subject(context, side)
    assert_incremental_matches_full(model, batch)


@pytest.mark.parametrize("context,side", VARIANTS)
def test_padding_and_batch_neighbours_are_invisible(context, side):
    model, batch = subject(context, side)
    assert_padding_and_batching_invisible(model, batch, ("ctx_src", "ctx_tgt"))


@pytest.mark.parametrize("context,side", VARIANTS)
def test_beam_scores_are_log_probs_and_batching_invisible(context, side):
    model, batch = subject(context, side)
    source_only = {k: v for k, v in batch.items() if k not in ("tgt_in", "tgt_out")}
    assert_beam_scores_are_log_probs_and_batching_invisible(model, source_only)


@pytest.mark.parametrize("context,side", CONTEXT_VARIANTS)
def test_the_context_changes_the_output(context, side):
    model, batch = subject(context, side)
    base = rnn().eval()
    base.load_state_dict((model.model if context == "shared" else model).state_dict(), strict=False)
    has_context = torch.tensor([True, False, True, False])  # rows 1 and 3: first sentences
    real = batch["tgt_out"].ne(PAD_ID)
    differs = (model(batch) - base(batch)).abs().amax(-1).masked_fill(~real, 0).amax(-1) > 1e-4  # (B,)
    assert differs.tolist() == has_context.tolist()


# ---------------------------------------------------------------- attention and Eq. 3
def test_dot_attention_ignores_padding_and_gives_zero_over_an_empty_memory():
    g = torch.Generator().manual_seed(0)
    h, states = torch.randn(3, 4, D, generator=g), torch.randn(3, 5, D, generator=g)
    memory = Memory(states, torch.tensor([[False] * 5, [False, False, True, True, True], [True] * 5]))
    c = dot_attention(h, memory)
    assert torch.allclose(c, hand_attention(h, memory), atol=1e-6)
    assert torch.equal(c[2], torch.zeros(4, D))  # c^0 = 0


def test_mix_sums_the_source_and_target_context_vectors():
    model = rnn("shared", "mix")
    batch = doc_batch()
    carry = previous_carry(model, batch)
    state = model.encode({**batch, CARRY_KEY: carry})
    h, _ = model.run_decoder(batch["tgt_in"], state.initial)  # (B, T, H)
    c = hand_attention(h, Memory(state.memory, state.memory_pad))
    c_context = hand_attention(h, carry["source"]) + hand_attention(h, carry["target"])  # trap 15
    w = model.attn_hidden
    expected = w.base(torch.cat([h, c], -1)) + w.context(c_context)  # Eq. 3, H x 3H
    assert torch.allclose(model.decode_hidden(batch["tgt_in"], state), expected, atol=1e-5)
    assert hand_attention(h, carry["target"]).abs().sum() > 0  # both terms count


def test_the_decoder_starts_from_each_encoder_layers_final_states():
    """Reading Y10: decoder layer l starts from encoder layer l's final [forward; backward] state;
    on the top layer, the forward state at the last real position and the backward one at the first."""
    model, batch = rnn(), doc_batch()
    state = model.encode(batch)
    last = batch["src"].ne(PAD_ID).sum(1) - 1  # (B,)
    top, half = state.initial.hidden[:, -1], D // 2  # (B, H)
    assert state.initial.hidden.shape == state.initial.cell.shape == (4, 2, D)
    assert torch.allclose(top[:, :half], state.memory[torch.arange(4), last, :half], atol=1e-6)
    assert torch.allclose(top[:, half:], state.memory[:, 0, half:], atol=1e-6)


def test_attn_hidden_tanh_applies_tanh_to_eq_3():
    linear, batch = rnn("separated", "source"), doc_batch()
    with_tanh = rnn("separated", "source", attn_hidden_tanh=True)
    with_tanh.load_state_dict(linear.state_dict())
    tgt_in = batch["tgt_in"]
    assert torch.allclose(with_tanh.decode_hidden(tgt_in, with_tanh.encode(batch)),
                          torch.tanh(linear.decode_hidden(tgt_in, linear.encode(batch))), atol=1e-6)


# ---------------------------------------------------------------- initialisation from the baseline
@pytest.mark.parametrize("context,side", CONTEXT_VARIANTS)
def test_a_baseline_checkpoint_loads_with_only_the_new_context_parameters_missing(context, side):
    baseline, model = rnn(seed=1), rnn(context, side)
    missing, unexpected = model.load_state_dict(baseline.state_dict(), strict=False)
    assert unexpected == []
    check_only_new_parameters_missing(missing, SIDES[side] if context == "separated" else set())
    for name, tensor in baseline.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name


@pytest.mark.parametrize("context,side", CONTEXT_VARIANTS)
def test_first_sentences_get_no_context_and_translate_as_the_baseline(context, side):
    """c^0 = 0: a first sentence (empty previous sentence, or the initial carry) gives the logits
    of the baseline whose weights it was initialised from."""
    baseline, model = rnn(seed=1), rnn(context, side)
    model.load_state_dict(baseline.state_dict(), strict=False)
    batch = doc_batch()
    first = {**batch, "ctx_src": torch.full((4, 1), EOS_ID), "ctx_tgt": torch.full((4, 1), EOS_ID)}
    if context == "shared":
        first[CARRY_KEY] = model.initial_carry(batch)
    assert torch.allclose(model(first), baseline(batch), atol=1e-6)


# ---------------------------------------------------------------- carried states (shared models)
def test_memory_last_keeps_the_last_real_positions_left_aligned():
    states = torch.arange(1.0, 7.0)[None, :, None].repeat(3, 1, 2)  # (3, 6, 2): position p holds p + 1
    pad = torch.tensor([[False] * 5 + [True], [False, False] + [True] * 4, [True] * 6])
    kept = Memory(states, pad).last(3)
    assert kept.states[:, :, 0].tolist() == [[3.0, 4.0, 5.0], [1.0, 2.0, 0.0], [0.0, 0.0, 0.0]]
    assert kept.pad.tolist() == [[False] * 3, [False, False, True], [True] * 3]
    assert Memory(states, pad).last(8).states.shape == (3, 8, 2)  # longer than the batch: padded


@pytest.mark.parametrize("context,side", SHARED)
def test_the_carry_is_the_encoder_and_decoder_top_states_of_this_sentence(context, side):
    """Source: the encoder's states s; target: the decoder's top LSTM states h (reading Y4: not h~),
    computed here by running the decoder LSTM alone; both padded to K positions."""
    model, batch = rnn(context, side), doc_batch()
    batch = {**batch, CARRY_KEY: previous_carry(model, batch)}
    carry = model.loss_terms(batch, output_loss(model)).carry
    assert set(carry) == ({"source", "target"} if side == "mix" else {side})
    state = model.encode(batch)
    expected = {"source": (state.memory, batch["src"].eq(PAD_ID))}
    top, _ = model.decoder(model.tgt_embed(batch["tgt_in"]), state.initial.for_lstm())  # (B, T, H)
    expected["target"] = (top, batch["tgt_in"].eq(PAD_ID))
    for name, memory in carry.items():
        states, pad = expected[name]
        assert memory.states.shape == (4, CARRY_TOKENS + 1, D) and memory.pad.shape == (4, CARRY_TOKENS + 1)
        length = states.size(1)
        assert torch.equal(memory.pad[:, :length], pad) and memory.pad[:, length:].all()
        assert torch.allclose(memory.states[:, :length][~pad], states[~pad], atol=1e-6)
        assert torch.all(memory.states[memory.pad] == 0)
    if "target" in carry:
        h_tilde = model.decode_hidden(batch["tgt_in"], state)
        assert not torch.allclose(carry["target"].states[:, :h_tilde.size(1)], h_tilde, atol=1e-3)


def test_a_sentence_longer_than_the_carry_hands_on_its_last_states():
    model, batch = rnn("shared", "target", carry_tokens=2), doc_batch()
    batch[CARRY_KEY] = model.initial_carry(batch)
    carry = model.loss_terms(batch, output_loss(model)).carry
    h, _ = model.run_decoder(batch["tgt_in"], model.encode(batch).initial)
    assert torch.allclose(carry["target"].states[1], h[1, 4:7], atol=1e-6)  # 7 steps (<bos> + 6): the last 3


def test_changing_one_rows_carry_changes_only_that_rows_output():
    model, batch = rnn("shared", "mix"), doc_batch()
    carry = previous_carry(model, batch)
    reference = model({**batch, CARRY_KEY: carry})
    changed = map_tensors(Tensor.clone, carry)
    for memory in changed.values():
        memory.states[0] = torch.randn_like(memory.states[0]).masked_fill(memory.pad[0][:, None], 0.0)
    logits = model({**batch, CARRY_KEY: changed})
    assert not torch.allclose(logits[0], reference[0], atol=1e-4)
    assert torch.equal(logits[1:], reference[1:])


def test_each_document_receives_its_own_previous_sentence_across_batches():
    """Documents 10, 11, 12 at position 0; then 12 and 10 at position 1 (11 ended, rows moved) and
    13, a new document: each reads what its own previous sentence handed on, 13 the empty memory."""
    model = rnn("shared", "mix")
    carried, loss = CarriedState(), output_loss(model)

    def step(batch: dict[str, Tensor], docs: list[int], positions: list[int]):
        batch = {**batch, "doc_index": torch.tensor(docs), "pos_in_doc": torch.tensor(positions)}
        batch[CARRY_KEY] = carried.rows(batch, model.initial_carry(batch))
        terms = model.loss_terms(batch, loss)
        carried.keep(batch, terms.carry)
        return batch, terms.carry

    first = {k: v[:3] for k, v in doc_batch(seed=1).items()}
    _, handed_on = step(first, [10, 11, 12], [0, 0, 0])
    second, _ = step({k: v[:3] for k, v in doc_batch(seed=2).items()}, [12, 10, 13], [1, 1, 0])
    for side in ("source", "target"):
        received, sent = second[CARRY_KEY][side], handed_on[side]
        assert torch.equal(received.states[:2], sent.states[[2, 0]])
        assert torch.equal(received.pad[:2], sent.pad[[2, 0]])
        assert received.pad[2].all() and not received.states.requires_grad


# ---------------------------------------------------------------- configuration
def test_the_preset_ties_the_model_side_to_the_batches_and_the_carry_to_max_len():
    cfg = compose(None, ["model.arch=yk_rnn", "model.context=shared", "context.side=mix"], profile="tiny")
    assert (cfg.model.context_side, cfg.model.carry_tokens) == ("mix", cfg.data.max_len)
    assert (cfg.data.document_order, cfg.vocab.joint, cfg.model.share_embeddings) == (True, False, False)
    module = DocMTModule(OmegaConf.to_container(cfg, resolve=True), 30, 40)
    assert type(module.model) is SharedContextRNN and type(module.model).carries_state
    assert type(copy.deepcopy(module.model)) is SharedContextRNN
    baseline = DocMTModule.build_model(compose(None, ["model.arch=yk_rnn"], profile="tiny").model, 30, 40)
    assert type(baseline) is YKRNNSeq2Seq and not type(baseline).carries_state
    names = YKRNNSeq2Seq.parameter_names(model_config(cfg.model))  # on the meta device
    assert "attn_hidden.context.weight" in names and not any(n.startswith("context_encoders") for n in names)


@pytest.mark.parametrize("overrides,key", [({"dec_layers": 1}, "model.dec_layers"),
                                           ({"context": "both"}, "model.context"),
                                           ({"context_side": "left"}, "model.context_side"),
                                           ({"d_model": 15}, "model.d_model"),
                                           ({"tie_output": True, "embed_dim": 8}, "model.tie_output")])
def test_settings_the_model_cannot_be_built_with_name_their_key(overrides, key):
    with pytest.raises(DocMTInputError, match=f"key '{key}'"):
        rnn(**overrides)


def test_a_separated_model_without_its_context_tokens_names_the_setting():
    batch = {k: v for k, v in doc_batch().items() if k != "ctx_tgt"}
    with pytest.raises(DocMTInputError, match="key 'context.prev_sentences'.*context.side=target"):
        rnn("separated", "target")(batch)


# ---------------------------------------------------------------- tiny fits
TINY_FIT = ["model.arch=yk_rnn", "train.max_steps=6", "train.val_every_steps=3", "eval.valid_bleu=true",
            "eval.valid_beam=2"]


@pytest.fixture(scope="module")
def baseline_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("baseline")
    with single_process_run_env():
        fit_stage(tiny_config(root, *TINY_FIT), "main", root / "run")
    return root / "run" / "checkpoints" / "last.ckpt"


@pytest.mark.fit
@pytest.mark.parametrize("variant,encoder_sides", [
    (["model.context=shared", "context.side=mix"], set()),
    (["model.context=separated", "context.side=target", "context.prev_sentences=1"], {"target"})])
def test_a_context_model_starts_from_the_baseline_trains_and_decodes_in_document_order(
        tmp_path, baseline_checkpoint, variant, encoder_sides):
    """Reading Y7 through `init_from`: only the new parameters are missing from the baseline."""
    cfg = tiny_config(tmp_path, *TINY_FIT, *variant)
    sizes = read_checkpoint(baseline_checkpoint)["hyper_parameters"]
    module = DocMTModule(OmegaConf.to_container(cfg, resolve=True), sizes["src_vocab_size"], sizes["tgt_vocab_size"])
    missing = load_weights(module, baseline_checkpoint, init_from="train.stages.main.init_from")
    check_only_new_parameters_missing(missing, encoder_sides, prefix="model.")
    with single_process_run_env():
        fit = fit_stage(cfg, "main", tmp_path / "run", init_from=baseline_checkpoint)
    metrics = fit.trainer.callback_metrics
    assert torch.isfinite(metrics["val/loss"]) and "val/bleu" in metrics
    baseline = read_checkpoint(baseline_checkpoint)["state_dict"]
    trained = {f"model.{k}": v for k, v in fit.module.model.state_dict().items()}
    shared = [k for k in baseline if k in trained]
    assert shared and any(not torch.equal(baseline[k], trained[k]) for k in shared)  # the baseline's tensors trained on
    if fit.module._train_carry is not None:
        handed_on = fit.module._train_carry.state_dict()["value"]  # plain dicts, as checkpoints hold
        assert {side: m["states"].shape[1:] for side, m in handed_on.items()} == {
            side: (cfg.data.max_len + 1, cfg.model.d_model) for side in ("source", "target")}


# ---------------------------------------------------------------- decoding from the model's own output
@pytest.mark.parametrize("side", ["target", "mix"])
def test_the_target_carry_after_decoding_is_that_of_the_emitted_hypothesis(side):
    """Trap 14: the next sentence reads the decoder states of what was output. Two hypotheses that
    differ in one token hand on different states, each equal to the teacher-forced states of its own
    tokens, and neither is the reference's."""
    model, batch = rnn("shared", side), doc_batch()
    batch = {**batch, CARRY_KEY: model.initial_carry(batch)}
    reference = model.loss_terms(batch, output_loss(model)).carry["target"]
    first = [[7, 8, 9], [5], [6, 6], [10, 11]]
    second = [[7, 8, 12], [5], [6, 6], [10, 11]]  # row 0's last token differs
    carries = [model.output_carry(batch, hyps)["target"] for hyps in (first, second)]
    for hyps, carry in zip((first, second), carries):
        forced = {**batch, "tgt_in": padded([[2, *h] for h in hyps]), "tgt_out": padded([[*h, EOS_ID] for h in hyps])}
        expected = model.loss_terms(forced, output_loss(model)).carry["target"]
        assert torch.equal(carry.pad, expected.pad) and torch.allclose(carry.states, expected.states, atol=1e-6)
    assert not torch.allclose(carries[0].states[0], carries[1].states[0])
    assert torch.allclose(carries[0].states[1:], carries[1].states[1:], atol=1e-6)
    assert not torch.allclose(carries[0].states, reference.states[:, : carries[0].states.size(1)])
    source_only = rnn("shared", "source")
    batch = {**batch, CARRY_KEY: source_only.initial_carry(batch)}
    taught = source_only.loss_terms(batch, output_loss(source_only)).carry["source"]
    assert torch.allclose(source_only.output_carry(batch, first)["source"].states, taught.states)  # the encoder's


def test_the_evaluation_loop_hands_on_the_hypothesis_states(monkeypatch):
    """An evaluation loop (`EvaluationLoop.step`) keeps, for the next batch, `output_carry` of the
    beam's 1-best, not the teacher-forced carry of the reference (its `DocumentOrderWalk`)."""
    cfg = tiny_config(Path("/nonexistent"), "model.arch=yk_rnn", "model.context=shared", "context.side=target",
                      "data.document_order=true", "model.dropout=0.0")
    module = DocMTModule(OmegaConf.to_container(cfg, resolve=True), VOCAB, VOCAB).eval()
    module._trainer = SimpleNamespace(datamodule=SimpleNamespace(  # no split is read: no target context
        tgt_vocab=SimpleNamespace(decode=str), split=lambda name: None, window=None))
    hypotheses = [[7, 8], [5], [6], [9, 9, 9]]
    monkeypatch.setattr(decoding, "best_tokens", lambda *args: hypotheses)  # what a beam search emitted
    batch = {**doc_batch(), "doc_index": torch.arange(4), "pos_in_doc": torch.zeros(4, dtype=torch.long),
             "sent_index": torch.arange(4)}
    module._reset_eval("test")
    with torch.no_grad():
        module._eval.step(batch, 2, module.output_loss)
        seen = {**batch, CARRY_KEY: module.model.initial_carry(batch)}  # first sentences
        expected = module.model.output_carry(seen, hypotheses)["target"]
        reference = module.model.loss_terms(seen, output_loss(module.model)).carry["target"]
    kept = module._eval.walk.carried._value["target"]
    assert torch.allclose(kept.states, expected.states, atol=1e-6)
    assert not torch.allclose(kept.states, reference.states[:, : kept.states.size(1)], atol=1e-3)


def shared_loaded_model(tmp_path: Path, side: str, *overrides: str, seed: int):
    """A random shared-context model (`side`) loaded as `docmt translate` and `docmt contrastive`
    load one, and its words."""
    from lightning_docmt.data.vocab import WordVocab
    from lightning_docmt.inference.loaded_model import LoadedModel

    words = [f"w{i}" for i in range(VOCAB - 5)]  # 5 specials: ids 0..VOCAB-1 in all
    cfg = tiny_config(tmp_path, "model.arch=yk_rnn", "model.context=shared", f"context.side={side}",
                      "data.document_order=true", "model.d_model=16", *overrides)
    torch.manual_seed(seed)
    return LoadedModel(build_model(cfg.model, VOCAB, VOCAB).eval(), cfg, WordVocab(words), WordVocab(words)), words


def test_translation_walks_each_document_in_order_and_batching_documents_is_invisible(tmp_path, monkeypatch):
    """`docmt translate` of a shared-mix model: each document in order, sentence j reading the
    states of the model's own sentence j - 1; translating documents side by side gives each one's
    translation alone, and a document's first sentence is translated as with no context."""
    from lightning_docmt.data.types import Document
    from lightning_docmt.inference.translate import translate_documents

    model, words = shared_loaded_model(tmp_path, "mix", "decode.max_len_b=4", seed=3)
    network = model.model
    g = torch.Generator().manual_seed(0)
    documents = [Document(f"d{d}", [" ".join(words[i] for i in torch.randint(0, len(words), (n,), generator=g).tolist())
                                    for n in lengths], [""] * len(lengths))
                 for d, lengths in enumerate([[3, 5, 2], [4], [2, 6, 3, 1]])]
    together = translate_documents(model, documents, beam=2, len_penalty=0.6)
    assert [len(t) for t in together] == [3, 1, 4]
    for document, translation in zip(documents, together):
        assert translate_documents(model, [document], beam=2, len_penalty=0.6) == [translation]
    seen = []  # (batch, outputs) of every decoded batch, in order
    decode = decoding.best_tokens
    monkeypatch.setattr(decoding, "best_tokens",
                        lambda net, batch, *args: seen.append((batch, decode(net, batch, *args))) or seen[-1][1])
    assert translate_documents(model, documents, beam=2, len_penalty=0.6) == together
    by_sentence = {}  # sent_index -> (the carry it read, the carry its output hands on)
    for batch, outputs in seen:
        handed_on = network.output_carry(batch, outputs)
        for row, sent in enumerate(batch["sent_index"].tolist()):
            by_sentence[sent] = (select_rows(batch[CARRY_KEY], torch.tensor([row])),
                                 select_rows(handed_on, torch.tensor([row])))
    starts = [0, 3, 4]  # sent_index of each document's first sentence
    for sent, (read, _) in by_sentence.items():
        expected = network.initial_carry({"src": torch.zeros(1, 1, dtype=torch.long)}) if sent in starts \
            else by_sentence[sent - 1][1]  # what the model's own previous translation handed on
        for side in ("source", "target"):
            assert torch.equal(read[side].pad, expected[side].pad), (sent, side)
            assert torch.allclose(read[side].states, expected[side].states, atol=1e-6), (sent, side)


@pytest.mark.parametrize("side", ["source", "target", "mix"])
def test_contrastive_scoring_walks_each_candidate_document_in_order(tmp_path, side):
    """A shared model scores a candidate after its context sentences hand their state on (the
    target side teacher-forced on `tgt_context`): the previous target sentence changes the scores
    of a model that reads target states and not of a source-only one (the previous source sentence
    changes both: the decoder states attend to it); with no context it scores as a first sentence;
    examples scored together score as each alone (no state crosses documents); the sentence before
    the previous one is not read (the carried states are LSTM states, which attend to no context:
    no input feeding, reading Y3; the contrastive reading is Y16)."""
    from lightning_docmt.evaluation.contrastive_scoring import score_suite

    model, w = shared_loaded_model(tmp_path, side, seed=5)

    def example(i: int, src_context: list[str], tgt_context: list[str]) -> dict:
        return {"id": f"e{i}", "src": f"{w[1]} {w[2]} {w[3]}", "src_context": src_context,
                "tgt_context": tgt_context, "candidates": [f"{w[4]} {w[5]}", f"{w[6]}"], "label": 0}

    context = ([f"{w[7]} {w[8]}"], [f"{w[9]} {w[10]} {w[11]}"])
    examples = [example(0, *context),
                example(1, [f"{w[12]}"], context[1]),  # another source context
                example(2, context[0], [f"{w[13]} {w[14]}"]),  # another target context
                example(3, [], []),
                example(4, [f"{w[15]}", *context[0]], [f"{w[16]}", *context[1]])]  # one more before
    together = score_suite(model, examples)

    def same(a: list[float], b: list[float]) -> bool:  # up to float rounding of other padded widths
        return a == pytest.approx(b, abs=1e-5)

    assert all(same(t, score_suite(model, [e])[0]) for t, e in zip(together, examples))
    first_sentence = score_suite(model, [{**examples[3], "id": "alone"}])[0]
    assert same(together[3], first_sentence) and not same(together[0], first_sentence)
    source_changes, target_changes = not same(together[1], together[0]), not same(together[2], together[0])
    assert (source_changes, target_changes) == (True, side != "source")
    assert same(together[4], together[0])


@pytest.mark.fit
def test_a_shared_models_context_usage_is_scored_by_its_document_order_test_loop(tmp_path, monkeypatch):
    """CXMI of a carrying model: the test loop's NLL with no carried state and with another
    document's, against its NLL with its own (`evaluation/carried_context.py`); its random-context
    BLEU decodes every batch again with another document's state, which the real pass never sees."""
    from lightning_docmt.evaluation.carried_context import CarriedContextUsage
    from lightning_docmt.training.run import test_checkpoint
    from tests.helpers.cli_run import docmt, run_dir_of

    config = tmp_path / "shared.yaml"
    config.write_text(f"data:\n  corpus: synthetic:tiny\n  cache_dir: {tmp_path / 'cache'}\n  document_order: true\n"
                      f"logging:\n  runs_dir: {tmp_path / 'runs'}\n"
                      "model:\n  arch: yk_rnn\n  context: shared\n  d_model: 16\ncontext:\n  side: mix\n"
                      "eval:\n  context_usage: true\ntrain:\n  max_steps: 4\n  val_every_steps: 4\n")
    positions, decoded = [], []
    nll_sums, add_controls = CarriedContextUsage.nll_sums, CarriedContextUsage.add_control_hypotheses
    monkeypatch.setattr(CarriedContextUsage, "nll_sums", lambda self, model, batch, loss: (
        positions.append(batch["pos_in_doc"].tolist()) or nll_sums(self, model, batch, loss)))
    monkeypatch.setattr(CarriedContextUsage, "add_control_hypotheses", lambda self, model, batch, tr: (
        decoded.append(batch["sent_index"].tolist()) or add_controls(self, model, batch, tr)))
    monkeypatch.chdir(tmp_path)
    with single_process_run_env():
        run = run_dir_of(docmt("fit", config, "--profile", "tiny"))
        metrics = json.loads((run / "metrics.json").read_text())
        cfg = OmegaConf.load(run / "config.yaml")
        cfg.eval.context_usage = False
        checkpoint = Path(json.loads((run / "run.json").read_text())["checkpoint"])
        without_control = test_checkpoint(cfg, checkpoint, tmp_path / "plain")
    assert metrics["cxmi"] != 0.0 and metrics["random_ctx/cxmi"] != 0.0  # the carried state matters
    assert positions and any(p > 0 for batch in positions for p in batch)  # documents in order
    sentences = sum(decoded, [])
    assert sentences and sorted(sentences) == list(range(len(sentences)))  # each once, with the control
    assert metrics["random_ctx/bleu_delta"] == pytest.approx(  # logged as float32
        metrics["random_ctx/bleu"] - metrics["test/bleu"], abs=1e-5)
    assert abs(metrics["random_ctx/bleu_floor"]) < 1.0  # the real state again: rounding at most
    assert without_control["test/bleu"] == metrics["test/bleu"]  # the control changed no real output
    assert "random_ctx/bleu" not in without_control
    assert 0.0 < metrics["random_ctx/other_collection"] <= 1.0  # synthetic documents: each its own


def test_the_random_context_control_of_a_carried_state_reads_another_collections_state():
    """Documents 0 and 1 are one collection (two chapters of one book), 2 and 3 another: each row
    reads the nearest later row of the other collection; a batch of one collection falls back to
    the next row (and says so); a batch of one row gets the initial state."""
    from lightning_docmt.evaluation.carried_context import other_documents

    initial = {"h": torch.zeros(1, 2)}
    model = SimpleNamespace(initial_carry=lambda batch: initial)
    carried = {"h": torch.arange(8.0).reshape(4, 2)}
    groups = torch.tensor([0, 0, 1, 1])
    batch = {"src": torch.ones(4, 3), "doc_index": torch.tensor([0, 1, 2, 3]), CARRY_KEY: carried}
    other, other_collection = other_documents(model, batch, groups)
    assert torch.equal(other["h"], carried["h"][[2, 2, 0, 0]]) and other_collection.all()
    one_book = {"src": torch.ones(2, 3), "doc_index": torch.tensor([2, 3]), CARRY_KEY: {"h": carried["h"][2:]}}
    other, other_collection = other_documents(model, one_book, groups)
    assert torch.equal(other["h"], carried["h"][[3, 2]]) and not other_collection.any()
    alone = {"src": torch.ones(1, 3), "doc_index": torch.tensor([1]), CARRY_KEY: {"h": torch.ones(1, 2)}}
    assert other_documents(model, alone, groups)[0] is initial  # no other document in the batch: no context


def test_the_carried_controls_decode_another_documents_state_and_the_own_state_in_reversed_rows():
    """`add_control_hypotheses`: the random control reads the other collection's state in the
    batch's own row order; the floor's decode gets every row with its own state, in reverse row
    order, and each hypothesis goes back to its own sentence."""
    from lightning_docmt.evaluation.carried_context import CarriedContextUsage

    model = SimpleNamespace(initial_carry=lambda batch: {"h": torch.zeros(1, 1)})
    batch = {"src": torch.tensor([[10], [11], [12]]), "sent_index": torch.tensor([7, 8, 9]),
             "doc_index": torch.tensor([0, 1, 2]), CARRY_KEY: {"h": torch.tensor([[0.0], [1.0], [2.0]])}}
    seen = []

    def translate(rows: dict) -> list[str]:  # "<source token>:<state>" per row
        seen.append(rows["src"][:, 0].tolist())
        return [f"{int(s)}:{int(h)}" for s, h in zip(rows["src"][:, 0], rows[CARRY_KEY]["h"][:, 0])]

    usage = CarriedContextUsage(torch.tensor([0, 1, 1]))
    usage.add_control_hypotheses(model, batch, translate)
    assert seen == [[10, 11, 12], [12, 11, 10]]
    assert usage.random_records == [(7, 0, "10:1"), (8, 1, "11:0"), (9, 2, "12:0")]
    assert usage.again_records == [(7, 0, "10:0"), (8, 1, "11:1"), (9, 2, "12:2")]


@pytest.mark.fit
def test_a_shared_models_checkpoint_loads_safely_and_resumes_its_carried_state(tmp_path):
    """The carried state travels in checkpoints as plain containers (the safe loader refuses any
    class), and a resumed fit hands the model its own structure again."""
    from lightning_docmt.checkpoints import read_checkpoint
    from lightning_docmt.training.module import CARRY_STATE_KEY

    cfg = tiny_config(tmp_path, *TINY_FIT, "model.context=shared", "context.side=mix", "train.max_steps=3")
    with single_process_run_env():
        fit = fit_stage(cfg, "main", tmp_path / "run")
    checkpoint = read_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")  # no refusal
    [saved] = checkpoint[CARRY_STATE_KEY]
    assert set(saved["value"]) == {"source", "target"} and set(saved["value"]["target"]) == {"states", "pad"}
    module = fit.module
    module._train_carry.load_state_dict(saved)
    rows = len(saved["docs"])
    batch = {"src": torch.ones(rows, 2, dtype=torch.long), "doc_index": saved["docs"],
             "pos_in_doc": saved["positions"] + 1}
    carried = module._train_carry.rows(batch, module.model.initial_carry(batch))
    assert isinstance(carried["target"], Memory)
    assert torch.equal(carried["target"].states, saved["value"]["target"]["states"])
