"""Multi-head attention with an incremental key/value cache (Vaswani et al. 2017, Sec. 3.2.2).

`MultiHeadAttention(Q, K, V) = Concat(head_1..head_h) W^O`, `head_i = softmax(Q W^Q_i (K W^K_i)^T / sqrt(d_k)) V W^V_i`.

The h heads are computed at once by reshaping to (B, H, L, d_k) and calling
`torch.nn.functional.scaled_dot_product_attention` with a boolean mask (True = may attend). On a
CPU it is told to use its plain ("math") formulation: PyTorch's CPU flash-attention kernel is slower
for the short sequences of sentence-level MT, its backward above all (`benchmarks/training_step.py`
measures both); on GPUs PyTorch picks its fused kernels as usual.

Two caches serve incremental decoding:
- an *incremental* cache (self-attention): the keys/values of every step are appended, so step t
  attends over positions 0..t without recomputing them;
- a *static* cache (cross-attention): the keys/values of a fixed memory (encoder output, context
  encoding) are projected once, when the cache is created, and reused at every step.

Initialisation: W^Q, W^K, W^V and W^O are each Xavier-uniform over their own D x D block (the
per-matrix reading of tensor2tensor/THUMT's fan-average uniform initialiser); biases are zero.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

CPU_ATTENTION_BACKENDS = [SDPBackend.MATH]


@dataclass
class AttentionCache:
    """Projected keys and values of one attention sublayer, batch-first: (B, H, L, d_k).

    `static=True` marks a cache that depends only on the encoder state (cross-attention memory):
    it is identical for every beam of a sentence, so beam reordering may skip it.
    """

    key: Optional[Tensor] = None
    value: Optional[Tensor] = None
    static: bool = False

    def append(self, key: Tensor, value: Tensor) -> None:
        """Append the keys/values of new positions (incremental self-attention)."""
        if self.key is None:
            self.key, self.value = key, value
        else:
            self.key = torch.cat([self.key, key], dim=2)  # (B, H, L + l, d_k)
            self.value = torch.cat([self.value, value], dim=2)


@dataclass
class AttentionMemory:
    """A key/value memory for cross-attention: `states` (B, S, D) and `mask` (B, 1, 1, S), True = attend."""

    states: Tensor
    mask: Tensor

    @classmethod
    def from_padding(cls, states: Tensor, pad: Tensor) -> AttentionMemory:
        """Build from a (B, S) padding mask (True = padding)."""
        return cls(states, key_mask(pad))


def key_mask(pad: Tensor) -> Tensor:
    """(B, S) padding (True = pad) -> (B, 1, 1, S) attention mask (True = attend), broadcast over heads/queries."""
    return ~pad[:, None, None, :]


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over `heads` heads with fused Q/K/V projection weights.

    `in_proj_weight` stacks [W^Q; W^K; W^V] as a (3D, D) matrix, so self-attention projects its input
    with a single matmul and cross-attention projects the memory with the [W^K; W^V] half.
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model={d_model} is not divisible by heads={heads}")
        self.d_model = d_model
        self.heads = heads
        self.dropout = dropout
        self.in_proj_weight = nn.Parameter(torch.empty(3 * d_model, d_model))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * d_model))
        self.out_proj = nn.Linear(d_model, d_model)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for block in self.in_proj_weight.detach().chunk(3, dim=0):
            nn.init.xavier_uniform_(block)
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.in_proj_bias)
        nn.init.zeros_(self.out_proj.bias)

    def _split_heads(self, x: Tensor) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.heads, -1).transpose(1, 2)  # (B, H, L, d_k)

    def project_memory(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of a memory (B, S, D) -> two (B, H, S, d_k) tensors."""
        d = self.d_model
        kv = F.linear(memory, self.in_proj_weight[d:], self.in_proj_bias[d:])  # (B, S, 2D)
        key, value = kv.chunk(2, dim=-1)
        return self._split_heads(key), self._split_heads(value)

    def static_cache(self, memory: Tensor) -> AttentionCache:
        """A cross-attention cache holding the memory's projected keys/values."""
        key, value = self.project_memory(memory)
        return AttentionCache(key, value, static=True)

    def forward(self, query: Tensor, memory: Optional[Tensor] = None, mask: Optional[Tensor] = None,
                causal: bool = False, cache: Optional[AttentionCache] = None) -> Tensor:
        """Attend from `query` (B, T, D) to `memory` (B, S, D), or to `query` itself when `memory` is None.

        mask: bool, broadcastable to (B, H, T, S), True = may attend (e.g. `key_mask(pad)`).
        causal: position t attends to positions <= t only (self-attention over a full sequence).
        cache: a static cache replaces the memory's keys/values; an incremental cache receives this
        call's keys/values and the query attends over everything cached so far.
        """
        d = self.d_model
        if cache is not None and cache.static:
            q = F.linear(query, self.in_proj_weight[:d], self.in_proj_bias[:d])
            key, value = cache.key, cache.value
        elif memory is None:
            q, k, v = F.linear(query, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)
            key, value = self._split_heads(k), self._split_heads(v)
        else:
            q = F.linear(query, self.in_proj_weight[:d], self.in_proj_bias[:d])
            key, value = self.project_memory(memory)
        if cache is not None and not cache.static:
            cache.append(key, value)
            key, value = cache.key, cache.value
        if causal and mask is not None:
            length = query.size(1)
            mask = mask & torch.ones(length, key.size(2), dtype=torch.bool, device=query.device).tril()
            causal = False
        context = scaled_dot_product_attention(
            self._split_heads(q), key, value, mask=mask,
            dropout=self.dropout if self.training else 0.0, causal=causal)  # (B, H, T, d_k)
        batch, _, length, _ = context.shape
        return self.out_proj(context.transpose(1, 2).reshape(batch, length, d))  # (B, T, D)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor],
                                 dropout: float, causal: bool) -> Tensor:
    """`F.scaled_dot_product_attention` over (B, H, L, d_k) tensors, with the math kernel on a CPU."""
    kernels = sdpa_kernel(CPU_ATTENTION_BACKENDS) if query.device.type == "cpu" else nullcontext()
    with kernels:
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout,
                                              is_causal=causal)
