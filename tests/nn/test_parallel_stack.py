"""The parallel attention stack and DropBranch (Donato et al. 2021, `nn/parallel_stack.py`)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from lightning_docmt.config.schema import ModelConfig
from lightning_docmt.nn.attention import AttentionMemory
from lightning_docmt.nn.layers import LayerInputs, decoder_layer, encoder_layer
from lightning_docmt.nn.parallel_stack import (
    STACK,
    AttnBlock,
    ContextStack,
    DropBranch,
    ParallelStackLayer,
    branch_draw,
    branch_rule,
    drop_branches,
)
from lightning_docmt.nn.residual import LAYER_NORM_EPS

D, H = 16, 4
DRAWS = 2000


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def cfg() -> ModelConfig:
    return ModelConfig(d_model=D, heads=H, ffn_dim=32, dropout=0.0)


def memories(batch: int = 2) -> dict[str, AttentionMemory]:
    pad_a = torch.tensor([[False] * 5, [False, False, True, True, True]])
    pad_b = torch.tensor([[False] * 7, [False] * 3 + [True] * 4])
    return {"memory": AttentionMemory.from_padding(torch.randn(batch, 6, D), torch.zeros(batch, 6, dtype=torch.bool)),
            "bert": AttentionMemory.from_padding(torch.randn(batch, 5, D), pad_a),
            "pegasus": AttentionMemory.from_padding(torch.randn(batch, 7, D), pad_b)}


def stacked(layer, branch_at: str, index: int = 0, seed: int = 0) -> ParallelStackLayer:
    return ParallelStackLayer(layer, branch_at, ContextStack(D, H, ["bert", "pegasus"], index, seed=seed))


def test_an_attn_block_is_layer_norm_of_the_attention_plus_its_query():
    block = AttnBlock(D, H, "bert").eval()
    inputs = LayerInputs(memories=memories())
    query = torch.randn(2, 4, D)
    memory = inputs.memories["bert"]
    attended = block.attn(query, memory.states, memory.mask)
    expected = torch.nn.functional.layer_norm(attended, (D,), eps=LAYER_NORM_EPS) + query
    assert torch.allclose(block(query, inputs), expected, atol=1e-6)
    assert {n for n, _ in block.named_parameters()} == {
        "attn.in_proj_weight", "attn.in_proj_bias", "attn.out_proj.weight", "attn.out_proj.bias",
        "norm.weight", "norm.bias"}


def test_the_stack_queries_each_block_with_the_previous_blocks_output():
    stack = ContextStack(D, H, ["bert", "pegasus"], layer=0).eval()
    inputs = LayerInputs(memories=memories())
    x = torch.randn(2, 4, D)
    first, second = stack.blocks
    assert (first.memory, second.memory) == ("bert", "pegasus")
    assert torch.equal(stack(x, inputs), second(first(x, inputs), inputs))


def test_drop_branch_returns_one_branch_bit_for_bit_each_half_the_time_and_each_layer_draws_alone():
    r, s = torch.randn(2, 3, D), torch.randn(2, 3, D)
    first, second = DropBranch(layer=0).train(), DropBranch(layer=1).train()
    takes_stack = []
    for _ in range(DRAWS):
        out_first, out_second = first(lambda: r, lambda: s), second(lambda: r, lambda: s)
        assert torch.equal(out_first, r) or torch.equal(out_first, s)  # never a mixture
        takes_stack.append((torch.equal(out_first, s), torch.equal(out_second, s)))
    share = sum(a for a, _ in takes_stack) / DRAWS
    sd = math.sqrt(0.25 / DRAWS)
    assert abs(share - 0.5) <= 4 * sd, share
    agree = sum(a == b for a, b in takes_stack) / DRAWS  # independent layers agree half the time
    assert abs(agree - 0.5) <= 4 * sd, agree
    assert int(first.draws) == DRAWS


def test_in_evaluation_drop_branch_is_the_mean_of_the_branches_and_draws_nothing():
    r, s = torch.randn(2, 3, D), torch.randn(2, 3, D)
    drop = DropBranch(layer=0).eval()
    branches = (lambda: r, lambda: s)
    assert torch.equal(drop(*branches), 0.5 * (r + s)) and torch.equal(drop(*branches), drop(*branches))
    assert int(drop.draws) == 0


def test_a_branch_rule_evaluates_every_layer_by_one_branch_alone_until_its_block_ends():
    """The diagnostic of evaluation/branch_usage.py: R alone, S alone, and the mean again after the
    block (also when it raises); training still draws, whatever the rule."""
    r, s = torch.randn(2, 3, D), torch.randn(2, 3, D)
    model = torch.nn.ModuleList([DropBranch(layer=0), torch.nn.Linear(2, 2), DropBranch(layer=1)]).eval()
    assert drop_branches(model) == [model[0], model[2]] and drop_branches(torch.nn.Linear(2, 2)) == []
    for rule, expected in (("original", r), ("stack", s)):
        with branch_rule(model, rule):
            assert all(torch.equal(drop(lambda: r, lambda: s), expected) for drop in drop_branches(model))
        assert all(torch.equal(drop(lambda: r, lambda: s), 0.5 * (r + s)) for drop in drop_branches(model))
    with pytest.raises(RuntimeError, match="inside"), branch_rule(model, "stack"):
        raise RuntimeError("inside")
    assert all(drop.evaluation_rule == "mean" for drop in drop_branches(model))
    with branch_rule(model, "original"):
        model.train()
        outputs = [model[0](lambda: r, lambda: s) for _ in range(20)]
    assert any(torch.equal(out, s) for out in outputs) and int(model[0].draws) == 20
    with pytest.raises(ValueError, match="no evaluation rule 'both'"), branch_rule(model, "both"):
        pass


def test_the_draws_after_a_resume_are_those_of_the_uninterrupted_run():
    branches = (lambda: torch.zeros(1, 1, 1), lambda: torch.ones(1, 1, 1))
    uninterrupted = DropBranch(layer=3, seed=7).train()
    picks = [float(uninterrupted(*branches)) for _ in range(40)]
    interrupted = DropBranch(layer=3, seed=7).train()
    for _ in range(25):
        interrupted(*branches)
    resumed = DropBranch(layer=3, seed=7).train()
    resumed.load_state_dict(interrupted.state_dict())
    assert [float(resumed(*branches)) for _ in range(15)] == picks[25:]
    other_seed = DropBranch(layer=3, seed=8).train()
    assert [float(other_seed(*branches)) for _ in range(40)] != picks


def test_a_parallel_layer_keeps_the_sentence_layers_names_and_adds_the_stack_beside_its_branch_point():
    plain = encoder_layer(cfg())
    layer = stacked(encoder_layer(cfg()), "self_attn")
    names = {n for n, _ in layer.named_parameters()}
    plain_names = {n for n, _ in plain.named_parameters()}
    assert plain_names <= names
    assert {n.split(".")[0] for n in names - plain_names} == {STACK}
    assert f"{STACK}.blocks.1.attn.in_proj_weight" in names
    assert f"{STACK}.drop_branch.draws" in layer.state_dict()  # saved with the model: resumes draw on
    layer.load_state_dict(plain.state_dict(), strict=False)  # a sentence checkpoint loads into it
    with pytest.raises(KeyError, match="no sublayer"):
        stacked(encoder_layer(cfg()), "cross_attn")


def test_an_encoder_layer_runs_its_ffn_on_the_original_or_the_stack_branch_or_their_mean():
    layer = stacked(encoder_layer(cfg()), "self_attn")
    inputs = LayerInputs(memories=memories())
    x = torch.randn(2, 4, D)
    layer.eval()
    r = layer["self_attn"](x, inputs)
    s = layer[STACK](x, inputs)  # the stack reads the layer's input, not R
    ffn = layer["ffn"]
    assert torch.allclose(layer(x, inputs), ffn(0.5 * (r + s), inputs), atol=1e-6)
    layer.train()
    outputs = {tuple(layer(x, inputs).flatten()[:3].tolist()) for _ in range(40)}
    assert {tuple(ffn(r, inputs).flatten()[:3].tolist()), tuple(ffn(s, inputs).flatten()[:3].tolist())} == outputs


def test_in_training_only_the_drawn_branch_is_computed():
    calls = {"original": 0, "stack": 0}

    def branch(name: str, value: torch.Tensor):
        def compute() -> torch.Tensor:
            calls[name] += 1
            return value
        return compute

    drop = DropBranch(layer=0).train()
    r, s = torch.randn(2, 3, D), torch.randn(2, 3, D)
    outputs = [drop(branch("original", r), branch("stack", s)) for _ in range(20)]
    assert calls["original"] + calls["stack"] == 20 and min(calls.values()) > 0
    assert calls["stack"] == sum(torch.equal(out, s) for out in outputs)
    drop.eval()
    assert torch.equal(drop(branch("original", r), branch("stack", s)), 0.5 * (r + s))
    assert calls["original"] + calls["stack"] == 22  # evaluation computes both


def test_the_drawn_branch_gets_the_gradient_of_the_layer_through_it_and_the_other_one_zeros():
    """DDP requires a gradient for every trainable parameter: the branch not drawn, not computed,
    gets zeros; the drawn branch and the FFN get exactly the gradients of FFN(drawn branch(x))."""
    layer = stacked(encoder_layer(cfg()), "self_attn").train()
    inputs = LayerInputs(memories=memories())
    drawn = []
    for _ in range(6):  # both branches come up in 6 draws of seed 0, layer 0
        x = torch.randn(2, 4, D)
        keeps = branch_draw(0, 0, int(layer[STACK].drop_branch.draws)) >= 0.5
        reference = copy.deepcopy(layer)
        by_hand = reference["ffn"]((reference["self_attn"] if keeps else reference[STACK])(x, inputs), inputs)
        by_hand.sum().backward()
        layer.zero_grad(set_to_none=True)
        out = layer(x, inputs)
        out.sum().backward()
        assert torch.equal(out, by_hand)
        for (name, p), (_, q) in zip(layer.named_parameters(), reference.named_parameters()):
            assert p.grad is not None, name
            if q.grad is None:  # the branch not drawn
                assert name.startswith(STACK if keeps else "self_attn") and not torch.any(p.grad), name
            else:
                assert torch.equal(p.grad, q.grad), name
        drawn.append(keeps)
    assert set(drawn) == {True, False}


def test_incremental_decoding_with_the_stack_equals_the_full_forward():
    """Decoder reading D3: the stack branches off beside the encoder-decoder attention; its blocks'
    memories are static caches, projected once."""
    layer = stacked(decoder_layer(cfg()), "cross_attn").eval()
    mems = memories()
    target = torch.randn(2, 5, D)
    full = layer(target, LayerInputs(causal=True, memories=mems))
    cache = layer.new_cache(LayerInputs(memories=mems))
    assert all(c.static for c in cache[STACK])
    steps = [layer(target[:, t:t + 1], LayerInputs(memories=mems), cache) for t in range(target.size(1))]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
