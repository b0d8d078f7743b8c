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
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from lightning_docmt.data.batch import PAD_ID
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.nn.attention import key_mask
from lightning_docmt.nn.embedding import TokenEmbedding
from lightning_docmt.nn.layers import LayerInputs, TransformerStack, decoder_layer, encoder_layer
from lightning_docmt.nn.seq2seq import DecoderCache, EncoderState, Seq2SeqModel
from lightning_docmt.config.schema import ModelConfig
from lightning_docmt.registry import register_arch


@dataclass
class TransformerConfig(ModelConfig):
    """The sentence-level Transformer: the shared `ModelConfig` fields are all it needs."""

    arch: str = "transformer"


@register_arch("transformer", TransformerConfig)
class TransformerSeq2Seq(Seq2SeqModel):
    """Encoder-decoder Transformer implementing the `Seq2SeqModel` interface; the sentence-level baseline.

    Subclasses change what the encoder reads by overriding `source_tokens` (see `models/concat.py`).
    """

    reads_context = False

    def __init__(self, cfg: TransformerConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        if cfg.share_embeddings and src_vocab_size != tgt_vocab_size:
            raise DocMTInputError(
                f"shared source/target embeddings need one vocabulary, got sizes {src_vocab_size} and "
                f"{tgt_vocab_size}; set vocab.joint=true or model.share_embeddings=false",
                key="model.share_embeddings")
        self.cfg = cfg
        self.src_embed = TokenEmbedding(src_vocab_size, cfg.d_model, cfg.dropout, cfg.max_positions)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, cfg.d_model, cfg.dropout, cfg.max_positions)
        if cfg.share_embeddings:
            self.tgt_embed.weight = self.src_embed.weight
        self.encoder = TransformerStack([encoder_layer(cfg) for _ in range(cfg.enc_layers)], cfg.d_model,
                                        cfg.pre_norm)
        self.decoder = TransformerStack([decoder_layer(cfg) for _ in range(cfg.dec_layers)], cfg.d_model,
                                        cfg.pre_norm)
        self.output = nn.Linear(cfg.d_model, tgt_vocab_size, bias=False)
        if cfg.tie_output:
            self.output.weight = self.tgt_embed.weight
        else:
            nn.init.normal_(self.output.weight, mean=0.0, std=cfg.d_model ** -0.5)

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

