"""Li & Feng 2019, co-attention for document NMT (docs/papers/lifeng2019.md sections 2-3).

The sentence Transformer (`models/transformer.py`) whose encoder output is enriched once, on top of
the encoder, before an unchanged decoder reads it:

    H^cur = Encoder(x)                                   the current sentence (B, S, D)
    H^doc = [Encoder(x_{k-N}); ...; Encoder(x_{k-1})]    Eq. 15: each previous sentence alone (B, L, D)
    C     = Attention_hard(H^doc, H^cur)                 Eqs. 19-24: the tokens with z_l = 1
    d_i   = FFN(MultiHead(f_q(h^cur_i), C, C))           Eqs. 25-26
    h~_i  = lambda_i h^cur_i + (1 - lambda_i) d_i,  lambda_i = sigmoid(W_h' h^cur_i + W_d d_i)   Eqs. 27-28

Parameter groups (section 3): theta_r = the hard selector (`selector.*`, `nn/hard_selection.py`);
theta_s = everything else: the Transformer under its own names (so a sentence Transformer
checkpoint, the pre-training of Eq. 32, loads with only the new modules missing) and the
co-attention (`coattn.*`: f_q, the soft attention, its FFN, the gate).

Cross-training (section 3, step 3) is two optimizer phases (`nn/model_hooks.py`), theta_s first
(reading L9), each frozen while the other trains:
- `theta_s`: z from the width-2 beam of the current selector (reading L1), cross entropy (Eq. 31);
  gradients reach the shared encoder through H^cur and H^doc.
- `theta_r`: `rl.samples` Monte-Carlo draws of z per sentence, reward = the reference's probability
  under theta_s (Eq. 29, `rl.reward`, `nn/reinforce.py`), REINFORCE (Eq. 30).
Evaluation and decoding select with the same width-2 beam (reading L10).

Readings (docs/papers/lifeng2019.md section 7):
- L4: a sentence with nothing selected (or no previous sentence) gets h~ = h^cur (lambda = 1).
- L5: lambda is element-wise, W_h' and W_d are D x D without bias (`nn/gating.ContextGate`).
- L6: no residual, LayerNorm or dropout around FFN(MultiHead(...)); f_q is a linear map with bias,
  before MultiHead's own query projection; the FFN has `ffn_dim` inner units.
- L7: each previous sentence is encoded alone, as a source sentence (its tokens + `<eos>`,
  positions from 0), concatenated oldest first (`nn/context_sentences.py`).
- NOT IN PAPER, L16: in the theta_r phase the encodings the selector reads and the reward are
  computed without dropout (R is the model's probability of the reference, Eq. 29, which dropout
  would make a random variable), and without gradient (theta_s is frozen there).
- NOT IN PAPER, L18: `rl.lr_scale` sets the theta_r phase's lr apart from the stage's.
- NOT IN PAPER, L19: `rl.selection_cost` (default 0, the paper's objective) charges each kept token
  in the reward: log R' = log P(y | z) - cost * |z|.
- NOT IN PAPER, L20: `rl.entropy_weight` (default 0) adds an entropy bonus to the theta_r loss, which
  keeps the policy exploring.
- NOT IN PAPER, L21: `context_norm` (default False) puts a LayerNorm on d before the gate, so that the
  context vector's size cannot saturate lambda at 1 (a shut gate, which then gets no gradient).
- NOT IN PAPER, L22: `selection: all` keeps every context token: the co-attention without its hard
  attention (an ablation). It has no selector, hence no optimizer phases: one optimizer trains
  everything on the cross entropy.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple

import torch
from torch import Tensor, nn

from lightning_docmt.batch import PAD_ID
from lightning_docmt.config.registry import register_arch
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.models.transformer import TransformerConfig, TransformerSeq2Seq
from lightning_docmt.nn.attention import MultiHeadAttention, key_mask
from lightning_docmt.nn.context_sentences import pack_left, split_sentences
from lightning_docmt.nn.gating import ContextGate, gate_stats
from lightning_docmt.nn.hard_selection import HardSelector, Selection
from lightning_docmt.nn.layers import FeedForward, LayerInputs
from lightning_docmt.nn.model_hooks import LossTerms, OptimizerPhase, OutputLoss
from lightning_docmt.nn.reinforce import REWARDS, advantages, policy_loss
from lightning_docmt.nn.residual import LAYER_NORM_EPS
from lightning_docmt.nn.scoring import target_log_probs
from lightning_docmt.nn.seq2seq import EncoderState

TRANSLATOR_PHASE = "theta_s"
SELECTOR_PHASE = "theta_r"
THETA_S_GLOBS = ("src_embed.*", "tgt_embed.*", "encoder.*", "decoder.*", "output.*", "coattn.*")
"""fnmatch globs of theta_s: the Transformer and the co-attention (soft attention, FFN, gate)."""
THETA_R_GLOBS = ("selector.*",)
"""fnmatch globs of theta_r: the hard selector (Eqs. 20-24)."""
SELECTIONS = ("selector", "all")
"""`model.selection`: the hard selector's z, or every context token kept (reading L22)."""


