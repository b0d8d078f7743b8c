"""`benchmarks/peers.py` in the mode of `docmt bench --smoke`: our Transformer and MarianMTModel at the
same sizes, timed on the same batches and the same forced beam-search length."""

from __future__ import annotations

import json

import pytest
from transformers import MarianMTModel

from lightning_docmt.cli import commands
from lightning_docmt.config.composition import compose
from lightning_docmt.models.transformer import TransformerSeq2Seq
from tests.benchmarks.benchmark_scripts import load_benchmark


def test_the_smoke_mode_times_both_models_on_the_same_tokens(tmp_path, capsys):
    bench = load_benchmark("peers")
    out = tmp_path / "report.json"
    report = bench.main([*commands.SMOKE_ARGUMENTS["peers"], "--json", str(out),
                         f"data.cache_dir={tmp_path / 'cache'}"])
    assert json.loads(out.read_text()) == json.loads(capsys.readouterr().out) == json.loads(json.dumps(report))
    setup = report["setup"]
    assert setup["d_model"] == 32 and setup["train_batches"] == 2 and setup["decode_sentences"] == 4
    assert setup["beam"] == 4 and setup["length"] == 8
    assert set(report["machine"]) == {"cpu", "avx512_bf16", "amx_bf16", "torch", "transformers", "threads"}
    assert report["machine"]["threads"] == 1
    # identical dimensions: identical trainable parameters (Marian's frozen sinusoid table aside)
    assert report["parameters"]["ours"] == report["parameters"]["marian"] > 0
    assert list(report["precisions"]) == ["fp32", "bf16"]
    for row in report["precisions"].values():
        for figure in ("train", "beam"):
            rates = row[f"{figure}_tokens_per_s"]
            for side in ("ours", "marian"):
                assert 0 < rates[side]["min"] <= rates[side]["median"] <= rates[side]["max"]
            ratio = row[f"{figure}_ratio_vs_marian"]
            assert ratio["median"] == pytest.approx(rates["ours"]["median"] / rates["marian"]["median"])
            assert ratio["min"] <= ratio["max"]
        tokens = row["tokens_per_repeat"]
        # both losses counted every target token of the timed batches
        assert tokens["train"]["ours"] == tokens["train"]["marian"] == [setup["train_target_tokens"]]
        # every hypothesis of both searches ran to the forced length, no shorter, no longer
        assert tokens["beam"]["ours"] == tokens["beam"]["marian"] == [4 * 8]


@pytest.mark.parametrize("share, tie", [(True, True), (False, True), (False, False)])
def test_marian_gets_every_dimension_of_our_transformer(share, tie):
    bench = load_benchmark("peers")
    cfg = compose(None, ["model.arch=transformer", "model.d_model=48", "model.heads=3", "model.ffn_dim=80",
                         "model.enc_layers=2", "model.dec_layers=1", f"model.share_embeddings={share}",
                         f"model.tie_output={tie}"], profile="tiny")
    ours = TransformerSeq2Seq(cfg.model, 300, 300)
    marian = MarianMTModel(bench.marian_config(cfg.model, 300))
    assert bench.trainable_parameters(ours) == bench.trainable_parameters(marian)


def test_a_pre_norm_transformer_has_no_marian_peer():
    bench = load_benchmark("peers")
    cfg = compose(None, ["model.arch=transformer", "model.pre_norm=true"], profile="tiny")
    with pytest.raises(ValueError, match="post-LN"):
        bench.marian_config(cfg.model, 300)
