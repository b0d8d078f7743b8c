"""Multi-head attention with an incremental key/value cache (Vaswani et al. 2017, Sec. 3.2.2).

`MultiHeadAttention(Q, K, V) = Concat(head_1..head_h) W^O`, `head_i = softmax(Q W^Q_i (K W^K_i)^T / sqrt(d_k)) V W^V_i`.

The h heads are computed at once by reshaping to (B, H, L, d_k), under a boolean mask (True = may
attend). On GPUs `torch.nn.functional.scaled_dot_product_attention` picks its fused kernels as usual.
On a CPU the attention is `masked_softmax_attention`: two batched products around a masked softmax,
the arithmetic of PyTorch's plain ("math") kernel without that kernel's copies (its mask conversion,
its scaling of queries and keys, and under bf16 autocast its float32 copies of queries, keys and
values), in training and in every decoding step; PyTorch's CPU flash-attention kernel is slower for
the short sequences of sentence-level MT, its backward above all. `benchmarks/training_step.py`
measures the three (`CPU_ATTENTION`). In beam search the k beams of a sentence read its
cross-attention memory stored once, as one product (`grouped_query_attention`).

Two caches serve incremental decoding:
- an *incremental* cache (self-attention): the keys/values of every step are appended, so step t
  attends over positions 0..t without recomputing them; beam reordering selects its rows lazily,
  in the copy that appends the next step;
- a *static* cache (cross-attention): the keys/values of a fixed memory (encoder output, context
  encoding) are projected once, when the cache is created, and reused at every step.

Packed positions (`nn/packing.py`): a query given as the real positions of a batch (N, D) with
their `packing` is projected as it is and laid out (B, T, ...) only for the scores, and the output
projection runs on the packed rows again; a memory's keys and values are projected from its real
positions when its padding packs, zeros at the padded ones (which the mask keeps out).

Initialisation: W^Q, W^K, W^V and W^O are each Xavier-uniform over their own D x D block (the
per-matrix reading of tensor2tensor/THUMT's fan-average uniform initialiser); biases are zero.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from lightning_docmt.nn.packing import Packing

MASKED_SOFTMAX = "masked_softmax"
CPU_KERNELS = {"math": [SDPBackend.MATH], "flash": [SDPBackend.FLASH_ATTENTION]}  # PyTorch's, for comparison
CPU_ATTENTION = MASKED_SOFTMAX
"""The attention on a CPU: `masked_softmax_attention`, or one of PyTorch's `CPU_KERNELS`
(`benchmarks/training_step.py` sets it to compare them)."""


class AttentionCache:
    """Projected keys and values of one attention sublayer, batch-first: (B, H, L, d_k).

    `static=True` marks a cache that depends only on the encoder state (cross-attention memory):
    it is identical for every beam of a sentence, so beam reordering may skip it, and beam expansion
    need not copy it: a static cache with `group` = k holds one row per sentence, read by the k
    consecutive query rows of that sentence's beams (`grouped_query_attention`).

    Selecting rows of an incremental cache (`select_rows`: beam reordering, dropping finished
    sentences) is lazy: the rows are taken when the cache is next appended to, in the same copy
    that makes room for the new position, so that a decoding step copies its keys and values once
    rather than twice (`index_select`, then `torch.cat`). Reading `key` or `value` takes them at once.
    """

    def __init__(self, key: Optional[Tensor] = None, value: Optional[Tensor] = None, static: bool = False,
                 rows: Optional[Tensor] = None, group: int = 1):
        self._key, self._value, self.static = key, value, static
        self._rows = rows  # (B',) rows of `_key`/`_value` this cache holds, not taken yet; None: all
        self.group = group  # static caches: consecutive query rows that read one row of the cache

    @property
    def key(self) -> Optional[Tensor]:
        self._take_rows()
        return self._key

    @property
    def value(self) -> Optional[Tensor]:
        self._take_rows()
        return self._value

    def _take_rows(self) -> None:
        if self._rows is not None and self._key is not None:
            self._key, self._value = self._key.index_select(0, self._rows), self._value.index_select(0, self._rows)
        self._rows = None

    def select_rows(self, index: Tensor, include_static: bool = True, shared: int = 1) -> AttentionCache:
        """Rows `index` of the batch, as a new cache (this one is left as it is); a static cache is
        returned as it is when `include_static` is False (see `nn.seq2seq.DecoderCache.index_select`).
        `shared` > 1: `index` repeats each row `shared` times in a row (beam expansion); a static cache
        then keeps one row per sentence, shared by the `shared` query rows made from it."""
        if self.static:
            if not include_static or self._key is None:
                return self
            group = self.group * shared
            rows = torch.div(index, self.group, rounding_mode="floor")  # (B',) the cache row each query row reads
            rows = one_row_per_group(rows, group) if group > 1 else rows
            return AttentionCache(self._key.index_select(0, rows), self._value.index_select(0, rows), static=True,
                                  group=group)
        rows = index if self._rows is None else self._rows.index_select(0, index)
        return AttentionCache(self._key, self._value, rows=rows)

    def append(self, key: Tensor, value: Tensor) -> None:
        """Append the keys/values of new positions (incremental self-attention)."""
        if self._key is None:
            self._key, self._value, self._rows = key, value, None
        elif self._rows is None:
            self._key = torch.cat([self._key, key], dim=2)  # (B, H, L + l, d_k)
            self._value = torch.cat([self._value, value], dim=2)
        else:
            self._key = rows_then_positions(self._key, self._rows, key)
            self._value = rows_then_positions(self._value, self._rows, value)
            self._rows = None


def one_row_per_group(rows: Tensor, group: int) -> Tensor:
    """(B',) cache rows read by B' query rows -> (B' / group,) one per `group` consecutive query rows,
    which must all read the same row (a selection keeps a sentence's beams together)."""
    if rows.numel() % group:
        raise ValueError(f"{rows.numel()} rows do not split into groups of {group}")
    grouped = rows.view(-1, group)  # (B' / group, group)
    if not grouped.eq(grouped[:, :1]).all():
        raise ValueError(f"a selection of rows splits a group of {group} rows that share a static cache row")
    return grouped[:, 0]


def rows_then_positions(cached: Tensor, rows: Tensor, new: Tensor) -> Tensor:
    """`torch.cat([cached.index_select(0, rows), new], dim=2)` in one copy of `cached`:
    cached (B, H, L, d_k), rows (B',), new (B', H, l, d_k) -> (B', H, L + l, d_k). Under autograd
    (`out=` has no gradient) it is those two copies."""
    if torch.is_grad_enabled() and (cached.requires_grad or new.requires_grad):
        return torch.cat([cached.index_select(0, rows), new], dim=2)
    length = cached.size(2)
    out = cached.new_empty(new.size(0), cached.size(1), length + new.size(2), cached.size(3))
    torch.index_select(cached, 0, rows, out=out[:, :, :length])
    out[:, :, length:] = new
    return out


@dataclass
class AttentionMemory:
    """A key/value memory for cross-attention: `states` (B, S, D) and `mask` (B, 1, 1, S), True = attend."""

    states: Tensor
    mask: Tensor

    @cached_property
    def packing(self) -> Optional[Packing]:
        """How to project only the real positions of `states`, or None to project them all."""
        return Packing.of_mask(self.mask, self.states)

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

    def project_memory(self, memory: Tensor, packing: Optional[Packing] = None) -> tuple[Tensor, Tensor]:
        """Keys and values of a memory (B, S, D) -> two (B, H, S, d_k) tensors; with `packing`, from
        its real positions only (zeros at the padded ones)."""
        d = self.d_model
        if packing is None:
            kv = F.linear(memory, self.in_proj_weight[d:], self.in_proj_bias[d:])  # (B, S, 2D)
        else:
            kv = packing.unpack(F.linear(packing.pack(memory), self.in_proj_weight[d:], self.in_proj_bias[d:]))
        key, value = kv.chunk(2, dim=-1)
        return self._split_heads(key), self._split_heads(value)

    def static_cache(self, memory: Tensor, packing: Optional[Packing] = None) -> AttentionCache:
        """A cross-attention cache holding the memory's projected keys/values (`project_memory`)."""
        key, value = self.project_memory(memory, packing)
        return AttentionCache(key, value, static=True)

    def memory_cache(self, memory: AttentionMemory) -> AttentionCache:
        """`static_cache` of a cross-attention memory, from its real positions when its padding packs
        (`AttentionMemory.packing`): what a cross-attention sublayer reads, in training and decoding."""
        return self.static_cache(memory.states, memory.packing)

    def forward(self, query: Tensor, memory: Optional[Tensor] = None, mask: Optional[Tensor] = None,
                causal: bool = False, cache: Optional[AttentionCache] = None,
                packing: Optional[Packing] = None) -> Tensor:
        """Attend from `query` (B, T, D) to `memory` (B, S, D), or to `query` itself when `memory` is None.

        mask: bool, broadcastable to (B, H, T, S), True = may attend (e.g. `key_mask(pad)`).
        causal: position t attends to positions <= t only (self-attention over a full sequence).
        cache: a static cache replaces the memory's keys/values; an incremental cache receives this
        call's keys/values and the query attends over everything cached so far.
        packing: `query` is the real positions (N, D) of a (B, T) batch (`nn/packing.py`), and so is
        the result; self-attention then attends over those same rows, laid out (B, T).
        """
        d = self.d_model
        static = cache is not None and cache.static
        if memory is None and not static:  # self-attention: Q, K and V in one product
            qkv = F.linear(query, self.in_proj_weight, self.in_proj_bias)  # (B, T, 3D), or (N, 3D) packed
            q, k, v = (qkv if packing is None else packing.unpack(qkv)).chunk(3, dim=-1)
            key, value = self._split_heads(k), self._split_heads(v)
        else:
            q = F.linear(query, self.in_proj_weight[:d], self.in_proj_bias[:d])
            q = q if packing is None else packing.unpack(q)  # (B, T, D)
            key, value = (cache.key, cache.value) if static else self.project_memory(memory)
        if cache is not None and not cache.static:
            cache.append(key, value)
            key, value = cache.key, cache.value
        dropout = self.dropout if self.training else 0.0
        if static and cache.group > 1:  # the beams of a sentence read its one row of the cache
            context = grouped_query_attention(self._split_heads(q), key, value, mask, dropout, cache.group)
        else:
            context = scaled_dot_product_attention(self._split_heads(q), key, value, mask, dropout, causal)
        # context: (B, H, T, d_k)
        batch, _, length, _ = context.shape
        context = context.transpose(1, 2).reshape(batch, length, d)  # (B, T, D)
        return self.out_proj(context if packing is None else packing.pack(context))  # (B, T, D), or (N, D)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor],
                                 dropout: float, causal: bool) -> Tensor:
    """Attention over (B, H, L, d_k) tensors: PyTorch's fused kernels off the CPU; on a CPU
    `masked_softmax_attention` (or the kernel `CPU_ATTENTION` names). `causal` with a mask, or in
    our attention, becomes one boolean mask (PyTorch's kernels take a mask or `is_causal`, not both)."""
    ours = query.device.type == "cpu" and CPU_ATTENTION == MASKED_SOFTMAX
    if causal and (mask is not None or ours):  # query position t of T attends to the keys up to S - T + t
        rows, columns = query.size(2), key.size(2)
        visible = torch.ones(rows, columns, dtype=torch.bool, device=query.device).tril(columns - rows)
        mask, causal = (visible if mask is None else mask & visible), False
    if ours:
        return masked_softmax_attention(query, key, value, mask, dropout)
    kernels = sdpa_kernel(CPU_KERNELS[CPU_ATTENTION]) if query.device.type == "cpu" else nullcontext()
    with kernels:
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout,
                                              is_causal=causal)


def grouped_query_attention(query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor], dropout: float,
                            group: int) -> Tensor:
    """Attention of B' = n * `group` query rows (B', H, T, d_k) over a memory stored once per sentence,
    key/value (n, H, S, d_k): query rows i * group .. (i + 1) * group - 1 read memory row i (the beams
    of sentence i, `AttentionCache.group`). The same values as attending from every row to its own
    copy of the memory, without making the copies and with one product per sentence instead of one
    per beam. mask: None, or a key mask (B', 1, 1, S), equal within a group."""
    rows, heads, length, d_k = query.shape
    sentences = rows // group
    if mask is not None and mask.size(2) != 1:
        raise ValueError("grouped query attention takes a key mask (B, 1, 1, S), not one per query position")
    stacked = query.view(sentences, group, heads, length, d_k).transpose(1, 2).reshape(
        sentences, heads, group * length, d_k)  # (n, H, group * T, d_k)
    context = scaled_dot_product_attention(stacked, key, value, None if mask is None else mask[::group], dropout,
                                           causal=False)  # (n, H, group * T, d_k)
    return context.view(sentences, heads, group, length, d_k).transpose(1, 2).reshape(rows, heads, length, d_k)


def masked_softmax_attention(query: Tensor, key: Tensor, value: Tensor, mask: Optional[Tensor],
                             dropout: float = 0.0) -> Tensor:
    """dropout(softmax(q K^T / sqrt(d_k))) V under a key mask, as two batched products:
    query (B, H, T, d_k), key and value (B, H, S, d_k), mask None or bool broadcastable to
    (B, H, T, S) -> (B, H, T, d_k). What PyTorch's math kernel computes, dropout included (on the
    attention weights, scaled by 1 / (1 - p)), and as its safe softmax does, a query row that the
    mask leaves nothing to attend to gives zeros. Under bf16 autocast the products run in bf16 and
    the softmax in float32, as the layers around it do."""
    scores = torch.matmul(query, key.transpose(-1, -2)) * query.size(-1) ** -0.5  # (B, H, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if mask is not None:
        empty = ~mask.any(dim=-1, keepdim=True)  # rows with nothing to attend to: NaN after the softmax
        if empty.any():
            weights = weights.masked_fill(empty, 0.0)
    if dropout > 0.0:
        weights = F.dropout(weights, dropout, training=True)
    return torch.matmul(weights, value)  # (B, H, T, d_k)
