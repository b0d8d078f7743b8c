"""Ma, Zhang & Zhou 2020, "A Simple and Effective Unified Encoder for Document-Level Machine
Translation": the Flat-Transformer (docs/papers/ma2020.md sections 1 and 5).

One encoder reads the current source sentence together with its surrounding source sentences:

    Eq. 1:  P(Y|X) ~ prod_i P(y_i | x_i; x_<i, x_>i)     source context only, no target context
    Eq. 2:  e = [E(c); E(x)]                             word embeddings of context c and current x
    Eq. 3:  s = [S(c); S(x)]                             one learned vector per segment (context, current)
            encoder input = e + s + PE                   positions over the whole sequence (reading F1)
    Eq. 4:  h_1 = Transformer_bottom(e + s)              `bottom_layers` blocks over the FULL sequence
    Eq. 5:  h_2 = Transformer_top(h_1[s:t])              the remaining blocks over the current
                                                         sentence's positions only, CUT OUT (trap 11)
            decoder: the Transformer's; its encoder-decoder attention reads h_2 (|x| positions)
    Eq. 6:  label-smoothed token cross entropy (the shared recipe); Eq. 7: sentence-by-sentence search
Tables: T2 (Flat-Transformer row) and T3 (its ablation: `segment_embedding=false`, "w/o Segment";
`unified=false segment_embedding=false`, "w/o Unified", reading F4).

Input, per row, from the batch contract (`batch.py`): `ctx_src` (the previous sentences, oldest
first) and `ctx_next` (the next ones, nearest first), each ending in `<eos>`:
    concat_order=doc_order (reading F2):  [x_<i ; x_i <eos> ; x_>i]   segments (ctx, cur, ctx)
    concat_order=context_first (Eq. 2):   [x_<i ; x_>i ; x_i <eos>]   segments (ctx, ctx, cur)
NOT IN PAPER, reading F3: no separator token between context and current sentence: the final
`<eos>` of `ctx_src` and of `ctx_next` is dropped (a `<sep>` between several context sentences stays
when `context.separator=true`; the preset sets it false). A missing neighbour (document edge; a side
whose `ctx_*` is the single token `<eos>`) contributes no token at all.

Segments (reading F8): id 0 = context (previous and next alike), id 1 = current sentence, the table
`src_embed.segment` (2, D) initialised like the word table. An empty context (no neighbour on
either side) gives the input `src` with positions 0..S-1 plus S(current) everywhere: the
Transformer's encoder input exactly when `segment_embedding=false` or S(current) = 0.

Split (reading F9): `bottom_layers` blocks over the full sequence, top = `enc_layers` -
`bottom_layers` blocks over the current sentence (0 <= bottom_layers <= enc_layers). bottom = 0 is a
sentence encoder whose positions start after the context; bottom = enc_layers still cuts the
current sentence out for the decoder. `unified=false` (reading F4, "w/o Unified") cuts nothing:
every block over the whole sequence and the decoder attends to every position (Tiedemann &
Scherrer's concatenation over this model's input; `bottom_layers` is then not read).

Parameter names are exactly the Transformer's (`encoder.layers.<i>` with i < bottom_layers the
bottom blocks, the rest the top blocks; not weight-tied, trap 12) plus `src_embed.segment.weight`,
so a sentence-level Transformer checkpoint loads with only the segment table missing, and the
parameter count is the Transformer's + 2 x d_model. No pretraining stage (reading F7).

+BERT (Table 2, `model.pretrained_encoder`, readings F5 and F10-F14; `nn/pretrained.py`): the
unified encoder is the checkpoint's, fine-tuned. Its word, position and token-type embeddings
replace Eqs. 2-3 (token type = the segment id above: 0 context, 1 current; with
`segment_embedding=false` every token is type 0, BERT's single-segment input), its layers are the
blocks, `bottom_layers` of them over the whole sequence and the rest over the current sentence
(the cut applies to the checkpoint's layers: 1 + 5 for the 6-layer MiniLM; F5's same-ratio reading
for a 12-layer BERT is `bottom_layers=2`). The source ids are the checkpoint's WordPiece ids
(`vocab.src_pretrained`), the contract's `</s>` closing the current sentence being BERT's [SEP];
no [CLS] is added (reading F10). The segment table is then the checkpoint's `src_embed.segment.weight`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from lightning_docmt.batch import PAD_ID
from lightning_docmt.config.registry import register_arch
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.models.transformer import TransformerConfig, TransformerSeq2Seq
from lightning_docmt.nn.attention import key_mask
from lightning_docmt.nn.concatenation import JoinedRows, join_rows
from lightning_docmt.nn.layers import LayerInputs
from lightning_docmt.nn.seq2seq import EncoderState

CONTEXT_SEGMENT = 0
"""Segment id of every context token, previous or next (reading F8)."""
CURRENT_SEGMENT = 1
"""Segment id of the current sentence's tokens (reading F8; BERT token type 1 in reading F5)."""
NUM_SEGMENTS = 2
CONCAT_ORDERS = ("doc_order", "context_first")


@dataclass
class FlatConfig(TransformerConfig):
    """The Transformer's options plus the Flat-Transformer's split, segments and input order."""

    arch: str = "flat"
    bottom_layers: int = 1  # N_bottom (Eq. 4); N_top = enc_layers - bottom_layers (Eq. 5), reading F9
    segment_embedding: bool = True  # Eq. 3; false: Table 3 "w/o Segment"
    concat_order: str = "doc_order"  # doc_order | context_first (reading F2)
    unified: bool = True  # false: Table 3 "w/o Unified", nothing cut out (reading F4)


