"""`benchmarks/zhang_efficiency.py` (Zhang et al. 2018, Table 6) at tiny sizes, and `docmt bench`'s
benchmark selection."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_docmt.batch import EOS_ID
from lightning_docmt.cli import commands
from lightning_docmt.data.datamodule import DocumentWindowDataModule
from lightning_docmt.inference.decoding import beam_search, max_target_lengths
from lightning_docmt.training.run import build_module
from tests.benchmarks.benchmark_scripts import load_benchmark, run_tiny


def test_benchmark_measures_both_models_on_the_same_batches(tmp_path, capsys):
    bench, report = run_tiny("zhang_efficiency", tmp_path)
    setup = report["setup"]
    assert setup["d_model"] == 32 and setup["train_batches"] == 2 and setup["decode_sentences"] >= 4
    for arch in ("transformer", "zhang_doc"):
        for figure in ("train_tokens_per_s", "decode_sents_per_s", "decode_tokens_per_s"):
            summary = report["results"][arch][figure]
            assert 0 < summary["min"] <= summary["median"] <= summary["max"]
        # both decode every hypothesis to the maximum length: the same tokens per sentence
        tokens_per_sentence = (report["results"][arch]["decode_tokens_per_s"]["median"]
                               / report["results"][arch]["decode_sents_per_s"]["median"])
        assert tokens_per_sentence == pytest.approx(setup["decode_tokens_per_sentence"])
    ratio = report["ratio_zhang_over_transformer"]
    assert ratio["train_tokens_per_s"] == pytest.approx(
        report["results"]["zhang_doc"]["train_tokens_per_s"]["median"]
        / report["results"]["transformer"]["train_tokens_per_s"]["median"])
    params = report["parameters"]
    # the same sizes: zhang_doc is the Transformer plus theta_d, of which only theta_d trains
    assert params["zhang_doc"]["total"] > params["transformer"]["total"]
    assert params["zhang_doc"]["trainable"] == params["zhang_doc"]["total"] - params["transformer"]["total"]
    printed = capsys.readouterr().out
    assert "transformer" in printed and "zhang_doc" in printed and "0.76 / 0.42" in printed


def test_bad_benchmark_arguments_are_rejected():
    bench = load_benchmark("zhang_efficiency")
    with pytest.raises(SystemExit):
        bench.parse_args(["--repeats", "0"])


def bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`docmt bench ARGS` as a user runs it, in `tmp_path` (its caches land there). The limit is a
    guard against a hang: every benchmark at its smoke sizes is six processes importing torch and
    about 100 s on 2 idle cores, several times that on a loaded machine."""
    return subprocess.run([sys.executable, "-m", "lightning_docmt.cli", "bench", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)


@pytest.mark.subprocess
def test_bench_only_runs_the_selected_benchmark(tmp_path):
    out = tmp_path / "one.json"
    done = bench(tmp_path, "--only", "data_scale", "--smoke", "--json", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())  # the benchmark's own report, not wrapped by name
    assert [row["sentences"] for row in report["rows"]] == [200, 2000]
    assert all(row["prepare"]["wall_s"] >= 0 and row["epoch_rank0_of_2"]["batches"] > 0
               for row in report["rows"])
    assert "training_step" not in done.stdout + done.stderr


@pytest.mark.subprocess
def test_bench_runs_every_benchmark_by_default_and_merges_their_reports(tmp_path):
    out = tmp_path / "all.json"
    done = bench(tmp_path, "--smoke", "--json", str(out))
    assert done.returncode == 0, done.stderr
    reports = json.loads(out.read_text())
    assert list(reports) == list(commands.BENCHMARK_NAMES)
    assert reports["data_scale"]["rows"][-1]["sentences"] == 2000
    assert all(row["cpu_s"] > 0 for row in reports["training_step"]["train_step"].values())
    ratio = reports["zhang_efficiency"]["ratio_zhang_over_transformer"]["train_tokens_per_s"]
    assert ratio > 0


@pytest.mark.subprocess
def test_an_unknown_benchmark_is_one_error_line_and_runs_nothing(tmp_path):
    done = bench(tmp_path, "--only", "data_scale,zhang_efficency")
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "zhang_efficency" in done.stderr
    assert "zhang_efficiency" in done.stderr  # the available names
    assert not (tmp_path / ".cache").exists()  # not even the valid benchmark ran


class EosEager:
    """A model that would end every sentence at once: its `<eos>` logit is far above the rest."""

    def __init__(self, model):
        self.model = model
        self.encode, self.init_cache = model.encode, model.init_cache

    def decode_step(self, tokens, state, cache):
        logits = self.model.decode_step(tokens, state, cache)
        logits[:, EOS_ID] += 100.0
        return logits


def test_full_length_decoding_runs_every_hypothesis_to_the_maximum_length(tmp_path):
    bench = load_benchmark("zhang_efficiency")
    cfg = bench.compose_pair("tiny", "synthetic:tiny", [f"data.cache_dir={tmp_path}"])["zhang_doc"]
    dm = DocumentWindowDataModule(cfg.data, cfg.vocab, cfg.context, seed=1)
    dm.prepare_data()
    dm.setup("test")
    batch = next(iter(dm.test_dataloader()))
    model = build_module(cfg, dm).model.eval()
    lengths = {"max_len_a": cfg.decode.max_len_a, "max_len_b": cfg.decode.max_len_b}
    limits = max_target_lengths(batch["src"], **lengths).tolist()
    natural = beam_search(EosEager(model), batch, beam=2, **lengths)
    assert all(len(h.tokens) == 0 for h in natural)
    forced = beam_search(bench.FullLengthDecoder(EosEager(model)), batch, beam=2, **lengths)
    assert [len(h.tokens) for h in forced] == limits
    assert bench.full_length([batch], cfg.decode) == pytest.approx(sum(limits) / len(limits) + 1)
