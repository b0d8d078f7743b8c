"""The optimizer a stage builds (`DocMTModule.build_optimizer`): PyTorch's multi-tensor updates,
with the numbers of its one-parameter-at-a-time loop."""

from __future__ import annotations

import pytest
import torch

from lightning_docmt.training.module import DocMTModule
from tests.helpers.grad_update import module_config
from tests.helpers.model_inputs import VOCAB


@pytest.mark.parametrize("kind", ["adam", "adagrad"])
def test_the_optimizer_updates_every_parameter_at_once_with_the_numbers_of_one_at_a_time(kind):
    """Three updates (random gradients, two groups at their own scheduled lr, weight decay on) move
    every parameter and give bit for bit the weights of the same optimizer looping over the
    parameters (`foreach=False`, PyTorch's choice on a CPU)."""
    cfg = module_config("transformer")
    cfg["train"]["optim"].update(optimizer=kind, weight_decay=1e-4)
    torch.manual_seed(0)
    module = DocMTModule(cfg, VOCAB, VOCAB)
    params = [p for p in module.parameters() if p.requires_grad]
    half = len(params) // 2
    optimizer, scheduler = module.build_optimizer([(params[:half], 1e-3), (params[half:], 3e-3)], stage_steps=10)
    assert all(group["foreach"] for group in optimizer.param_groups)
    copies = [p.detach().clone().requires_grad_() for p in params]
    looping = type(optimizer)([{"params": copies[:half]}, {"params": copies[half:]}],
                              **{**optimizer.defaults, "foreach": False})
    for step in range(3):
        generator = torch.Generator().manual_seed(step)
        for p, c in zip(params, copies):
            p.grad = torch.randn(p.shape, generator=generator)
            c.grad = p.grad.clone()
        for mine, theirs in zip(optimizer.param_groups, looping.param_groups):
            theirs["lr"] = mine["lr"]  # the schedule's lr of this update
        before = [p.detach().clone() for p in params]
        optimizer.step()
        looping.step()
        scheduler.step()
        assert all(torch.equal(p, c) for p, c in zip(params, copies)), step
        assert not any(torch.equal(p, b) for p, b in zip(params, before)), step  # every parameter moved
