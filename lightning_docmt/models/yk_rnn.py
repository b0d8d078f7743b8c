"""Yamagishi & Komachi 2019: attentional LSTM NMT with a context attention (docs/papers/yamagishi.md section 1).

    (6)   s_m = BiLSTM_enc(W_x x_m)                 2 layers, H/2 per direction (reading Y1)
    (7)   h_n = LSTM_dec(W_y y_{n-1}, h_{n-1})      2 layers, the previous token (reading Y2),
                                                    starting from the encoder's final states (Y10)
    (4-5) c_n = dot attention of h_n over s
    (8-9) c^{i-1}_n = dot attention of h_n over z^{i-1}; 0 when z^{i-1} is empty (c^0 = 0)
    (3)   h~_n = W_h [h_n; c_n; c^{i-1}_n]          linear; tanh only with `attn_hidden_tanh` (Y3)
    (2)   p(y_n | ...) = softmax(W_o h~_n)          no input feeding (Y3)
Dropout: embeddings, between stacked LSTM layers, and h~ (reading Y11).

Variants (`context`, `context_side`; the preset sets `context_side` to `${context.side}`):
- `none`: the sentence-level baseline, no c^{i-1} term (W_h is H x 2H).
- `separated`: z = a context encoder of the encoder's shape with its own weights and the shared
  embeddings (Eqs. 10-11, reading Y6) over `ctx_src` (W_x) and/or `ctx_tgt` (W_y), which the batch
  carries with `context.prev_sentences=1`; an empty context is an empty z (reading Y12).
- `shared`: z = the encoder's states s of the previous source sentence and/or the decoder's top
  LSTM states h (not h~) of the previous target sentence (reading Y4, trap 14), carried from
  sentence to sentence (`carries_state`, `nn/model_hooks.py`). Built as `SharedContextRNN`.
- `mix` sums the source and target context vectors, each with its own attention (trap 15); with
  `separated` it reads both context encoders (reading Y12).

Carried state (shared only): a dict side -> `Memory` (states (B, K, H), padding (B, K)) with
K = `carry_tokens` + 1, the same in every batch: the side's states of the sentence, its last K
positions when it has more (reading Y13). `initial_carry` is the empty memory, so the first
sentence of a document gets c^0 = 0. `encode` puts the memories z into the `EncoderState`
(`contexts`, batch-first), so beam search and `decode_step` read them unchanged.

Initialisation from the baseline (reading Y7): W_h is `attn_hidden.base` (over [h; c]) plus
`attn_hidden.context` (over c^{i-1}, context models only; `nn/luong_attention.py`), so a `none`
checkpoint loads into a context model (`init_from`) with only `attn_hidden.context.weight` and,
when separated, `context_encoders.*` missing; those keep their fresh initialisation (reading Y14).

Parameter names: `src_embed.*`, `tgt_embed.*` (one table when `share_embeddings`), `encoder.*`,
`decoder.*`, `attn_hidden.*`, `context_encoders.{source,target}.*`, `output.*` (W_o, bias-free).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Optional

import numpy as np
from torch import Tensor, nn

from lightning_docmt.batch import BOS_ID, EOS_ID, PAD_ID, pad
from lightning_docmt.config.registry import register_arch
from lightning_docmt.config.schema import ModelConfig
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.nn.lstm import BiLSTMEncoder, LSTMState, between_layers
from lightning_docmt.nn.luong_attention import AttentionalHidden, Memory, dot_attention
from lightning_docmt.nn.model_hooks import CARRY_KEY, LossTerms, OutputLoss
from lightning_docmt.nn.seq2seq import DecoderCache, EncoderState, Seq2SeqModel

CONTEXTS = ("none", "separated", "shared")
SIDE_MEMORIES = {"source": ("source",), "target": ("target",), "mix": ("source", "target")}
"""`context_side` -> the context memories z whose context vectors are summed."""
CONTEXT_TOKENS = {"source": "ctx_src", "target": "ctx_tgt"}
"""The batch key a separated context encoder reads, per memory."""


@dataclass
class YKRNNConfig(ModelConfig):
    """The shared sizes (`d_model` = H, `enc_layers`, `dec_layers`, `dropout`, `share_embeddings`,
    `tie_output`) and the RNN's own options; `heads`, `ffn_dim`, `attn_dropout`, `relu_dropout`,
    `pre_norm` and `max_positions` are not read."""

    arch: str = "yk_rnn"
    embed_dim: Optional[int] = None  # E; null: d_model (the paper: both 512)
    attn_hidden_tanh: bool = False  # Eq. 3 literally (reading Y3); true: Luong's tanh(W_h [...])
    context: str = "none"  # none | separated | shared
    context_side: str = "source"  # source | target | mix (the preset: ${context.side})
    carry_tokens: int = 250  # shared: the carry keeps carry_tokens + 1 positions (reading Y13;
    # the preset: ${data.max_len}, so every training sentence is kept whole)


def check_config(cfg: YKRNNConfig, src_vocab_size: int, tgt_vocab_size: int) -> None:
    """The options the model cannot be built with, as `DocMTInputError`s naming the key."""
    problems = [
        (cfg.context not in CONTEXTS, "model.context",
         f"must be one of {', '.join(CONTEXTS)}, got {cfg.context!r}"),
        (cfg.context_side not in SIDE_MEMORIES, "model.context_side",
         f"must be one of {', '.join(SIDE_MEMORIES)}, got {cfg.context_side!r}"),
        (cfg.d_model % 2 == 1, "model.d_model",
         f"must be even (H/2 per encoder direction, reading Y1), got {cfg.d_model}"),
        (cfg.enc_layers != cfg.dec_layers, "model.dec_layers",
         f"must equal model.enc_layers ({cfg.enc_layers}): the decoder starts from the encoder's final "
         f"state of each layer (reading Y10)"),
        (cfg.share_embeddings and src_vocab_size != tgt_vocab_size, "model.share_embeddings",
         f"shared source/target embeddings need one vocabulary, got sizes {src_vocab_size} and "
         f"{tgt_vocab_size}; set vocab.joint=true or model.share_embeddings=false"),
        (cfg.tie_output and (cfg.embed_dim or cfg.d_model) != cfg.d_model, "model.tie_output",
         f"tying W_o to the target embedding needs model.embed_dim == model.d_model, got {cfg.embed_dim}"),
        (cfg.carry_tokens < 0, "model.carry_tokens", f"must be >= 0, got {cfg.carry_tokens}"),
    ]
    for bad, key, message in problems:
        if bad:
            raise DocMTInputError(message, key=key)


@dataclass
class RNNEncoderState(EncoderState):
    """`memory` = s (B, S, H); `initial` = the decoder's initial state (reading Y10); `contexts` =
    the context memories z by side ("source", "target"), empty without context."""

    initial: Optional[LSTMState] = None
    contexts: dict[str, Memory] = field(default_factory=dict)


@dataclass
class RNNCache(DecoderCache):
    """The decoder LSTM's (h, c) after the tokens consumed so far."""

    lstm: Optional[LSTMState] = None


