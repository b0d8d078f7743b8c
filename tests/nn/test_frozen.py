"""`Frozen`: a module that never trains (Donato et al. 2021's context encoders, `nn/frozen.py`)."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from lightning_docmt.callbacks.staged_unfreezing import StagedUnfreezing
from lightning_docmt.nn.frozen import Frozen, frozen_parameter_names


def encoder() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 8))


def test_two_passes_in_training_mode_give_the_same_features_and_no_graph():
    torch.manual_seed(0)
    model = nn.ModuleDict({"frozen": Frozen(encoder()), "head": nn.Linear(8, 2)}).train()
    x = torch.randn(4, 8, requires_grad=True)
    first, second = model["frozen"](x), model["frozen"](x)
    assert torch.equal(first, second)  # dropout off although the model is in training mode
    assert not first.requires_grad and model["frozen"].training and not model["frozen"].module.training
    assert model["head"].training
    plain = encoder().train()
    plain.load_state_dict(model["frozen"].module.state_dict())
    assert not torch.equal(plain(x), plain(x))  # the same encoder unwrapped draws dropout masks
    assert all(not p.requires_grad for p in model["frozen"].parameters())


def test_no_trainable_glob_or_milestone_makes_a_frozen_encoder_trainable():
    model = nn.ModuleDict({"context": Frozen(encoder()), "head": nn.Linear(8, 2)})
    assert frozen_parameter_names(model) == {"context.module.0.weight", "context.module.0.bias",
                                             "context.module.2.weight", "context.module.2.bias"}
    module = SimpleNamespace(model=model, extra_param_groups=[])
    policy = StagedUnfreezing("s", trainable=["*"])
    policy.apply(module)
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {"head.weight", "head.bias"}
