"""Zhang et al. 2018, "Improving the Transformer Translation Model with Document-Level Context"
(docs/papers/zhang2018.md section 2).

The sentence Transformer (`models/transformer.py`, theta_s) plus a context encoder and context
attention (theta_d), reading the previous source sentences X_<k (`batch["ctx_src"]`):

    context encoder, Eqs. 4-9:  X_c = WordEmb(x_m) + PosEnc(m);  N_c layers of self-attention + FFN;
                                only the top output C^(Nc) is used, by every encoder and decoder layer
    encoder layer, Eqs. 11-13:  self_attn -> context_attn (Eq. 12) -> ffn
    decoder layer, Eqs. 15-18:  self_attn -> context_attn (Eq. 16) -> cross_attn -> ffn
    context attention:          Integrate(H, MultiHead(H, C^(Nc), C^(Nc))), H the sublayer input
    Integrate, Eqs. 20-22:      gating on:  LN(lambda * H + (1 - lambda) * U), lambda = sigmoid(W_i H + W_s U)
                                gating off: LN(H + dropout(U))
Every other sublayer keeps the plain residual (trap 1). Tables: T2 (`context_layers`), T7 (two-step
training, which freezes `THETA_S_GLOBS`), T8 (`context_attn.encoder` / `context_attn.decoder`),
T9 (`context_gating`), and the "this work" rows of T3, T4 and T6.

Readings (docs/papers/zhang2018.md section 8):
- NOT IN PAPER, Z2: the gate is D-dimensional per position, W_i, W_s in R^{DxD} without bias, no
  dropout on U inside the gated path, post-LN kept after the gate (`nn/gating.py`).
- NOT IN PAPER, Z3: the context is embedded with the SHARED source embedding table (scaled by
  sqrt(D), as the encoder's input) with positions numbered from 0 over the concatenated context.
- NOT IN PAPER, Z4: an empty context is the single token `<eos>` (the batch contract's layout).
- NOT IN PAPER, Z5: with gating off the LayerNorm after context attention is kept.
- Z6: `context_layers` (N_c) defaults to 1, the paper's system, not the reference code's 6.
- Z10: freezing theta_s does not switch its dropout off; nothing here depends on freezing.
- NOT IN PAPER, Z15: `gate_hold` holds every gate's lambda at a constant (a warm-up stage that trains
  the context read while the gate cannot shut; the gate weights stay frozen there, `GATE_GLOBS`).
- NOT IN PAPER, Z17: `context_init: intact` starts every context read at zero and every gate at
  lambda 0.5, so that step 2 begins from the sentence model's own outputs (`context_attention_block`).

How open the gates are is logged per update (`train/gate_mean`, `train/gate_shut`, over the real
positions of every gated sublayer, `nn/gating.gate_stats`): in step 2 a gate that shuts (lambda -> 1)
passes no gradient to open again, the failure reading Z16 describes.

Switches: a context-attention sublayer switched off does not exist (no parameters, not run). With
both off nothing reads C^(Nc), so the context encoder is not built either and the model is the
sentence Transformer (Table 8, row "none"); `ctx_src` is then not needed.

+BERT (Ma et al. 2020, Table 2, the dual-encoder "Transformer (Zhang et al. 2018) + BERT" row;
`model.pretrained_encoder`, docs/papers/ma2020.md readings F5, F10-F14, `nn/pretrained.py`): the
sentence encoder is the checkpoint's (embeddings and layers, fine-tuned), with the context-attention
sublayers (Eq. 12, new) inserted into its layers. NOT IN PAPER, reading F14: the context encoder
reads the context through the same BERT embeddings (Z3's shared table; token type 0, positions
0..C-1) and its N_c layers start as copies of the checkpoint's first N_c layers (not tied; a
layer beyond the checkpoint's depth starts random), so both encoders of the dual model start
from BERT. A two-step run keeps the rule: the stage-2 model is initialised from the checkpoint
first, then from stage 1, so theta_d (absent from stage 1) keeps the pretrained start.

Parameter names: theta_s keeps exactly the names of `TransformerSeq2Seq`, so a stage-1 Transformer
checkpoint loads with only theta_d missing. theta_d is `context_encoder.*` and every
`*.context_attn.*` sublayer (its attention, its LayerNorm `norm.*` and its gate `integrate.*`).
The two glob lists below partition the parameters for every setting of the switches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

from lightning_docmt.batch import PAD_ID
from lightning_docmt.config.registry import register_arch
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.models.transformer import TransformerConfig, TransformerSeq2Seq
from lightning_docmt.nn.attention import AttentionMemory, key_mask
from lightning_docmt.nn.gating import ContextGate, gate_stats
from lightning_docmt.nn.layers import LayerInputs, TransformerLayer, TransformerStack, cross_attention_block
from lightning_docmt.nn.model_hooks import LossTerms, OutputLoss
from lightning_docmt.nn.residual import ResidualBlock
from lightning_docmt.nn.seq2seq import EncoderState

THETA_S_GLOBS = [
    "src_embed.*", "tgt_embed.*", "output.*",
    "encoder.layers.*.self_attn.*", "encoder.layers.*.ffn.*", "encoder.final_norm.*",
    "decoder.layers.*.self_attn.*", "decoder.layers.*.cross_attn.*", "decoder.layers.*.ffn.*",
    "decoder.final_norm.*",
]
"""fnmatch globs of theta_s, the sentence Transformer (frozen in step 2 of the two-step training)."""

THETA_D_GLOBS = ["context_encoder.*", "*.context_attn.*"]
"""fnmatch globs of theta_d: the context encoder and every context-attention sublayer (LN and gate included)."""

GATE_GLOBS = ["*.context_attn.integrate.*"]
"""fnmatch globs of the gate weights W_i, W_s (Eq. 22): frozen while `gate_hold` holds lambda (reading Z15)."""

CONTEXT_MEMORY = "context"
"""The name under which context-attention sublayers find C^(Nc) in `LayerInputs.memories`."""


@dataclass
class ContextAttnConfig:
    """Where context attention is inserted (Table 8): every encoder layer (Eq. 12), every decoder layer (Eq. 16)."""

    encoder: bool = True
    decoder: bool = True


@dataclass
class ZhangDocConfig(TransformerConfig):
    """The Transformer's options plus the context encoder, context attention and gating switches."""

    arch: str = "zhang_doc"
    context_layers: int = 1  # N_c (Table 2; reading Z6)
    context_attn: ContextAttnConfig = field(default_factory=ContextAttnConfig)
    context_gating: bool = True  # Table 9: true = Eqs. 21-22, false = residual (Eq. 20)
    gate_hold: Optional[float] = None  # NOT IN PAPER, reading Z15: a constant lambda instead of Eq. 22
    context_init: str = "paper"  # "intact" (NOT IN PAPER, reading Z17): context reads start at zero