@dataclass
class CrossTrainingConfig:
    """Phase lengths of the alternation, in updates (reading L9; the paper gives none)."""

    translator_steps: int = 100  # theta_s, cross entropy with the beam's z
    selector_steps: int = 100  # theta_r, REINFORCE


@dataclass
class ReinforceConfig:
    """The theta_r objective (Eqs. 29-30, reading L2)."""

    reward: str = "seq_prob"  # seq_prob (Eq. 29) | log_prob | avg_token_log_prob (deviations)
    samples: int = 4  # Monte-Carlo draws of z per sentence (not in the paper)
    lr_scale: float = 1.0  # the theta_r phase's lr over the stage's (reading L18)
    selection_cost: float = 0.0  # nats of reward per kept context token (reading L19; 0: the paper's)
    entropy_weight: float = 0.0  # weight of the policy's entropy bonus (reading L20; 0: the paper's)


@dataclass
class LiFengConfig(TransformerConfig):
    """The Transformer's options plus the selector beam, the cross-training phases and REINFORCE."""

    arch: str = "lifeng_coattn"
    selector_beam: int = 2  # the width of the beam over z (theta_s training and inference, L1, L10)
    cross_training: CrossTrainingConfig = field(default_factory=CrossTrainingConfig)
    rl: ReinforceConfig = field(default_factory=ReinforceConfig)
    context_norm: bool = False  # LayerNorm on d before the gate (reading L21; False: the paper's)
    selection: str = "selector"  # selector: the hard selector's z (the paper's) | all: every token (L22)


class CoAttention(nn.Module):
    """Eqs. 25-28: soft attention from the current sentence to the selected context tokens, then the gate."""

    def __init__(self, cfg: LiFengConfig):
        super().__init__()
        self.query = nn.Linear(cfg.d_model, cfg.d_model)  # Eq. 25: f_q (reading L6)
        nn.init.xavier_uniform_(self.query.weight)
        nn.init.zeros_(self.query.bias)
        self.attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attn_dropout)  # Eq. 26
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.relu_dropout)  # Eq. 26
        self.gate = ContextGate(cfg.d_model)  # Eqs. 27-28: W_h', W_d (reading L5)
        # NOT IN PAPER, reading L21: d normalised before the gate, so its size cannot shut the gate
        self.context_norm = nn.LayerNorm(cfg.d_model, eps=LAYER_NORM_EPS) if cfg.context_norm else nn.Identity()

    def attend(self, current: Tensor, context: Tensor, selected: Tensor) -> tuple[Tensor, Tensor]:
        """H^mix (N, S, D) from H^cur (N, S, D), H^doc (N, L, D) and the selection (N, L) bool, with
        the gate lambda (N, S, D) that mixed it (1 in rows with nothing selected)."""
        empty = ~selected.any(1)[:, None, None]  # (N, 1, 1): nothing to attend to (reading L4)
        mask = key_mask(~(selected | empty[:, 0]))  # (N, 1, 1, L); an empty row attends anywhere, discarded below
        d = self.context_norm(self.ffn(self.attn(self.query(current), context, mask)))  # Eqs. 25-26 (L21): (N, S, D)
        mixed, gate = self.gate.mix(current, d)  # Eqs. 27-28
        return torch.where(empty, current, mixed), gate.masked_fill(empty, 1.0)  # reading L4

    def forward(self, current: Tensor, context: Tensor, selected: Tensor) -> Tensor:
        """H^mix (N, S, D) (`attend` without the gate)."""
        return self.attend(current, context, selected)[0]


class ContextView(NamedTuple):
    """The encodings the selector reads: H^cur (N, S, D) with its padding (N, S); H^doc (N, L, D),
    the previous sentences' token states end to end, with its padding (N, L) and token ids (N, L)."""

    current: Tensor
    current_pad: Tensor
    context: Tensor
    context_pad: Tensor
    context_tokens: Tensor


@contextmanager
def without_dropout(module: nn.Module) -> Iterator[None]:
    """`module` in eval mode inside the block, each submodule's own mode restored after it."""
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


