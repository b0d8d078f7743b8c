"""Donato, Yu & Dyer 2021, "Diverse Pretrained Context Encodings Improve Document Translation"
(docs/papers/donato2021.md sections 2-4): the sentence Transformer with a parallel attention stack
beside a sublayer of every encoder and decoder layer, over frozen pretrained encodings.

    memories, D4/D18:   M_k = dropout(LN(Enc_k(stream_k) W_k + b_k))   one frozen encoder run per
                        stream (`context.streams`), its last layer at every position, one
                        projection per stream to d_model, shared by every layer
    encoder layer:      R = self_attn block(E),  S = AttnBlock(M_K, M_K, ... AttnBlock(M_1, M_1, E))
                        T = DropBranch(R, S) in training, 1/2 (R + S) in evaluation;  then the FFN
    decoder layer, D3:  the stack beside the encoder-decoder attention, queried by the
                        self-attention block's output
    AttnBlock(K, V, Q) = LN(Attn(K, V, Q)) + Q   (D1; `nn/parallel_stack.py`)

`model.stack` lists the blocks in order, each a (stream, encoder) pair: BERT-fused (document) is
[B_s(p,c)], Multi-source [B_s(c), P_s(c)], Multi-context [B_s(p,c), B_s(c,n), P_s(3p,c,3n)]. A
stream read by no neighbour (B_s(c), P_s(c)) is source enrichment: its CXMI is 0 by construction.
`model.context_encoders` names the encoders: a BERT-style checkpoint (`nn/pretrained.py`'s names),
whose sizes and layout are read when the config is composed, or the same modules at their seeded
random start (`random_weights`, NOT IN PAPER: the control that tells pretraining from capacity).

Every encoder is a `FrozenRowEncoder` (`nn/frozen.py`): evaluation mode, no gradient, never unfrozen
by a stage, and each distinct stream row encoded once per process (later epochs read its features
back; a control's rows are other rows); `load_pretrained` copies the checkpoints in when a stage
starts. The three-stage recipe freezes by
glob: stage 1 the Transformer, stage 2 `STACK_GLOBS` only (the new blocks and projections), stage 3
appends one block (reading D13: last in the stack) and trains it alone.

Parameter names: the Transformer's, so a stage-1 checkpoint loads with only the new tensors missing;
`context_encoders.<name>.module.*` (frozen), `memory_proj.<stream>.*`, and per layer
`{encoder,decoder}.layers.<i>.context_stack.blocks.<k>.*` with the buffer `...drop_branch.draws`.
DropBranch draws come from `drop_branch_seed` (the preset sets it to `train.seed`), the layer
(encoder layers 0..N-1, decoder layers N..N+M-1) and the pass count: independent per layer and
repeated after a resume.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from torch import Tensor, nn

from lightning_docmt.batch import PAD_ID
from lightning_docmt.config.pretrained_files import PretrainedLayout, as_layout
from lightning_docmt.config.registry import register_arch
from lightning_docmt.data.streams import stream_keys
from lightning_docmt.data.vocab.wordpiece import WordPieceVocab
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.models.transformer import TransformerConfig, TransformerSeq2Seq
from lightning_docmt.nn.attention import AttentionMemory, key_mask
from lightning_docmt.nn.frozen import FrozenRowEncoder
from lightning_docmt.nn.layers import LayerInputs
from lightning_docmt.nn.memory import MemoryProjection
from lightning_docmt.nn.parallel_stack import ContextStack, ParallelStackLayer
from lightning_docmt.nn.pretrained import PretrainedEncoder
from lightning_docmt.nn.seq2seq import EncoderState

STACK_GLOBS = ["*.context_stack.*", "memory_proj.*"]
"""fnmatch globs of what the stack adds to the Transformer (stage 2 trains exactly these)."""


@dataclass
class ContextEncoderConfig:
    """A frozen context encoder (`model.context_encoders.<name>`)."""

    checkpoint: str = ""  # a BERT-style checkpoint: built-in name (minilm), directory, local hub cache name
    random_weights: bool = False  # NOT IN PAPER: the same modules frozen at their seeded random start
    # Filled in from the checkpoint's config.json when the config is composed; not set by hand.
    width: int = 0
    heads: int = 0
    ffn_dim: int = 0
    layers: int = 0
    layout: Optional[PretrainedLayout] = None


@dataclass
class StackBlockConfig:
    """One block of the stack: the stream it reads, encoded by one of `model.context_encoders`."""

    stream: str = ""
    encoder: str = ""


@dataclass
class PasConfig(TransformerConfig):
    """The Transformer's options plus the stack, its encoders and where it branches."""

    arch: str = "pas"
    context_encoders: dict[str, ContextEncoderConfig] = field(default_factory=dict)
    stack: list[StackBlockConfig] = field(default_factory=list)
    stack_encoder: bool = True  # a stack beside each encoder layer's self-attention
    stack_decoder: bool = True  # a stack beside each decoder layer's encoder-decoder attention (D3)
    memory_norm: bool = True  # reading D4: the projection's LayerNorm
    drop_branch_seed: int = 0  # the DropBranch draws' seed (preset: train.seed)


def memory_name(stream: str) -> str:
    """The name under which the stack's blocks find a stream's memory in `LayerInputs.memories`: its
    ids' batch key."""
    return stream_keys(stream)[0]


@dataclass
class PasEncoderState(EncoderState):
    """The encoder output plus the projected stream memories (batch-first: beam search reorders them)."""

    streams: dict[str, AttentionMemory] = field(default_factory=dict)

    def attention_memories(self) -> dict[str, AttentionMemory]:
        return {**super().attention_memories(), **self.streams}