@register_arch("yk_rnn", YKRNNConfig)
class YKRNNSeq2Seq(Seq2SeqModel):
    """The baseline and the separated models; `context=shared` builds `SharedContextRNN`."""

    def __new__(cls, cfg: Optional[YKRNNConfig] = None, *args: Any, **kwargs: Any) -> YKRNNSeq2Seq:
        # `carries_state` is read from the model's class (`type(model).carries_state`), so the
        # shared variant, which carries state, is a class of its own. (`copy` calls __new__ with
        # the class alone.)
        if cls is YKRNNSeq2Seq and cfg is not None and cfg.context == "shared":
            cls = SharedContextRNN
        return super().__new__(cls)

    @classmethod
    def reads_context_with(cls, model: Mapping[str, Any]) -> bool:
        """The baseline (`context: none`) reads no context: its stage is shared by every row."""
        return model.get("context", "none") != "none"

    def __init__(self, cfg: YKRNNConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        check_config(cfg, src_vocab_size, tgt_vocab_size)
        self.cfg = cfg
        self.sides = SIDE_MEMORIES[cfg.context_side] if cfg.context != "none" else ()
        hidden, embed = cfg.d_model, cfg.embed_dim or cfg.d_model
        self.src_embed = nn.Embedding(src_vocab_size, embed, padding_idx=PAD_ID)  # W_x
        self.tgt_embed = nn.Embedding(tgt_vocab_size, embed, padding_idx=PAD_ID)  # W_y
        if cfg.share_embeddings:
            self.tgt_embed.weight = self.src_embed.weight
        self.dropout = nn.Dropout(cfg.dropout)
        self.encoder = BiLSTMEncoder(embed, hidden, cfg.enc_layers, cfg.dropout)  # Eq. 6
        self.decoder = nn.LSTM(embed, hidden, cfg.dec_layers, batch_first=True,
                               dropout=between_layers(cfg.dropout, cfg.dec_layers))  # Eq. 7
        separated = self.sides if cfg.context == "separated" else ()
        self.context_encoders = nn.ModuleDict({side: BiLSTMEncoder(embed, hidden, cfg.enc_layers, cfg.dropout)
                                               for side in separated})  # Eqs. 10-11 (reading Y6)
        self.attn_hidden = AttentionalHidden(hidden, context=bool(self.sides), tanh=cfg.attn_hidden_tanh)  # Eq. 3
        self.output = nn.Linear(hidden, tgt_vocab_size, bias=False)  # W_o, Eq. 2
        if cfg.tie_output:
            self.output.weight = self.tgt_embed.weight

    def encode(self, batch: dict[str, Tensor]) -> RNNEncoderState:
        src = batch["src"]
        pad = src.eq(PAD_ID)  # (B, S)
        memory, final = self.encoder(self.dropout(self.src_embed(src)), pad)  # (B, S, H)
        return RNNEncoderState(memory=memory, memory_pad=pad, initial=final,
                               contexts=self.context_memories(batch))

    def context_memories(self, batch: dict[str, Tensor]) -> dict[str, Memory]:
        """z by side: the separated context encoders over the previous sentence (none: no memory)."""
        return {side: self.encode_context(side, batch) for side in self.context_encoders}

    def encode_context(self, side: str, batch: dict[str, Tensor]) -> Memory:
        """Eq. 10 (source) or 11 (target) over `ctx_src` or `ctx_tgt`; the empty context (the single
        `<eos>` of a document's first sentence) is an empty memory (reading Y12)."""
        key = CONTEXT_TOKENS[side]
        if key not in batch:
            raise DocMTInputError(f"model.context=separated reads the previous {side} sentence "
                                  f"(`{key}`): set context.prev_sentences=1 and context.side="
                                  f"{self.cfg.context_side}", key="context.prev_sentences")
        tokens = batch[key]
        embed = self.src_embed if side == "source" else self.tgt_embed
        states, _ = self.context_encoders[side](self.dropout(embed(tokens)), tokens.eq(PAD_ID))  # (B, C, H)
        return Memory(states, tokens.eq(PAD_ID) | tokens[:, :1].eq(EOS_ID))

    def run_decoder(self, tgt_in: Tensor, start: LSTMState) -> tuple[Tensor, LSTMState]:
        """Eq. 7 from `start`: the top layer's states h (B, T, H) and the state after the last token."""
        h, (hidden, cell) = self.decoder(self.dropout(self.tgt_embed(tgt_in)), start.for_lstm())
        return h, LSTMState.from_lstm(hidden, cell)

    def attentional_hidden(self, h: Tensor, state: RNNEncoderState) -> Tensor:
        """h~ (B, T, H) of the decoder states h (B, T, H): Eqs. 3-5 and 8-9, the sides summed (trap 15)."""
        c = dot_attention(h, Memory(state.memory, state.memory_pad))
        c_context = sum(dot_attention(h, z) for z in state.contexts.values()) if state.contexts else None
        return self.dropout(self.attn_hidden(h, c, c_context))

    def decode_hidden(self, tgt_in: Tensor, state: RNNEncoderState) -> Tensor:
        h, _ = self.run_decoder(tgt_in, state.initial)  # (B, T, H)
        return self.attentional_hidden(h, state)

    def init_cache(self, state: RNNEncoderState) -> RNNCache:
        return RNNCache(lstm=state.initial)

    def decode_step(self, tokens: Tensor, state: RNNEncoderState, cache: RNNCache) -> Tensor:
        h, cache.lstm = self.run_decoder(tokens, cache.lstm)  # (B, 1, H)
        cache.step += 1
        return self.output(self.attentional_hidden(h, state)[:, 0])  # (B, V)


class SharedContextRNN(YKRNNSeq2Seq):
    """`context=shared`: z is the encoder's or decoder's own states of the previous sentence,
    handed on through `LossTerms.carry` and read from `batch[CARRY_KEY]` (module docstring)."""

    carries_state: ClassVar[bool] = True

    @property
    def carry_positions(self) -> int:
        """K: the positions of every carried memory."""
        return self.cfg.carry_tokens + 1

    def initial_carry(self, batch: dict[str, Tensor]) -> dict[str, Memory]:
        """The empty memory of every side (c^0 = 0)."""
        src = batch["src"]
        return {side: Memory.empty(src.size(0), self.carry_positions, self.cfg.d_model, src.device)
                for side in self.sides}

    def context_memories(self, batch: dict[str, Tensor]) -> dict[str, Memory]:
        if CARRY_KEY not in batch:
            raise ValueError(f"the shared model reads the previous sentence's states from "
                             f"batch['{CARRY_KEY}'] (document-order batches, `initial_carry` for a "
                             f"document's first sentence)")
        return {side: batch[CARRY_KEY][side] for side in self.sides}

    def next_carry(self, state: RNNEncoderState, tgt_in: Tensor, h: Tensor) -> dict[str, Memory]:
        """What this sentence hands on: per side, the encoder states s (source) or the decoder's top
        states h (B, T, H) over `tgt_in` (target), K positions each (reading Y13). At test time
        `tgt_in` is `<bos>` + the 1-best hypothesis and h its `run_decoder` states (reading Y4)."""
        saved = {"source": Memory(state.memory, state.memory_pad), "target": Memory(h, tgt_in.eq(PAD_ID))}
        return {side: saved[side].last(self.carry_positions) for side in self.sides}

    def output_carry(self, batch: dict[str, Tensor], hypotheses: list[list[int]]) -> dict[str, Memory]:
        """`next_carry` over `<bos>` + each row's 1-best hypothesis: the target side's decoder states
        are those of what was output (trap 14), the source side's the encoder states as in
        training. The decoder is recomputed over the hypothesis, which equals the states its beam
        held (incremental decoding is the full forward), so the beam need not carry them."""
        tgt_in = pad([np.array([BOS_ID, *tokens]) for tokens in hypotheses]).to(batch["src"].device)  # (B, T)
        state = self.encode(batch)
        h, _ = self.run_decoder(tgt_in, state.initial)  # (B, T, H)
        return self.next_carry(state, tgt_in, h)

    def loss_terms(self, batch: dict[str, Tensor], output_loss: OutputLoss,
                   phase: str | None = None) -> LossTerms:
        state = self.encode(batch)
        h, _ = self.run_decoder(batch["tgt_in"], state.initial)  # (B, T, H), teacher-forced (reading Y4)
        terms = output_loss(self.attentional_hidden(h, state), batch["tgt_out"])
        return LossTerms(*terms, carry=self.next_carry(state, batch["tgt_in"], h))
