"""DDP-correct loss normalisation: after one step on 2 ranks (gloo, a real `ddp` launch), the
synchronised gradient equals the single-process gradient of the union of both ranks' batches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from lightning_docmt.config.composition import compose
from lightning_docmt.data.batch import PAD_ID
from lightning_docmt.data.datamodule import DocumentWindowDataModule
from lightning_docmt.training.run import build_module
from tests.ddp_gradient_script import OVERRIDES
from tests.test_ddp import LAUNCH_VARIABLES, REPO

SCRIPT = REPO / "tests" / "ddp_gradient_script.py"


def union(batches: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The rows of every batch in one batch, right-padded to the longest row of each key."""
    merged = {}
    for key in batches[0]:
        parts = [b[key] for b in batches]
        if parts[0].dim() == 2:
            width = max(p.size(1) for p in parts)
            parts = [torch.nn.functional.pad(p, (0, width - p.size(1)), value=PAD_ID) for p in parts]
        merged[key] = torch.cat(parts)  # (B_0 + B_1, ...)
    return merged


def test_the_ddp_gradient_is_the_gradient_of_the_union_batch(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    env.update(PYTHONPATH=str(REPO), WANDB_MODE="disabled", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), str(tmp_path / "cache")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    tokens = [int(r["batch"]["tgt_out"].ne(PAD_ID).sum()) for r in ranks]
    assert tokens[0] != tokens[1]  # so that per-rank normalisation would give another gradient
    for name, grad in ranks[0]["grads"].items():
        assert torch.equal(grad, ranks[1]["grads"][name]), name  # DDP synchronised them

    cfg = compose(None, [*OVERRIDES, f"data.cache_dir={tmp_path / 'cache'}"], profile="tiny")
    datamodule = DocumentWindowDataModule(cfg.data, cfg.vocab, cfg.context, seed=1)
    datamodule.setup("fit")
    module = build_module(cfg, datamodule)
    module.load_state_dict(torch.load(tmp_path / "initial.pt"))
    loss_sum, _, ntok = module.loss_terms(union([r["batch"] for r in ranks]))
    (loss_sum / ntok).backward()
    assert int(ntok) == sum(tokens)
    reference = dict(module.named_parameters())
    assert reference.keys() >= ranks[0]["grads"].keys() and len(ranks[0]["grads"]) > 10
    for name, grad in ranks[0]["grads"].items():
        assert torch.allclose(grad, reference[name].grad, atol=1e-6, rtol=1e-4), name
