"""The parallel attention stack of Donato, Yu & Dyer 2021, "Diverse Pretrained Context Encodings
Improve Document Translation" (docs/papers/donato2021.md section 2).

In a layer, beside one of its sublayers (the branch point: the encoder's self-attention; the
decoder's encoder-decoder attention, reading D3), a stack of attention blocks reads external
memories M_1..M_K (BERT or PEGASUS encodings projected to the model width, `nn/memory.py`), each
block's queries the previous block's output:

    R   = the branch point's block(X)            X: the branch point's input (B, T, D)
    S_1 = AttnBlock(M_1, M_1, X)
    S_k = AttnBlock(M_k, M_k, S_{k-1}),   k = 2..K
    T   = DropBranch(R, S_K) in training,   1/2 (R + S_K) in evaluation
    AttnBlock(K, V, Q) = LN(Attn(K, V, Q)) + Q
    DropBranch(R, S)   = R if u >= 1/2 else S,   u ~ U(0, 1)

and the layer goes on from T (its FFN). Readings (docs/papers/donato2021.md section 7):
- D1: AttnBlock is taken literally, the LayerNorm on the attention output and the residual adding
  the query after it; dropout (whose place the paper does not give) acts on the attention output,
  before the LayerNorm, as in the Transformer's own sublayers.
- D2: one u per layer and training forward pass, shared by the batch (BERT-fused's drop-net).
  DropBranch returns R or S bit for bit, never a mixture; the mean is for evaluation only.
  The draws are a function of (`seed`, the layer, the number of training passes so far), and that
  number is a buffer of the module: a resumed run draws what the uninterrupted run would have.

In training only the drawn branch is computed (half of the stack's and of the branch point's work
is saved); the trainable parameters of the branch not drawn are added to its output with weight 0,
so they get a zero gradient rather than none (DDP needs every trainable parameter in the graph;
BERT-fused's drop-net multiplies by 0 or 1 for the same reason). Adding 0 leaves the output as it
was, so the step's gradients are those of computing both branches and keeping one; only the random
draws of the branch not computed (its dropout) are not made.
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

import torch
from torch import Tensor, nn

from lightning_docmt.nn.attention import AttentionCache, MultiHeadAttention
from lightning_docmt.nn.layers import LayerCache, LayerInputs, TransformerLayer
from lightning_docmt.nn.residual import LAYER_NORM_EPS

STACK = "context_stack"
"""The name of the stack's entry in a `ParallelStackLayer` (parameters `layers.<i>.context_stack.*`)."""