def split_context(ctx: Tensor) -> tuple[Tensor, Tensor]:
    """A `ctx_*` tensor (B, C) and how many of its leading tokens are context tokens (B,): all but
    the final `<eos>`, so 0 for an empty context (reading F3)."""
    return ctx, (ctx.ne(PAD_ID).sum(1) - 1).clamp(min=0)


@register_arch("flat", FlatConfig)
class FlatSeq2Seq(TransformerSeq2Seq):
    """`TransformerSeq2Seq` whose encoder reads [previous; current; next] (Eqs. 2-5).

    Only `encode` differs from the Transformer: it returns a plain `EncoderState` whose memory is
    h_2 over the current sentence (B, S, D) with `src`'s padding (or, with `unified=false`, the
    whole sequence), so decoding, beam search and scoring are the Transformer's.
    """

    reads_context = True

    def __init__(self, cfg: FlatConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__(cfg, src_vocab_size, tgt_vocab_size)
        if not 0 <= cfg.bottom_layers <= cfg.enc_layers:
            raise DocMTInputError(f"must be between 0 and model.enc_layers ({cfg.enc_layers}), got "
                                  f"{cfg.bottom_layers}", key="model.bottom_layers")
        if cfg.concat_order not in CONCAT_ORDERS:
            raise DocMTInputError(f"must be one of {', '.join(CONCAT_ORDERS)}, got {cfg.concat_order!r}",
                                  key="model.concat_order")
        if self.layout is not None:  # +BERT (reading F5): S is the checkpoint's token-type table
            if cfg.segment_embedding and self.layout.type_vocab_size < NUM_SEGMENTS:
                raise DocMTInputError(f"'{cfg.pretrained_encoder}' has {self.layout.type_vocab_size} token "
                                      f"type(s), the segments need {NUM_SEGMENTS}", key="model.segment_embedding")
        elif cfg.segment_embedding:  # Eq. 3: S, the only parameters the Transformer does not have
            self.src_embed.segment = nn.Embedding(NUM_SEGMENTS, cfg.d_model)
            nn.init.normal_(self.src_embed.segment.weight, mean=0.0, std=cfg.d_model ** -0.5)  # reading F8

    @property
    def top_layers(self) -> int:
        return self.cfg.enc_layers - self.cfg.bottom_layers

    def unified_input(self, batch: dict[str, Tensor]) -> tuple[JoinedRows, int]:
        """The joined input rows (tokens (B, L), part of origin, part starts) and the index of the
        current sentence among the parts (Eq. 2, readings F2 and F3)."""
        if "ctx_src" not in batch and "ctx_next" not in batch:
            raise DocMTInputError("the Flat-Transformer reads the surrounding source sentences; set "
                                  "context.prev_sentences > 0 or context.next_sentences > 0 (the paper: 1 and 1)",
                                  key="context.prev_sentences")
        src = batch["src"]
        current = (src, src.ne(PAD_ID).sum(1))  # the current sentence keeps its <eos>
        previous = [split_context(batch["ctx_src"])] if "ctx_src" in batch else []
        following = [split_context(batch["ctx_next"])] if "ctx_next" in batch else []
        if self.cfg.concat_order == "doc_order":  # reading F2: [x_<i; x_i; x_>i]
            parts, at = [*previous, current, *following], len(previous)
        else:  # Eq. 2 taken literally: [c; x]
            parts, at = [*previous, *following, current], len(previous) + len(following)
        return join_rows([tokens for tokens, _ in parts], [length for _, length in parts]), at

    def segment_ids(self, joined: JoinedRows, current: int) -> Tensor | None:
        """(B, L) Eq. 3's segment of every position (reading F8), or None without segment embedding."""
        if not self.cfg.segment_embedding:
            return None
        is_current = joined.origin.eq(current)  # (B, L)
        return torch.where(is_current, CURRENT_SEGMENT, CONTEXT_SEGMENT)  # (B, L), padding: context

    def encode(self, batch: dict[str, Tensor]) -> EncoderState:
        joined, current = self.unified_input(batch)
        pad = joined.tokens.eq(PAD_ID)  # (B, L)
        x = self.src_embed(joined.tokens, self.segment_ids(joined, current))  # Eqs. 2-3, reading F1: (B, L, D)
        full = LayerInputs(self_mask=key_mask(pad))
        if not self.cfg.unified:  # reading F4: every block over [context; current], nothing cut out
            return EncoderState(memory=self.encoder(x, full), memory_pad=pad)
        h1 = self.encoder.run_layers(x, full, 0, self.cfg.bottom_layers)  # Eq. 4: (B, L, D)
        src_pad = batch["src"].eq(PAD_ID)  # (B, S): the current sentence's padding, after the cut too
        start = joined.starts[:, current]  # (B,) s in Eq. 5
        index = start[:, None] + torch.arange(src_pad.size(1), device=start.device)[None, :]  # (B, S)
        index = index.clamp(max=h1.size(1) - 1)  # (B, S): padding rows may run past L; masked below
        h = h1.gather(1, index[:, :, None].expand(-1, -1, h1.size(2)))  # Eq. 5, h_1[s:t]: (B, S, D)
        h = h.masked_fill(src_pad[:, :, None], 0.0)  # (B, S, D): no context state at padding
        h2 = self.encoder.run_layers(h, LayerInputs(self_mask=key_mask(src_pad)), self.cfg.bottom_layers)  # Eq. 5
        return EncoderState(memory=self.encoder.finish(h2), memory_pad=src_pad)  # (B, S, D), (B, S)
