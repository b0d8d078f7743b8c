"""The sentence-level Transformer (Vaswani et al. 2017), as used by every seed paper as the baseline.

Zhang et al. 2018 (docs/papers/zhang2018.md section 2), without the context encoder and context attention:
    encoder, Eqs. 11 and 13:  B = LN(S + MultiHead(S, S, S));  S' = LN(B + FFN(B))
    decoder, Eqs. 15, 17, 18: E = LN(T + MaskedMultiHead(T, T, T));  G = LN(E + MultiHead(E, S, S));
                              T' = LN(G + FFN(G))
    output, Eq. 19:           P(y_j | x, y_<j) = softmax(W_o T_j)
It is the step-1 model of Zhang's two-step training and the sentence model (theta_s) of seed 004.
Tables: Zhang T3/T4/T6/T7 ("Transformer" rows), Li & Feng T2 ("Transformer" rows), seed 004 T2.

Options (`TransformerConfig`, the shared `ModelConfig` fields):
- `pre_norm`: pre-LN sublayers `x + F(LN(x))` and a final LayerNorm on the encoder and decoder
  outputs (post-LN, the papers', has no final LayerNorm).
- `share_embeddings`: one table for source and target tokens (needs equal vocabulary sizes).
- `tie_output`: W_o is the target embedding table (Press & Wolf 2017; THUMT's shared softmax weights).
- `dropout` (embeddings and sublayer outputs), `attn_dropout` (attention weights), `relu_dropout` (FFN).

Initialisation (THUMT/tensor2tensor): attention and FFN weights Xavier-uniform per weight matrix,
biases zero, LayerNorm (1, 0); embeddings and an untied W_o N(0, D^-0.5) with the `<pad>` row zero.

Parameter names (globs for staged freezing): `src_embed.*`, `tgt_embed.*`, `encoder.*`, `decoder.*`,
`output.*` make up theta_s. A shared table is registered once, under the first name it gets
(`src_embed.weight`; `tgt_embed.weight` when only the output is tied).

Pretrained encoder (`pretrained_encoder`, `nn/pretrained.py`; Ma et al. 2020's "+BERT" rows,
docs/papers/ma2020.md readings F5, F10-F14): the source embedding is BERT's (`PretrainedEmbedding`:
words, learned positions, token types, LayerNorm) and the encoder layers are post-LN layers of the
checkpoint's sizes, activation and LayerNorm epsilon, under the same parameter names. The
constructor builds them from `pretrained_layout` (filled in when the config is composed) and loads
nothing; `load_pretrained` copies the checkpoint's weights in when a stage starts training. Every
architecture built on this class (concat, flat, zhang_doc) gets the option; the decoder keeps its own
target embedding and sinusoidal positions at the checkpoint's width (reading F12).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from torch import Tensor, nn

from lightning_docmt.batch import PAD_ID
from lightning_docmt.config.pretrained_files import ENCODER_KEY, PretrainedLayout, as_layout
from lightning_docmt.config.registry import register_arch
from lightning_docmt.config.schema import ModelConfig
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.nn.attention import key_mask
from lightning_docmt.nn.embedding import TokenEmbedding
from lightning_docmt.nn.layers import (
    LayerInputs,
    TransformerLayer,
    TransformerStack,
    decoder_layer,
    encoder_layer,
)
from lightning_docmt.nn.pretrained import PretrainedEmbedding, load_pretrained_encoder
from lightning_docmt.nn.seq2seq import DecoderCache, EncoderState, Seq2SeqModel


@dataclass
class TransformerConfig(ModelConfig):
    """The sentence-level Transformer: the shared `ModelConfig` fields, plus the pretrained encoder."""

    arch: str = "transformer"
    # A BERT-style checkpoint (built-in name, directory or cached hub name, nn/pretrained.py) that
    # initialises the source embedding and the encoder layers, fine-tuned; null: trained from scratch.
    pretrained_encoder: Optional[str] = None
    # NOT IN PAPER (reading F15): the pretrained tensors train at the stage's lr times this (1: the
    # same lr as the rest, the paper's).
    pretrained_lr_scale: float = 1.0
    # Filled in from the checkpoint's config.json when the config is composed (with d_model, heads,
    # ffn_dim, enc_layers); not set by hand.
    pretrained_layout: Optional[PretrainedLayout] = None


def pretrained_layout(cfg: TransformerConfig) -> Optional[PretrainedLayout]:
    """The layout of `cfg.pretrained_encoder`, or None without one (a layout given as a mapping is
    read as `PretrainedLayout`); a checkpoint named without a layout was never composed."""
    if cfg.pretrained_encoder is None:
        return None
    layout = cfg.pretrained_layout
    if layout is None:
        raise DocMTInputError("set, but model.pretrained_layout is empty: build the config with "
                              "config.composition.compose, which reads the checkpoint's sizes", key=ENCODER_KEY)
    return as_layout(layout)


@register_arch("transformer", TransformerConfig)
class TransformerSeq2Seq(Seq2SeqModel):
    """Encoder-decoder Transformer implementing the `Seq2SeqModel` interface; the sentence-level baseline.

    Subclasses change what the encoder reads by overriding `source_tokens` (see `models/concat.py`).
    """

    reads_context = False

    def __init__(self, cfg: TransformerConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        if cfg.pretrained_encoder is not None and (cfg.share_embeddings or cfg.pre_norm):
            key = "model.share_embeddings" if cfg.share_embeddings else "model.pre_norm"
            raise DocMTInputError("must be false with model.pretrained_encoder (the source side is the "
                                  "checkpoint's own, a post-LN BERT)", key=key)
        if cfg.share_embeddings and src_vocab_size != tgt_vocab_size:
            raise DocMTInputError(
                f"shared source/target embeddings need one vocabulary, got sizes {src_vocab_size} and "
                f"{tgt_vocab_size}; set vocab.joint=true or model.share_embeddings=false",
                key="model.share_embeddings")
        self.cfg = cfg
        self.layout = pretrained_layout(cfg)
        if self.layout is None:
            self.src_embed = TokenEmbedding(src_vocab_size, cfg.d_model, cfg.dropout, cfg.max_positions)
        else:  # BERT's embeddings (reading F10); `share_embeddings` is false (checked above)
            self.src_embed = PretrainedEmbedding(src_vocab_size, cfg.d_model, self.layout, cfg.dropout)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, cfg.d_model, cfg.dropout, cfg.max_positions)
        if cfg.share_embeddings:
            self.tgt_embed.weight = self.src_embed.weight
        self.encoder = TransformerStack([self.source_layer() for _ in range(cfg.enc_layers)], cfg.d_model,
                                        cfg.pre_norm)
        self.decoder = TransformerStack([decoder_layer(cfg) for _ in range(cfg.dec_layers)], cfg.d_model,
                                        cfg.pre_norm)
        self.output = nn.Linear(cfg.d_model, tgt_vocab_size, bias=False)
        if cfg.tie_output:
            self.output.weight = self.tgt_embed.weight
        else:
            nn.init.normal_(self.output.weight, mean=0.0, std=cfg.d_model ** -0.5)

    def source_layer(self) -> TransformerLayer:
        """A new encoder layer: the Transformer's, or the pretrained encoder's kind (GELU, its LayerNorm
        epsilon; post-LN) when there is one. Also the kind of any other layer reading source text
        (Zhang et al.'s context encoder)."""
        if self.layout is None:
            return encoder_layer(self.cfg)
        return encoder_layer(self.cfg, self.layout.activation, self.layout.layer_norm_eps)

    def pretrained_layers(self) -> list[tuple[str, TransformerLayer, int]]:
        """(parameter prefix, layer, checkpoint layer index) of every layer `load_pretrained` fills:
        encoder layer i from checkpoint layer i."""
        return [(f"encoder.layers.{i}", layer, i) for i, layer in enumerate(self.encoder.layers)]

    def load_pretrained(self, src_vocab: Any) -> list[str]:
        """Copy the pretrained encoder's weights into `src_embed` and `pretrained_layers()`; returns the
        parameter names set (none without `pretrained_encoder`). `src_vocab` is the data's source
        vocabulary, whose `pretrained_ids` give the checkpoint row of every source id."""
        if self.layout is None:
            return []
        ids = getattr(src_vocab, "pretrained_ids", None)
        if ids is None:
            raise DocMTInputError(f"the source vocabulary is not the WordPiece vocabulary of "
                                  f"'{self.cfg.pretrained_encoder}'", key="vocab.src_pretrained")
        return load_pretrained_encoder(self.cfg.pretrained_encoder, self.layout, self.src_embed,
                                       self.pretrained_layers(), ids)

    def source_tokens(self, batch: dict[str, Tensor]) -> Tensor:
        """The token ids (B, S) the encoder reads: the current source sentence."""
        return batch["src"]

    def encode(self, batch: dict[str, Tensor]) -> EncoderState:
        tokens = self.source_tokens(batch)
        pad = tokens.eq(PAD_ID)  # (B, S)
        memory = self.encoder(self.src_embed(tokens), LayerInputs(self_mask=key_mask(pad)))
        return EncoderState(memory=memory, memory_pad=pad)

    def decode_hidden(self, tgt_in: Tensor, state: EncoderState) -> Tensor:
        # Right padding: the causal mask alone keeps every real position away from padded keys.
        inputs = LayerInputs(causal=True, memories=state.attention_memories())
        return self.decoder(self.tgt_embed(tgt_in), inputs)  # (B, T, D)

    def init_cache(self, state: EncoderState) -> DecoderCache:
        return DecoderCache(layers=self.decoder.new_cache(LayerInputs(memories=state.attention_memories())))

    def decode_step(self, tokens: Tensor, state: EncoderState, cache: DecoderCache) -> Tensor:
        inputs = LayerInputs(memories=state.attention_memories())
        hidden = self.decoder(self.tgt_embed(tokens, offset=cache.step), inputs, cache.layers)  # (B, 1, D)
        cache.step += 1
        return self.output(hidden[:, 0])  # (B, V)

