"""Transformer encoder/decoder layers as ordered compositions of residual sublayers.

Encoder layer (Vaswani et al. 2017; Zhang et al. 2018, Eqs. 11 and 13 without Eq. 12):
    self_attn -> ffn
Decoder layer (Zhang et al. 2018, Eqs. 15, 17, 18 without Eq. 16):
    self_attn (causal) -> cross_attn (encoder output) -> ffn
FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (Vaswani et al. 2017, Eq. 2), with dropout after the ReLU
(a pretrained BERT-style encoder's layers use GELU instead, `nn/pretrained.py`).

A `TransformerLayer` is an ordered `nn.ModuleDict` of `ResidualBlock`s run in order, so an
architecture adds a sublayer without copying the layer code: Zhang et al. 2018 insert
`context_attn` before `cross_attn` (Eq. 16) with `layer.insert("context_attn", block, before="cross_attn")`.
Parameter names follow the sublayer names: `layers.<i>.<sublayer>.fn.*`, `layers.<i>.<sublayer>.norm.*`.

Every sublayer function has the signature `fn(x, inputs: LayerInputs, cache) -> (B, T, D)`.
Cross-attention sublayers name the memory they read from `inputs.memories` ("memory" = encoder
output; architectures add their own, e.g. "context").

A stack run without a decoding cache packs a padded batch (`nn/packing.py`, `run_layers`): the
sublayers then get the real positions as x (N, D) and `inputs.packing`; those marked `packable`
(FFN, self- and cross-attention) work on them, `ResidualBlock` lays the rows out for any other.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

import torch.nn.functional as F
from torch import Tensor, nn

from lightning_docmt.config.schema import ModelConfig
from lightning_docmt.nn.attention import AttentionCache, AttentionMemory, MultiHeadAttention
from lightning_docmt.nn.packing import Packing, dropout_of
from lightning_docmt.nn.residual import LAYER_NORM_EPS, ResidualBlock

LayerCache = dict[str, AttentionCache]
"""The incremental-decoding caches of one layer, by sublayer name."""

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,  # the exact (erf) GELU of BERT's "gelu"
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
}
"""FFN activations by name (the names of Hugging Face configs' `hidden_act`)."""


@dataclass
class LayerInputs:
    """Everything a layer's sublayers may read besides the hidden states.

    self_mask: (B, 1, 1, T) bool, True = may attend, or None (no padding among the keys).
    causal: self-attention over a full sequence sees only positions <= t.
    memories: cross-attention memories by name.
    packing: set by `run_layers` only: x is then (N, D), the batch's real positions (`nn/packing.py`).
    """

    self_mask: Optional[Tensor] = None
    causal: bool = False
    memories: dict[str, AttentionMemory] = field(default_factory=dict)
    packing: Optional[Packing] = None

    def unpacked(self) -> LayerInputs:
        """The same inputs for a padded x (B, T, D)."""
        return dataclasses.replace(self, packing=None)


class FeedForward(nn.Module):
    """Position-wise FFN (Eq. 2 of Vaswani et al.) with `relu_dropout` after the activation (ReLU
    unless `activation` names another one of `ACTIVATIONS`); Xavier-uniform weights."""

    packable = True  # position-wise

    def __init__(self, d_model: int, ffn_dim: int, relu_dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; known: {', '.join(ACTIVATIONS)}")
        self.fc1 = nn.Linear(d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, d_model)
        self.relu_dropout = nn.Dropout(relu_dropout)
        self.activation = ACTIVATIONS[activation]
        for linear in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def forward(self, x: Tensor, inputs: Optional[LayerInputs] = None,
                cache: Optional[AttentionCache] = None) -> Tensor:
        hidden = self.activation(self.fc1(x))  # (B, T, F), or (N, F) packed
        return self.fc2(dropout_of(self.relu_dropout, hidden, None if inputs is None else inputs.packing))


class SelfAttention(nn.Module):
    """Multi-head self-attention sublayer; its decoding cache is incremental (keys/values appended)."""

    packable = True

    def __init__(self, d_model: int, heads: int, attn_dropout: float = 0.0):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, heads, attn_dropout)

    def new_cache(self, inputs: LayerInputs) -> AttentionCache:
        return AttentionCache()

    def forward(self, x: Tensor, inputs: LayerInputs, cache: Optional[AttentionCache] = None) -> Tensor:
        return self.attn(x, None, inputs.self_mask, inputs.causal, cache, inputs.packing)


class CrossAttention(nn.Module):
    """Multi-head attention from the layer's stream to the memory `inputs.memories[memory]`.

    Its decoding cache is static: the memory's keys/values are projected once by `new_cache`; a
    forward pass without a cache projects them the same way, from the memory's real positions only
    when its padding packs (`AttentionMemory.packing`).
    """

    packable = True

    def __init__(self, d_model: int, heads: int, attn_dropout: float = 0.0, memory: str = "memory"):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, heads, attn_dropout)
        self.memory = memory

    def new_cache(self, inputs: LayerInputs) -> AttentionCache:
        return self.attn.memory_cache(inputs.memories[self.memory])

    def forward(self, x: Tensor, inputs: LayerInputs, cache: Optional[AttentionCache] = None) -> Tensor:
        if cache is None:
            cache = self.new_cache(inputs)
        return self.attn(x, None, inputs.memories[self.memory].mask, False, cache, inputs.packing)