@dataclass
class ZhangEncoderState(EncoderState):
    """The encoder output plus the context encoding C^(Nc) (None when nothing reads it).

    `context.states` (B, C, D) and `context.mask` (B, 1, 1, C) are batch-first, so beam expansion and
    reordering (`index_select`) carry them along; they are computed once per sentence in `encode`.
    """

    context: Optional[AttentionMemory] = None

    def attention_memories(self) -> dict[str, AttentionMemory]:
        memories = super().attention_memories()
        if self.context is not None:
            memories[CONTEXT_MEMORY] = self.context
        return memories


CONTEXT_INITS = ("paper", "intact")


def context_attention_block(cfg: ZhangDocConfig) -> ResidualBlock:
    """Multi-head attention over C^(Nc) with the gate (Eqs. 21-22) or the residual (Eq. 20) as integration.

    `context_init: intact` (NOT IN PAPER, reading Z17) zeroes the attention's output projection and
    the gate's W_i and W_s: the context read U starts at 0 and lambda at 0.5 everywhere, so the
    post-LayerNorm block gives LN(0.5 H) = LN(H) (scale invariance) and LN(H + 0) = LN(H) ungated.
    The sentence model's outputs are unchanged when step 2 starts, and every gate sits where the
    sigmoid's slope is largest instead of where the untrained read pushes it shut (reading Z16).
    """
    block = cross_attention_block(cfg, memory=CONTEXT_MEMORY,
                                  integrate=ContextGate(cfg.d_model, cfg.gate_hold) if cfg.context_gating else None)
    if cfg.context_init == "intact":
        with torch.no_grad():
            block.fn.attn.out_proj.weight.zero_()  # U = 0 (its bias is zero already)
            if cfg.context_gating:
                block.integrate.input_proj.weight.zero_()  # W_i = 0
                block.integrate.context_proj.weight.zero_()  # W_s = 0: lambda = sigmoid(0) = 0.5
    return block


