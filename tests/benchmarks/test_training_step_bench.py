"""`benchmarks/training_step.py` at tiny sizes: every variant is timed, and its baseline is the same loss."""

from __future__ import annotations

import torch

from lightning_docmt.config.composition import compose
from lightning_docmt.data.datamodule import DocumentWindowDataModule
from lightning_docmt.training.run import build_module
from tests.benchmarks.benchmark_scripts import load_benchmark, run_tiny


def test_benchmark_times_every_variant(tmp_path, capsys):
    bench, report = run_tiny("training_step", tmp_path)
    assert report["config"]["d_model"] == 32 and report["config"]["decode_sentences"] >= 4
    steps = report["train_step"]
    assert list(steps) == [name for name, _, _ in bench.VARIANTS]
    for row in steps.values():
        assert row["cpu_s"] > 0 and row["wall_s"] > 0
    base = steps[bench.VARIANTS[0][0]]
    assert base["speedup_cpu"] == 1.0
    for row in steps.values():
        assert row["speedup_cpu"] == base["cpu_s"] / row["cpu_s"]
    assert report["beam_search"]["flash"]["ratio_to_flash"] == 1.0
    assert all(report["beam_search"][kernel]["sents_per_cpu_s"] > 0 for kernel in bench.KERNELS)
    assert set(report["beam_search"]) == {"flash", "math", "masked_softmax"}
    printed = capsys.readouterr().out
    assert "fused loss + masked-softmax attention (default)" in printed and "ratio to flash" in printed


def test_the_baseline_loss_is_the_training_loss(tmp_path):
    bench = load_benchmark("training_step")
    cfg = compose(None, ["data.corpus=synthetic:tiny", "model.arch=transformer",
                         f"data.cache_dir={tmp_path}"], profile="tiny")
    datamodule = DocumentWindowDataModule(cfg.data, cfg.vocab, cfg.context, seed=1)
    datamodule.prepare_data()
    datamodule.setup("fit")
    batch = next(iter(datamodule.train_dataloader()))
    module = build_module(cfg, datamodule).eval()
    fused, unfused = module.loss_terms(batch), bench.unfused_loss_terms(module, batch)
    for a, b in zip(fused, unfused):
        assert torch.allclose(a.float(), b.float(), rtol=1e-5)