def self_attention_block(cfg: ModelConfig, norm_eps: float = LAYER_NORM_EPS) -> ResidualBlock:
    return ResidualBlock(SelfAttention(cfg.d_model, cfg.heads, cfg.attn_dropout), cfg.d_model, cfg.dropout,
                         cfg.pre_norm, norm_eps=norm_eps)


def cross_attention_block(cfg: ModelConfig, memory: str = "memory",
                          integrate: Optional[nn.Module] = None) -> ResidualBlock:
    return ResidualBlock(CrossAttention(cfg.d_model, cfg.heads, cfg.attn_dropout, memory), cfg.d_model,
                         cfg.dropout, cfg.pre_norm, integrate)


def feed_forward_block(cfg: ModelConfig, activation: str = "relu", norm_eps: float = LAYER_NORM_EPS
                       ) -> ResidualBlock:
    return ResidualBlock(FeedForward(cfg.d_model, cfg.ffn_dim, cfg.relu_dropout, activation), cfg.d_model,
                         cfg.dropout, cfg.pre_norm, norm_eps=norm_eps)


class TransformerLayer(nn.ModuleDict):
    """An ordered mapping sublayer name -> `ResidualBlock`, applied in order.

    `packable`: the layer takes packed rows (its blocks lay them out where they need to); a
    subclass that combines sublayers in its own way says False (`run_layers`)."""

    packable = True

    def insert(self, name: str, block: ResidualBlock, before: str) -> None:
        """Insert a sublayer right before an existing one (e.g. `context_attn` before `cross_attn`)."""
        if before not in self:
            raise KeyError(f"no sublayer {before!r} in {list(self.keys())}")
        if name in self:
            raise KeyError(f"sublayer {name!r} already exists")
        items = OrderedDict()
        for key, module in self.items():
            if key == before:
                items[name] = block
            items[key] = module
        self.clear()
        self.update(items)

    def new_cache(self, inputs: LayerInputs) -> LayerCache:
        """The decoding caches of the sublayers that keep one (attention sublayers)."""
        return {name: block.fn.new_cache(inputs) for name, block in self.items() if hasattr(block.fn, "new_cache")}

    def forward(self, x: Tensor, inputs: LayerInputs, cache: Optional[LayerCache] = None) -> Tensor:
        for name, block in self.items():
            x = block(x, inputs, None if cache is None else cache.get(name))
        return x


def encoder_layer(cfg: ModelConfig, activation: str = "relu", norm_eps: float = LAYER_NORM_EPS
                  ) -> TransformerLayer:
    """self_attn -> ffn; `activation` and `norm_eps` differ only in a pretrained encoder's layers."""
    return TransformerLayer({"self_attn": self_attention_block(cfg, norm_eps),
                             "ffn": feed_forward_block(cfg, activation, norm_eps)})


def decoder_layer(cfg: ModelConfig) -> TransformerLayer:
    return TransformerLayer({"self_attn": self_attention_block(cfg), "cross_attn": cross_attention_block(cfg),
                             "ffn": feed_forward_block(cfg)})


class TransformerStack(nn.Module):
    """N layers, plus a final LayerNorm (`final_norm`) in pre-LN mode only (post-LN outputs are normalised already)."""

    def __init__(self, layers: list[TransformerLayer], d_model: int, pre_norm: bool):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS) if pre_norm else None

    def new_cache(self, inputs: LayerInputs) -> list[LayerCache]:
        return [layer.new_cache(inputs) for layer in self.layers]

    def forward(self, x: Tensor, inputs: LayerInputs, cache: Optional[list[LayerCache]] = None) -> Tensor:
        if cache is None:
            return run_layers(self.layers, x, inputs, self.finish)
        for index, layer in enumerate(self.layers):  # incremental decoding
            x = layer(x, inputs, cache[index])
        return self.finish(x)

    def run_layers(self, x: Tensor, inputs: LayerInputs, start: int = 0, stop: Optional[int] = None) -> Tensor:
        """Layers `start`..`stop`-1 only, without a cache and without the final LayerNorm: for an encoder
        that changes the sequence between layers (Ma et al. 2020 cut out the current sentence after
        the bottom layers, `models/flat.py`); `finish` then applies what `forward` ends with."""
        return run_layers(self.layers[start:stop], x, inputs)

    def finish(self, x: Tensor) -> Tensor:
        """The stack's output from the last layer's: the final LayerNorm in pre-LN mode, else `x`."""
        return x if self.final_norm is None else self.final_norm(x)


def run_layers(layers: Iterable[nn.Module], x: Tensor, inputs: LayerInputs,
               finish: Optional[Callable[[Tensor], Tensor]] = None) -> Tensor:
    """x (B, L, D) through `layers` (no decoding cache), then `finish` (e.g. a final LayerNorm), over the
    real positions only when `inputs.self_mask` leaves enough of them padded (`Packing.of_mask`)."""
    packing = Packing.of_mask(inputs.self_mask, x)
    if packing is not None:
        x, inputs = packing.pack(x), dataclasses.replace(inputs, packing=packing)  # x: (N, D)
    for layer in layers:
        if packing is None or getattr(layer, "packable", False):
            x = layer(x, inputs)
        else:  # a layer that needs the rows laid out: (N, D) -> (B, L, D) -> (N, D)
            x = packing.pack(layer(packing.unpack(x), inputs.unpacked()))
    if finish is not None:
        x = finish(x)
    return x if packing is None else packing.unpack(x)  # (B, L, D)
