"""The model interface every architecture implements; decoding and scoring use nothing else.

    encode(batch) -> EncoderState                    run once per sentence (context encodings included)
    decode_hidden(tgt_in (B, T), state) -> (B, T, D)  teacher-forced pass with a causal mask
    output: nn.Linear (D -> V, no bias)               logits = output(hidden); the training loss
                                                      is fused with it (`output_loss.py`)
    init_cache(state) -> DecoderCache                 cross-attention keys/values projected here, once
    decode_step(tokens (B, 1), state, cache) -> logits (B, V)   appends to the cache in place
    decode(tgt_in, state) = output(decode_hidden(tgt_in, state)) -> logits (B, T, V)
    forward(batch) = decode(batch["tgt_in"], encode(batch))

Training hooks (`nn/model_hooks.py`; the defaults are the shared recipe): `loss_terms`,
`optimizer_phases`, and `carries_state` with `initial_carry`; `load_pretrained` initialises from
pretrained checkpoints when a stage starts (`nn/pretrained.py`).

`EncoderState` and `DecoderCache` are dataclasses; architectures subclass them to add fields
(e.g. a context encoding and its padding mask). `index_select(index)` selects rows of the batch
dimension of every field, recursively, so every tensor field must be batch-first. Plain numbers
and strings are copied unchanged (e.g. the cache's step counter). A nested dataclass with a true
`static` attribute is left unchanged by `DecoderCache.index_select(index, include_static=False)`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Protocol, TypeVar

import torch
from torch import Tensor, nn

from lightning_docmt.nn.attention import AttentionCache, AttentionMemory
from lightning_docmt.nn.model_hooks import LossTerms, OptimizerPhase, OutputLoss

T = TypeVar("T")
PLACEHOLDER_VOCAB = 16  # vocabulary size of the models `parameter_names` builds


def select_rows(value: T, index: Tensor, include_static: bool = True, shared: int = 1) -> T:
    """Rows `index` of every batch-first tensor inside `value` (tensors, dataclasses, dicts, lists,
    tuples); an `AttentionCache` selects its own (lazily; a static one stays as it is unless
    `include_static`, and keeps one row for the `shared` consecutive rows of a beam expansion)."""
    if isinstance(value, Tensor):
        return value.index_select(0, index)
    if isinstance(value, AttentionCache):
        return value.select_rows(index, include_static, shared)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{
            f.name: select_rows(getattr(value, f.name), index, include_static, shared)
            for f in dataclasses.fields(value) if f.init})
    if isinstance(value, dict):
        return {key: select_rows(item, index, include_static, shared) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(select_rows(item, index, include_static, shared) for item in value)
    return value


@dataclass
class EncoderState:
    """What the decoder reads: `memory` (B, S, D) and `memory_pad` (B, S) bool (True = padding).

    Subclasses add arch-specific fields and extend `attention_memories` with the memories their
    cross-attention sublayers read (e.g. Zhang et al. 2018's context encoding C^(Nc)).
    """

    memory: Tensor
    memory_pad: Tensor

    def attention_memories(self) -> dict[str, AttentionMemory]:
        return {"memory": AttentionMemory.from_padding(self.memory, self.memory_pad)}

    def index_select(self, index: Tensor) -> EncoderState:
        """Rows `index` of the batch (beam expansion, dropping finished sentences)."""
        return select_rows(self, index)


@dataclass
class DecoderCache:
    """Incremental decoding state: per decoder layer, the attention caches by sublayer name.

    `step` is the number of target positions already consumed (the position of the next token).
    """

    layers: list[dict[str, Any]] = field(default_factory=list)
    step: int = 0

    def index_select(self, index: Tensor, include_static: bool = True, shared: int = 1) -> DecoderCache:
        """Rows `index` of the batch. `include_static=False` keeps the static (cross-attention) caches as
        they are, which is valid only when every row is replaced by a row of the same sentence (beam
        reordering). `shared` > 1 marks a beam expansion, `index` repeating each row `shared` times in a
        row: a static cache then keeps one row per sentence, which its `shared` rows read
        (`nn.attention.grouped_query_attention`), instead of `shared` copies of it."""
        return select_rows(self, index, include_static, shared)


class IncrementalSeq2Seq(Protocol):
    """What the search functions need from a model."""

    def encode(self, batch: dict[str, Tensor]) -> EncoderState: ...

    def init_cache(self, state: EncoderState) -> DecoderCache: ...

    def decode_step(self, tokens: Tensor, state: EncoderState, cache: DecoderCache) -> Tensor: ...


class Seq2SeqModel(nn.Module):
    """Base class of every architecture: subclasses set `output` and implement the four methods below.

    Constructed as `Model(typed_config, src_vocab_size, tgt_vocab_size)` by the generic
    `training.module.DocMTModule`; plain PyTorch, no Lightning.
    """

    output: nn.Linear  # the bias-free output projection D -> V
    reads_context: ClassVar[bool] = True  # False: `context.*` cannot change the weights (stage reuse)
    # True: the model reads `batch[CARRY_KEY]` and returns `LossTerms.carry` (needs data.document_order)
    carries_state: ClassVar[bool] = False

    @classmethod
    def parameter_names(cls, cfg: Any) -> list[str]:
        """The names of the parameters a model built from `cfg` has (for checking freezing globs
        before anything trains). Names do not depend on the vocabulary sizes, so the default builds
        the model on the meta device (no memory, no initialisation) with placeholder sizes; a model
        whose constructor loads pretrained weights overrides this so that nothing is loaded."""
        with torch.device("meta"):
            model = cls(cfg, PLACEHOLDER_VOCAB, PLACEHOLDER_VOCAB)
        return [name for name, _ in model.named_parameters()]

    @classmethod
    def reads_context_with(cls, model: Mapping[str, Any]) -> bool:
        """Whether a model built from the `model.*` settings `model` reads any context, i.e. whether
        `context.*` can change its weights (stage reuse, `training/stages.stage_config`); default:
        the class's `reads_context`."""
        return cls.reads_context

    @classmethod
    def streams_read(cls, model: Mapping[str, Any]) -> frozenset[str]:
        """The named streams (`context.streams`) a model built from the `model.*` settings `model`
        reads; a stage's batches carry only these (`training/stages.stage_config`). Default: none."""
        return frozenset()

    @classmethod
    def optimizer_phases(cls, cfg: Any) -> list[OptimizerPhase]:
        """The optimizers that take turns (`OptimizerPhase`) for a model built from `cfg`; none: one
        optimizer over every trainable parameter."""
        return []

    def loss_terms(self, batch: dict[str, Tensor], output_loss: OutputLoss,
                   phase: str | None = None) -> LossTerms:
        """The loss of `batch` in optimizer phase `phase` (None: no phases, or evaluation). Default,
        in every phase: the label-smoothed cross entropy of teacher forcing."""
        hidden = self.decode_hidden(batch["tgt_in"], self.encode(batch))  # (B, T, D)
        return LossTerms(*output_loss(hidden, batch["tgt_out"]))

    def load_pretrained(self, src_vocab: Any) -> list[str]:
        """Initialise parameters from the pretrained checkpoints the config names, when a stage starts
        training (`training/run.py`, before any `init_from` checkpoint, whose tensors then win);
        returns the names of the parameters set. `src_vocab` is the data's source vocabulary.
        Default: nothing to load. The constructor itself never loads weights, so a trained checkpoint
        rebuilds its model without the pretrained files."""
        return []

    def initial_carry(self, batch: dict[str, Tensor]) -> Any:
        """Models with `carries_state`: the state a document's first sentence receives, for every
        row of `batch`. Batch-first tensors (or tuples, lists, dicts, dataclasses of them) whose
        shapes after the batch dimension are the same in every batch: carried rows and reset rows
        are mixed in one batch."""
        raise NotImplementedError(f"{type(self).__name__} carries no state")

    def output_carry(self, batch: dict[str, Tensor], hypotheses: list[list[int]]) -> Any:
        """Models with `carries_state` whose state depends on the target: the state each row hands to
        the next sentence of its document when `hypotheses` (token ids, no `<bos>`/`<eos>`) were
        output for `batch`, so that decoding reads what the model translated, not the reference.
        None (the default): the teacher-forced carry of `loss_terms` stands (e.g. source states)."""
        return None

    def kept_context_tokens(self, batch: dict[str, Tensor]) -> list[list[int]] | None:
        """Per row of `batch`, the ids of the context tokens a hard selection keeps for it, in order
        (`docmt translate --explain`); None (the default): the model selects no tokens."""
        return None

    def encode(self, batch: dict[str, Tensor]) -> EncoderState:
        raise NotImplementedError

    def decode_hidden(self, tgt_in: Tensor, state: EncoderState) -> Tensor:
        raise NotImplementedError

    def decode(self, tgt_in: Tensor, state: EncoderState) -> Tensor:
        """Teacher-forced logits (B, T, V)."""
        return self.output(self.decode_hidden(tgt_in, state))

    def init_cache(self, state: EncoderState) -> DecoderCache:
        raise NotImplementedError

    def decode_step(self, tokens: Tensor, state: EncoderState, cache: DecoderCache) -> Tensor:
        raise NotImplementedError

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """Teacher-forced logits (B, T, V) of `batch["tgt_out"]` given `batch["tgt_in"]`."""
        return self.decode(batch["tgt_in"], self.encode(batch))