class AttnBlock(nn.Module):
    """`AttnBlock(K, V, Q) = LN(dropout(Attn(K, V, Q))) + Q` over the memory `inputs.memories[memory]`
    (reading D1). Parameters: `attn.*` (Xavier-uniform, `nn/attention.py`) and `norm.*`."""

    def __init__(self, d_model: int, heads: int, memory: str, attn_dropout: float = 0.0, dropout: float = 0.0):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, heads, attn_dropout)
        self.norm = nn.LayerNorm(d_model, eps=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(dropout)
        self.memory = memory

    def new_cache(self, inputs: LayerInputs) -> AttentionCache:
        """The memory's keys and values, projected once for every decoding step (in training once per
        forward pass), from its real positions when its padding packs (`AttentionMemory.packing`)."""
        return self.attn.memory_cache(inputs.memories[self.memory])

    def forward(self, query: Tensor, inputs: LayerInputs, cache: Optional[AttentionCache] = None) -> Tensor:
        """query (B, T, D) -> (B, T, D)."""
        if cache is None:
            cache = self.new_cache(inputs)
        attended = self.attn(query, None, inputs.memories[self.memory].mask, False, cache)  # (B, T, D)
        return self.norm(self.dropout(attended)) + query


def branch_draw(seed: int, layer: int, draw: int) -> float:
    """u ~ U(0, 1) for `layer`'s `draw`-th training pass: a function of its three arguments only
    (blake2b of them, 53 bits), so layers draw independently and a resumed run repeats the draws."""
    digest = hashlib.blake2b(f"{seed}:{layer}:{draw}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "little") >> 11) / float(1 << 53)


EVALUATION_RULES = ("mean", "original", "stack")
"""What DropBranch returns in evaluation: 1/2 (R + S) (reading D2, the model's own rule), R alone or
S alone (the diagnostic of `evaluation/branch_usage.py`)."""


class DropBranch(nn.Module):
    """`DropBranch(R, S)` in training, `1/2 (R + S)` in evaluation (reading D2).

    `draws` (a buffer, saved with the model) counts the training passes of this layer so far.
    `evaluation_rule` (one of EVALUATION_RULES, not saved; `branch_rule` sets it) is "mean" but
    while a diagnostic decodes with one branch alone; training ignores it.
    """

    def __init__(self, layer: int, seed: int = 0):
        super().__init__()
        self.layer, self.seed = layer, seed
        self.evaluation_rule = "mean"
        self.register_buffer("draws", torch.zeros((), dtype=torch.long))

    def keeps_original(self) -> bool:
        """Draw the next u: True keeps R (u >= 1/2), False takes S. Counts the draw."""
        u = branch_draw(self.seed, self.layer, int(self.draws))
        self.draws += 1
        return u >= 0.5

    def forward(self, original: Callable[[], Tensor], stack: Callable[[], Tensor]) -> Tensor:
        """T (B, T, D) from the calls that compute R and S (B, T, D): in training the drawn one alone,
        its output bit for bit (the other is not called); in evaluation 1/2 (R + S), or the one
        branch that `evaluation_rule` names."""
        if self.training:
            return original() if self.keeps_original() else stack()
        if self.evaluation_rule == "original":
            return original()
        if self.evaluation_rule == "stack":
            return stack()
        return 0.5 * (original() + stack())


def drop_branches(model: nn.Module) -> list[DropBranch]:
    """Every DropBranch of `model` (none: it has no parallel attention stack)."""
    return [module for module in model.modules() if isinstance(module, DropBranch)]


@contextmanager
def branch_rule(model: nn.Module, rule: str) -> Iterator[None]:
    """Inside the block, every DropBranch of `model` evaluates by `rule` (EVALUATION_RULES); after
    it, by the mean again, also when the block raises."""
    if rule not in EVALUATION_RULES:
        raise ValueError(f"no evaluation rule {rule!r}: one of {', '.join(EVALUATION_RULES)}")
    branches = drop_branches(model)
    for branch in branches:
        branch.evaluation_rule = rule
    try:
        yield
    finally:
        for branch in branches:
            branch.evaluation_rule = "mean"


def with_zero_gradient(out: Tensor, other: nn.Module) -> Tensor:
    """`out` + 0 x (the sum of `other`'s trainable parameters): the same values, and `other`'s
    parameters in the graph with a zero gradient (`other`: the branch that was not computed).
    Without gradients or trainable parameters, `out` itself."""
    trainable = [p for p in other.parameters() if p.requires_grad]
    if not trainable or not torch.is_grad_enabled():
        return out
    return out + 0.0 * torch.stack([p.sum() for p in trainable]).sum()


class ContextStack(nn.Module):
    """`S_K` from the branch point's input: the `AttnBlock`s in order, then `DropBranch` with R.

    Parameters: `blocks.<k>.*` (one block per memory, in the order given) and the buffer
    `drop_branch.draws`.
    """

    def __init__(self, d_model: int, heads: int, memories: list[str], layer: int, *, seed: int = 0,
                 attn_dropout: float = 0.0, dropout: float = 0.0):
        super().__init__()
        if not memories:
            raise ValueError("a context stack needs at least one memory")
        self.blocks = nn.ModuleList(AttnBlock(d_model, heads, memory, attn_dropout, dropout) for memory in memories)
        self.drop_branch = DropBranch(layer, seed)

    def new_cache(self, inputs: LayerInputs) -> list[AttentionCache]:
        return [block.new_cache(inputs) for block in self.blocks]

    def forward(self, x: Tensor, inputs: LayerInputs, cache: Optional[list[AttentionCache]] = None) -> Tensor:
        """S_K (B, T, D) from the branch point's input x (B, T, D)."""
        for index, block in enumerate(self.blocks):
            x = block(x, inputs, None if cache is None else cache[index])
        return x


class ParallelStackLayer(TransformerLayer):
    """A `TransformerLayer` whose sublayer `branch_at` runs beside a `ContextStack` (entry `STACK`,
    which the sublayer loop skips): T = DropBranch(branch_at(X), stack(X)), and the layer goes on
    from T. The other sublayers and their names are the layer's own, so a sentence Transformer's
    checkpoint loads into it with only the stack's parameters missing. It takes its rows laid out
    (B, T, D), never packed (`nn/layers.run_layers`)."""

    packable = False

    def __init__(self, layer: TransformerLayer, branch_at: str, stack: ContextStack):
        super().__init__(dict(layer.items()))
        if branch_at not in self:
            raise KeyError(f"no sublayer {branch_at!r} in {list(self.keys())}")
        self[STACK] = stack
        self.branch_at = branch_at

    def new_cache(self, inputs: LayerInputs) -> LayerCache:
        """The caches of the layer's own sublayers (`ResidualBlock`s, whose `fn` keeps one), and the stack's."""
        caches = {name: block.fn.new_cache(inputs) for name, block in self.items()
                  if name != STACK and hasattr(block.fn, "new_cache")}
        return {**caches, STACK: self[STACK].new_cache(inputs)}

    def forward(self, x: Tensor, inputs: LayerInputs, cache: Optional[LayerCache] = None) -> Tensor:
        stack: ContextStack = self[STACK]
        for name, block in self.items():
            if name == STACK:
                continue
            own_cache = None if cache is None else cache.get(name)
            if name == self.branch_at:  # R = the sublayer over x, S = the stack over the same x
                stack_cache = None if cache is None else cache[STACK]
                x = stack.drop_branch(
                    lambda: with_zero_gradient(block(x, inputs, own_cache), stack),
                    lambda: with_zero_gradient(stack(x, inputs, stack_cache), block))
            else:
                x = block(x, inputs, own_cache)
        return x
