"""Checks shared by the per-architecture model tests."""

from __future__ import annotations

import torch

from lightning_docmt.data.batch import PAD_ID


def assert_incremental_matches_full(model, batch: dict[str, torch.Tensor]) -> None:
    """Step-by-step decoding with the key/value cache gives the teacher-forced logits."""
    full = model(batch)
    state = model.encode(batch)
    cache = model.init_cache(state)
    steps = [model.decode_step(batch["tgt_in"][:, t:t + 1], state, cache)
             for t in range(batch["tgt_in"].size(1))]
    real = batch["tgt_out"].ne(PAD_ID)
    assert torch.allclose(torch.stack(steps, dim=1)[real], full[real], atol=1e-5)
