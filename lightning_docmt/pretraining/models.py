"""The two pretraining models around one BERT-style encoder (`nn/pretrained.PretrainedEncoder`),
whose encoder alone is kept (docs/papers/donato2021.md, readings D20 and D23).

    MaskedLanguageModel   BERT (Devlin et al. 2019): the encoder, then BERT's prediction head
                          h -> LN(GELU(h W_t + b_t)) -> h E^T + b over the masked positions, E the
                          encoder's word table (tied)
    GapSentenceModel      PEGASUS (Zhang et al. 2020) with Donato et al.'s single gap sentence and no
                          masked-word term: the encoder reads the window, a Transformer decoder
                          (`nn/layers.decoder_layer`, post-LN) writes the masked verse; the decoder's
                          input table and its output projection are the encoder's word table (tied).
                          NOT IN PAPER, reading D23: the encoder is built like BERT (learned positions,
                          token types, post-LN, GELU), not like PEGASUS (sinusoidal positions, pre-LN),
                          so that one reader loads every encoder of the stack
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_docmt.config.pretrained_files import pretraining_layout
from lightning_docmt.config.pretraining import PretrainConfig
from lightning_docmt.config.schema import ModelConfig
from lightning_docmt.nn.attention import AttentionMemory, key_mask
from lightning_docmt.nn.embedding import TokenEmbedding
from lightning_docmt.nn.layers import LayerInputs, TransformerStack, decoder_layer
from lightning_docmt.nn.pretrained import PretrainedEncoder


def new_encoder(cfg: PretrainConfig) -> PretrainedEncoder:
    """The encoder `cfg` pretrains, at BERT's initialisation, laid out as tables will read it."""
    return PretrainedEncoder(pretraining_layout(cfg), cfg.width, cfg.heads, cfg.ffn_dim, cfg.layers, cfg.dropout)


class MaskedLanguageModel(nn.Module):
    """`encoder` plus BERT's masked-LM head (`transform.*`, `norm.*`, `bias`)."""

    def __init__(self, encoder: PretrainedEncoder):
        super().__init__()
        self.encoder = encoder
        width = encoder.width
        self.transform = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width, eps=encoder.layout.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(encoder.layout.vocab_size))

    def forward(self, tokens: Tensor, types: Tensor, pad: Tensor, labels: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(B, L) each -> (mean cross entropy over the predicted positions, correct predictions,
        predicted positions); `labels` -1 where nothing is predicted."""
        states = self.encoder(tokens, types, pad)  # (B, L, W)
        chosen = labels.ge(0)
        hidden = self.norm(F.gelu(self.transform(states[chosen])))  # (N, W)
        logits = F.linear(hidden, self.encoder.embed.weight, self.bias).float()  # (N, V)
        target = labels[chosen]
        return F.cross_entropy(logits, target), logits.argmax(-1).eq(target).sum(), target.numel()


class GapSentenceModel(nn.Module):
    """`encoder` plus a decoder over its states (`decoder.*`), the word table tied throughout."""

    def __init__(self, encoder: PretrainedEncoder, heads: int, ffn_dim: int, layers: int, dropout: float):
        super().__init__()
        self.encoder = encoder
        sizes = ModelConfig(d_model=encoder.width, heads=heads, ffn_dim=ffn_dim, dropout=dropout)
        self.embed = TokenEmbedding(encoder.layout.vocab_size, encoder.width, dropout, encoder.layout.max_positions)
        self.embed.weight = encoder.embed.weight
        self.decoder = TransformerStack([decoder_layer(sizes) for _ in range(layers)], encoder.width, pre_norm=False)

    def forward(self, source: Tensor, source_pad: Tensor, target_in: Tensor, target_out: Tensor
                ) -> tuple[Tensor, Tensor, Tensor]:
        """source (B, S), target_in / target_out (B, T) padded with 0 (= [PAD]) -> (mean cross entropy
        per target token, correct predictions, target tokens)."""
        states = self.encoder(source, torch.zeros_like(source), source_pad)  # (B, S, W)
        inputs = LayerInputs(causal=True, memories={"memory": AttentionMemory(states, key_mask(source_pad))})
        hidden = self.decoder(self.embed(target_in), inputs)  # (B, T, W)
        real = target_out.ne(0)
        logits = F.linear(hidden[real], self.encoder.embed.weight).float()  # (N, V)
        target = target_out[real]
        return F.cross_entropy(logits, target), logits.argmax(-1).eq(target).sum(), target.numel()
