"""`Frozen`: a module that never trains (Donato et al. 2021's context encoders, `nn/frozen.py`)."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from lightning_docmt.callbacks.staged_unfreezing import StagedUnfreezing
from lightning_docmt.nn.frozen import (
    Frozen,
    FrozenRowEncoder,
    frozen_parameter_names,
    unfrozen_modules_in_eval,
)


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


class RowEncoder(nn.Module):
    """A toy encoder of padded rows: each position sees its token, its type and the row's mean."""

    def __init__(self):
        super().__init__()
        self.words, self.types, self.mix = nn.Embedding(50, 6), nn.Embedding(2, 6), nn.Linear(12, 6)

    def forward(self, tokens, types, pad):
        x = (self.words(tokens) + self.types(types)).masked_fill(pad[..., None], 0.0)  # (B, L, 6)
        mean = x.sum(1, keepdim=True) / (~pad).sum(1)[:, None, None]
        return self.mix(torch.cat([x, mean.expand_as(x)], -1))  # (B, L, 6)


def rows_batch(rows: list[list[int]], types: list[list[int]] | None = None, width: int | None = None):
    width = width or max(map(len, rows))
    tokens = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    kinds = torch.tensor([t + [0] * (width - len(t)) for t in (types or [[0] * len(r) for r in rows])])
    pad = torch.arange(width)[None] >= torch.tensor([[len(r)] for r in rows])
    return tokens, kinds, pad


def test_a_row_is_encoded_once_and_read_back_bit_for_bit_whatever_its_batch():
    torch.manual_seed(0)
    plain = RowEncoder()
    cached = FrozenRowEncoder(RowEncoder())
    cached.module.load_state_dict(plain.state_dict())
    first = rows_batch([[5, 6, 7], [8, 9]])
    out = cached(*first)
    expected = plain(*first).masked_fill(first[2][..., None], 0)
    assert cached.encoded_rows == 2 and torch.allclose(out, expected, atol=1e-6)
    again = cached(*rows_batch([[8, 9], [5, 6, 7], [8, 9]], width=6))  # other order, padding and partners
    assert cached.encoded_rows == 2  # nothing encoded again
    assert torch.equal(again[1, :3], out[0]) and torch.equal(again[0, :2], out[1, :2]) and not again[0, 2:].any()
    mixed = cached(*rows_batch([[5, 6, 7], [5, 6, 8]]))  # one new row: only it is encoded
    assert cached.encoded_rows == 3 and torch.equal(mixed[0], out[0])
    assert torch.allclose(mixed[1], plain(*rows_batch([[5, 6, 8]]))[0], atol=1e-6)
    typed = cached(*rows_batch([[5, 6, 7]], [[0, 1, 1]]))  # the same ids, other token types: another row
    assert cached.encoded_rows == 4 and not torch.allclose(typed[0], out[0])


def test_loaded_weights_forget_the_features_and_a_full_cache_keeps_encoding():
    cached = FrozenRowEncoder(RowEncoder())
    batch = rows_batch([[5, 6, 7]])
    before = cached(*batch)
    cached.load_state_dict({k: v + 1 for k, v in cached.state_dict().items()})
    after = cached(*batch)
    assert cached.encoded_rows == 2 and not torch.allclose(before, after)
    tiny = FrozenRowEncoder(RowEncoder(), max_bytes=8)  # no row fits
    tiny(*batch), tiny(*batch)
    assert tiny.encoded_rows == 2 and tiny.features == {}


def test_under_a_bfloat16_autocast_features_are_kept_in_bfloat16_apart_from_float32_ones():
    cached = FrozenRowEncoder(RowEncoder())
    batch = rows_batch([[5, 6, 7]])
    full = cached(*batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        half = cached(*batch)
        assert half.dtype == torch.bfloat16 and torch.equal(cached(*batch), half)
    assert cached.encoded_rows == 2 and full.dtype == torch.float32
    assert {v.dtype for v in cached.features.values()} == {torch.float32, torch.bfloat16}


def test_only_modules_in_eval_mode_outside_a_frozen_wrapper_are_named():
    model = nn.ModuleDict({"context": Frozen(encoder()), "head": nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1))})
    model.train()
    assert not model["context"].module.training  # held in eval mode on purpose
    assert unfrozen_modules_in_eval(model) == []
    model["head"][1].eval()  # left in eval by mistake: its dropout is off
    assert unfrozen_modules_in_eval(model) == ["head.1"]
    model.eval()
    assert unfrozen_modules_in_eval(model) == ["", "context", "head", "head.0", "head.1"]