@register_arch("zhang_doc", ZhangDocConfig)
class ZhangDocSeq2Seq(TransformerSeq2Seq):
    """`TransformerSeq2Seq` with a context encoder (`context_encoder`) and `context_attn` sublayers.

    The decoder-side methods are the Transformer's: they read C^(Nc) through
    `ZhangEncoderState.attention_memories()`, and the decoder's context-attention keys/values are a
    static cache built once by `init_cache`, like the encoder-decoder attention's.
    """

    reads_context = True

    def __init__(self, cfg: ZhangDocConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__(cfg, src_vocab_size, tgt_vocab_size)
        if cfg.context_layers < 1:
            raise DocMTInputError(f"the context encoder needs at least one layer, got {cfg.context_layers}",
                                  key="model.context_layers")
        if cfg.gate_hold is not None and not (cfg.context_gating and 0.0 < cfg.gate_hold < 1.0):
            raise DocMTInputError("must be a lambda strictly between 0 and 1, with model.context_gating "
                                  f"on (got {cfg.gate_hold})", key="model.gate_hold")
        if cfg.context_init not in CONTEXT_INITS:
            raise DocMTInputError(f"must be one of {', '.join(CONTEXT_INITS)}, got {cfg.context_init!r}",
                                  key="model.context_init")
        if cfg.context_attn.encoder:
            for layer in self.encoder.layers:
                layer.insert("context_attn", context_attention_block(cfg), before="ffn")  # Eq. 12
        if cfg.context_attn.decoder:
            for layer in self.decoder.layers:
                layer.insert("context_attn", context_attention_block(cfg), before="cross_attn")  # Eq. 16
        self.context_encoder: Optional[TransformerStack] = None
        if cfg.context_attn.encoder or cfg.context_attn.decoder:
            self.context_encoder = TransformerStack(  # Eqs. 5-9; +BERT: layers of the checkpoint's kind
                [self.source_layer() for _ in range(cfg.context_layers)], cfg.d_model, cfg.pre_norm)

    def pretrained_layers(self) -> list[tuple[str, TransformerLayer, int]]:
        """+BERT (reading F14): the sentence encoder's layers from the checkpoint's, and context-encoder
        layer k from checkpoint layer k too (a copy, not tied), for k below both N_c and the
        checkpoint's depth."""
        layers = super().pretrained_layers()
        if self.context_encoder is not None and self.layout is not None:
            depth = self.cfg.enc_layers  # = the checkpoint's layer count (config/pretrained_files.encoder_settings)
            layers += [(f"context_encoder.layers.{k}", layer, k)
                       for k, layer in enumerate(self.context_encoder.layers) if k < depth]
        return layers

    def encode_context(self, batch: dict[str, Tensor]) -> Optional[AttentionMemory]:
        """C^(Nc) over `batch["ctx_src"]` (B, C) as an attention memory, or None when nothing reads it."""
        if self.context_encoder is None:
            return None
        if "ctx_src" not in batch:
            raise DocMTInputError("zhang_doc reads the previous source sentences; set context.prev_sentences > 0",
                                  key="context.prev_sentences")
        tokens = batch["ctx_src"]
        pad = tokens.eq(PAD_ID)  # (B, C)
        # Eq. 4 with readings Z3: the shared source table, scaled by sqrt(D), positions 0..C-1.
        context = self.context_encoder(self.src_embed(tokens), LayerInputs(self_mask=key_mask(pad)))  # (B, C, D)
        return AttentionMemory.from_padding(context, pad)

    def encode(self, batch: dict[str, Tensor]) -> ZhangEncoderState:
        context = self.encode_context(batch)
        tokens = self.source_tokens(batch)
        pad = tokens.eq(PAD_ID)  # (B, S)
        inputs = LayerInputs(self_mask=key_mask(pad), memories={} if context is None else {CONTEXT_MEMORY: context})
        memory = self.encoder(self.src_embed(tokens), inputs)
        return ZhangEncoderState(memory=memory, memory_pad=pad, context=context)


    def loss_terms(self, batch: dict[str, Tensor], output_loss: OutputLoss,
                   phase: str | None = None) -> LossTerms:
        """Teacher-forced cross entropy, with the gates' openness (`gate_mean`, `gate_shut`) as stats."""
        state = self.encode(batch)
        hidden = self.decode_hidden(batch["tgt_in"], state)  # (B, T, D)
        stats = gate_stats(self.gate_openings(state.memory_pad, batch["tgt_in"].eq(PAD_ID)))
        return LossTerms(*output_loss(hidden, batch["tgt_out"]), stats=stats)

    def gate_openings(self, src_pad: Tensor, tgt_pad: Tensor) -> list[tuple[Tensor, Tensor]]:
        """(lambda, real positions) of every gate's last forward pass: encoder gates over the source
        (B, S), decoder gates over the target (B, T)."""
        return [(gate.last_gate, ~pad) for stack, pad in ((self.encoder, src_pad), (self.decoder, tgt_pad))
                for gate in stack.modules() if isinstance(gate, ContextGate) and gate.last_gate is not None]