def stream_encoders(cfg: PasConfig) -> dict[str, str]:
    """stream -> the encoder that reads it, in order of first use; a stream has one encoder (its
    tokenizer is that encoder's)."""
    if not cfg.stack:
        raise DocMTInputError("names no block: list the (stream, encoder) blocks of the stack", key="model.stack")
    if not (cfg.stack_encoder or cfg.stack_decoder):
        raise DocMTInputError("the stack branches nowhere: set model.stack_encoder or model.stack_decoder",
                              key="model.stack_encoder")
    readers: dict[str, str] = {}
    for index, block in enumerate(cfg.stack):
        if block.encoder not in cfg.context_encoders:
            raise DocMTInputError(f"'{block.encoder}' is not one of model.context_encoders "
                                  f"({', '.join(cfg.context_encoders) or 'none'})", key=f"model.stack.{index}.encoder")
        if readers.setdefault(block.stream, block.encoder) != block.encoder:
            raise DocMTInputError(f"stream '{block.stream}' is read by encoders '{readers[block.stream]}' and "
                                  f"'{block.encoder}'; a stream has one encoder", key=f"model.stack.{index}.encoder")
    return readers


def context_encoder(name: str, cfg: ContextEncoderConfig) -> PretrainedEncoder:
    """The encoder's modules, of its checkpoint's sizes (filled in when the config was composed)."""
    if cfg.layout is None or cfg.width < 1:
        raise DocMTInputError("has no sizes: build the config with config.composition.compose, which reads "
                              "the checkpoint's config.json", key=f"model.context_encoders.{name}")
    return PretrainedEncoder(as_layout(cfg.layout), cfg.width, cfg.heads, cfg.ffn_dim, cfg.layers)


@register_arch("pas", PasConfig)
class ParallelStackSeq2Seq(TransformerSeq2Seq):
    """`TransformerSeq2Seq` whose layers run a `ContextStack` beside a sublayer (`ParallelStackLayer`).

    The decoder-side methods are the Transformer's: the stack's blocks read the stream memories
    through `PasEncoderState.attention_memories()`, and their keys/values are static decoding caches
    built once by `init_cache`, like the encoder-decoder attention's.
    """

    reads_context = True

    @classmethod
    def streams_read(cls, model: Mapping[str, Any]) -> frozenset[str]:
        """The streams of the stack's blocks."""
        return frozenset(block["stream"] for block in model.get("stack") or [])

    def __init__(self, cfg: PasConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__(cfg, src_vocab_size, tgt_vocab_size)
        self.readers = stream_encoders(cfg)
        self.context_encoders = nn.ModuleDict({name: FrozenRowEncoder(context_encoder(name, cfg.context_encoders[name]))
                                               for name in dict.fromkeys(self.readers.values())})
        self.memory_proj = nn.ModuleDict({  # reading D4: one projection per stream
            stream: MemoryProjection(self.context_encoders[encoder].module.width, cfg.d_model,
                                     layer_norm=cfg.memory_norm, dropout=cfg.dropout)
            for stream, encoder in self.readers.items()})
        memories = [memory_name(block.stream) for block in cfg.stack]

        def stack(layer: int) -> ContextStack:
            return ContextStack(cfg.d_model, cfg.heads, memories, layer, seed=cfg.drop_branch_seed,
                                attn_dropout=cfg.attn_dropout, dropout=cfg.dropout)

        if cfg.stack_encoder:
            for i, layer in enumerate(self.encoder.layers):
                self.encoder.layers[i] = ParallelStackLayer(layer, "self_attn", stack(i))
        if cfg.stack_decoder:  # reading D3
            for i, layer in enumerate(self.decoder.layers):
                self.decoder.layers[i] = ParallelStackLayer(layer, "cross_attn", stack(cfg.enc_layers + i))

    def load_pretrained(self, src_vocab: Any) -> list[str]:
        """The Transformer's pretrained encoder, if any, then every context encoder's checkpoint
        (none for `random_weights`); returns the parameter names set."""
        names = super().load_pretrained(src_vocab)
        for name, frozen in self.context_encoders.items():
            cfg = self.cfg.context_encoders[name]
            if cfg.random_weights:
                continue
            key = f"model.context_encoders.{name}.checkpoint"
            ids = WordPieceVocab.from_pretrained(cfg.checkpoint, key=key).pretrained_ids
            names += [f"context_encoders.{name}.module.{n}" for n in frozen.module.load(cfg.checkpoint, ids, key)]
            frozen.reset()  # features computed before were the random start's
        return names

    def stream_memories(self, batch: dict[str, Tensor]) -> dict[str, AttentionMemory]:
        """Every stream's memory (B, L_k, D): its frozen encoder's last layer, projected."""
        memories = {}
        for stream, encoder in self.readers.items():
            ids_key, types_key, pad_key = stream_keys(stream)
            if ids_key not in batch:
                raise DocMTInputError(f"model.stack reads stream '{stream}', which the batches do not carry",
                                      key=f"context.streams.{stream}")
            states = self.context_encoders[encoder](batch[ids_key], batch[types_key], batch[pad_key])  # (B, L, W)
            memories[memory_name(stream)] = self.memory_proj[stream](states, batch[pad_key])
        return memories

    def encode(self, batch: dict[str, Tensor]) -> PasEncoderState:
        streams = self.stream_memories(batch)
        tokens = self.source_tokens(batch)
        pad = tokens.eq(PAD_ID)  # (B, S)
        memory = self.encoder(self.src_embed(tokens), LayerInputs(self_mask=key_mask(pad), memories=streams))
        return PasEncoderState(memory=memory, memory_pad=pad, streams=streams)