@register_arch("lifeng_coattn", LiFengConfig)
class LiFengCoAttentionSeq2Seq(TransformerSeq2Seq):
    """`TransformerSeq2Seq` with the hard selector (`selector`) and the co-attention (`coattn`).

    `encode` returns a plain `EncoderState` whose memory is H^mix, so decoding, beam search and
    scoring are the Transformer's; the selection inside it is the deterministic beam (L10).
    """

    reads_context = True

    def __init__(self, cfg: LiFengConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__(cfg, src_vocab_size, tgt_vocab_size)
        if cfg.selector_beam < 1:
            raise DocMTInputError(f"must be at least 1, got {cfg.selector_beam}", key="model.selector_beam")
        if cfg.selection not in SELECTIONS:
            raise DocMTInputError(f"must be one of {', '.join(SELECTIONS)}, got {cfg.selection!r}",
                                  key="model.selection")
        if cfg.rl.reward not in REWARDS:
            raise DocMTInputError(f"must be one of {', '.join(REWARDS)}, got {cfg.rl.reward!r}", key="model.rl.reward")
        if cfg.rl.samples < 2:
            raise DocMTInputError(f"the per-sentence baseline (reading L2) needs at least 2 samples, got "
                                  f"{cfg.rl.samples}", key="model.rl.samples")
        self.selector = HardSelector(cfg.d_model) if cfg.selection == "selector" else None  # reading L22
        self.coattn = CoAttention(cfg)

    @classmethod
    def optimizer_phases(cls, cfg: LiFengConfig) -> list[OptimizerPhase]:
        """theta_s first, with the initial selector (reading L9), then theta_r, and so on; none with
        `selection: all`, which has no selector (L22). A shared table is registered once
        (`models/transformer.py`), so its second name matches nothing."""
        if cfg.selection == "all":
            return []
        shared = {"tgt_embed.*"} if cfg.share_embeddings else set()
        shared |= {"output.*"} if cfg.tie_output else set()
        theta_s = tuple(glob for glob in THETA_S_GLOBS if glob not in shared)
        return [OptimizerPhase(TRANSLATOR_PHASE, theta_s, cfg.cross_training.translator_steps),
                OptimizerPhase(SELECTOR_PHASE, THETA_R_GLOBS, cfg.cross_training.selector_steps, cfg.rl.lr_scale)]

    # ------------------------------------------------------------------ encoding
    def encode_tokens(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """The sentence encoder over source rows (N, S): states (N, S, D) and padding (N, S)."""
        pad = tokens.eq(PAD_ID)  # (N, S)
        return self.encoder(self.src_embed(tokens), LayerInputs(self_mask=key_mask(pad))), pad

    def context_view(self, batch: dict[str, Tensor]) -> ContextView:
        """H^cur and H^doc (Eq. 15, reading L7)."""
        if "ctx_src" not in batch or "ctx_src_seg" not in batch:
            raise DocMTInputError("the co-attention model reads the previous source sentences; set "
                                  "context.prev_sentences > 0 (the paper: 3)", key="context.prev_sentences")
        current, current_pad = self.encode_tokens(batch["src"])
        seg = batch["ctx_src_seg"]
        sentences = split_sentences(batch["ctx_src"], seg, max(int(seg.max()), 1))  # (B, K, M)
        rows, count, width = sentences.tokens.shape
        states, pad = self.encode_tokens(sentences.tokens.view(rows * count, width))  # (B*K, M, D)
        keep = (~pad).view(rows, count, width) & sentences.present[:, :, None]  # (B, K, M)
        context, context_pad = pack_left(states.view(rows, count * width, -1), keep.view(rows, -1))  # (B, L, D)
        tokens, _ = pack_left(sentences.tokens.view(rows, count * width, 1), keep.view(rows, -1))  # (B, L, 1)
        return ContextView(current, current_pad, context, context_pad, tokens.squeeze(-1))

    def select(self, view: ContextView) -> Selection:
        """The beam's z over H^doc (readings L1, L10); the selector gets no gradient from it. With
        `selection: all`, every real context token (reading L22), at log-probability and entropy 0."""
        if self.cfg.selection == "all":
            none = view.context.new_zeros(view.context.shape[0])  # (N,)
            return Selection((~view.context_pad).long(), none, none)
        inputs = self.selector.inputs(view.current, view.current_pad, view.context, view.context_pad)
        return self.selector.beam(inputs, self.cfg.selector_beam)

    def mixed_state(self, view: ContextView, z: Tensor) -> tuple[EncoderState, Tensor]:
        """The decoder's memory H^mix (Eqs. 25-28) given the selection z (N, L), and the gate (N, S, D)."""
        selected = z.bool() & ~view.context_pad
        memory, gate = self.coattn.attend(view.current, view.context, selected)
        return EncoderState(memory=memory, memory_pad=view.current_pad), gate

    def encode(self, batch: dict[str, Tensor]) -> EncoderState:
        view = self.context_view(batch)
        return self.mixed_state(view, self.select(view).z)[0]

    def kept_context_tokens(self, batch: dict[str, Tensor]) -> list[list[int]]:
        """Per row, the ids of the context tokens the beam's z keeps (`docmt translate --explain`)."""
        view = self.context_view(batch)
        z = self.select(view).z.bool() & ~view.context_pad  # (B, L)
        return [row[keep].tolist() for row, keep in zip(view.context_tokens, z)]

    # ------------------------------------------------------------------ training
    def loss_terms(self, batch: dict[str, Tensor], output_loss: OutputLoss, phase: str | None = None) -> LossTerms:
        """theta_r phase: REINFORCE (`reinforce_terms`); otherwise cross entropy with the beam's z (Eq. 31)."""
        if phase == SELECTOR_PHASE:
            return self.reinforce_terms(batch)
        view = self.context_view(batch)
        selection = self.select(view)
        state, gate = self.mixed_state(view, selection.z)
        hidden = self.decode_hidden(batch["tgt_in"], state)  # (B, T, D)
        loss_sum, nll_sum, tokens = output_loss(hidden, batch["tgt_out"])
        # the gate over the current sentences' real positions; nothing selected counts as lambda 1 (L4)
        stats = {**self.selection_stats(selection, view), **gate_stats([(gate, ~view.current_pad)])}
        return LossTerms(loss_sum, nll_sum, tokens, stats=stats)

    def reinforce_terms(self, batch: dict[str, Tensor]) -> LossTerms:
        """Eq. 30 with `rl.samples` draws per sentence and the per-sentence baseline (reading L2, L16)."""
        samples = self.cfg.rl.samples
        with torch.no_grad(), without_dropout(self):
            view = self.context_view(batch)
        inputs = self.selector.inputs(view.current, view.current_pad, view.context, view.context_pad)
        selection = self.selector.sample(inputs.repeat(samples))  # (B*S, L), S draws of a sentence adjacent
        repeated = ContextView(*(t.repeat_interleave(samples, 0) for t in view))
        with torch.no_grad(), without_dropout(self):
            state, _ = self.mixed_state(repeated, selection.z)
            target = batch["tgt_out"].repeat_interleave(samples, 0)  # (B*S, T)
            hidden = self.decode_hidden(batch["tgt_in"].repeat_interleave(samples, 0), state)
            log_prob_y = self.reference_log_probs(hidden, target).view(-1, samples)  # (B, S)
        lengths = batch["tgt_out"].ne(PAD_ID).sum(1, keepdim=True).expand(-1, samples)  # (B, S)
        kept = (selection.z.bool() & ~repeated.context_pad).sum(1).view(-1, samples)  # (B, S)
        log_reward = log_prob_y - self.cfg.rl.selection_cost * kept  # reading L19
        advantage = advantages(log_reward, lengths, self.cfg.rl.reward)  # (B, S)
        loss = policy_loss(selection.log_prob.view(-1, samples), advantage)
        loss = loss - self.cfg.rl.entropy_weight * selection.entropy.view(-1, samples).mean(1).sum()  # reading L20
        stats = self.selection_stats(selection, repeated)
        stats.update({"reward_mean": log_prob_y.mean(), "reward_var": log_prob_y.var(dim=1).mean()})
        tokens = lengths[:, 0].sum()
        return LossTerms(loss, -log_prob_y.mean(1).sum(), tokens, stats=stats)

    def reference_log_probs(self, hidden: Tensor, target: Tensor, rows: int = 64) -> Tensor:
        """(N,) log P(target | ...) from decoder states (N, T, D), `rows` at a time (the (rows, T, V)
        log-softmax is the largest tensor)."""
        return torch.cat([target_log_probs(self.output(h), y).sum(1)
                          for h, y in zip(hidden.split(rows), target.split(rows))])

    @staticmethod
    def selection_stats(selection: Selection, view: ContextView) -> dict[str, Tensor]:
        """The selector's behaviour in a batch: the share of context tokens kept and the mean
        per-token entropy of its distributions (over sentences that have context)."""
        real = (~view.context_pad).float()  # (N, L)
        tokens = real.sum().clamp(min=1)
        return {"selection_rate": (selection.z.float() * real).sum() / tokens,
                "policy_entropy": selection.entropy.sum() / tokens}
