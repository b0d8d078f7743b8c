"""Token embeddings scaled by sqrt(D) plus sinusoidal positions (Vaswani et al. 2017, Sec. 3.4 and 3.5).

`E(x_t) = sqrt(D) * W_e[x_t] + PE(t) (+ S[seg_t])`, followed by dropout.

Positions are numbered from 0 (THUMT). The sinusoid layout is tensor2tensor's (used by THUMT and
fairseq): the first D/2 channels are sin(t * w_i), the last D/2 are cos(t * w_i), with
w_i = 10000^(-i / (D/2 - 1)), i = 0..D/2-1.

The optional segment table S (Ma et al. 2020, Eq. 3) gives Flat-Transformer one learned vector per
segment id. W_e is initialised N(0, D^-0.5) (THUMT, fairseq) with the `<pad>` row zero.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_docmt.batch import PAD_ID


def sinusoidal_positions(length: int, d_model: int) -> Tensor:
    """(length, d_model) table: [sin(t * w_i) for i < D/2] + [cos(t * w_i) for i < D/2]."""
    if d_model % 2 or d_model < 4:
        raise ValueError(f"sinusoidal positions need an even d_model >= 4, got {d_model}")
    half = d_model // 2
    rates = torch.exp(torch.arange(half, dtype=torch.float64) * (-math.log(10000.0) / (half - 1)))
    angles = torch.arange(length, dtype=torch.float64)[:, None] * rates[None, :]  # (L, D/2)
    return torch.cat([angles.sin(), angles.cos()], dim=1).float()


class TokenEmbedding(nn.Module):
    """Scaled token embedding + sinusoidal positions (+ optional segment embedding) + dropout.

    `weight` (V, D) is a plain parameter so that the source table, the target table and the output
    projection can share one tensor by assignment. The position table is a non-persistent buffer of
    `max_positions` rows, regrown on demand for longer inputs.
    """

    def __init__(self, vocab_size: int, d_model: int, dropout: float = 0.0, max_positions: int = 1024,
                 num_segments: int = 0):
        super().__init__()
        self.d_model = d_model
        self.scale = math.sqrt(d_model)
        self.dropout = nn.Dropout(dropout)
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        self.segment = nn.Embedding(num_segments, d_model) if num_segments else None
        self.register_buffer("positions", sinusoidal_positions(max_positions, d_model), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, mean=0.0, std=self.d_model ** -0.5)
        with torch.no_grad():
            self.weight[PAD_ID].zero_()
        if self.segment is not None:
            nn.init.normal_(self.segment.weight, mean=0.0, std=self.d_model ** -0.5)

    def position_table(self, end: int) -> Tensor:
        """The first `end` rows of the position table (regrown if needed)."""
        if end > self.positions.size(0):
            self.positions = sinusoidal_positions(max(end, 2 * self.positions.size(0)), self.d_model).to(
                self.positions.device)
        return self.positions[:end]

    def forward(self, tokens: Tensor, segments: Optional[Tensor] = None, offset: int = 0) -> Tensor:
        """tokens (B, L) -> (B, L, D); positions run offset..offset+L-1 (offset > 0 in incremental decoding)."""
        x = F.embedding(tokens, self.weight, padding_idx=PAD_ID) * self.scale
        x = x + self.position_table(offset + tokens.size(1))[offset:].to(x.dtype)
        if segments is not None:
            if self.segment is None:
                raise ValueError("segment ids given to an embedding built without segments")
            x = x + self.segment(segments)
        return self.dropout(x)
