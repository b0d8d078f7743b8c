"""`benchmarks/context_overhead.py` in the mode of `docmt bench --smoke`: every architecture against the
sentence Transformer, on the reference's sentences, each with its own context."""

from __future__ import annotations

import json
import statistics

import pytest
import torch

from lightning_docmt.cli import commands
from lightning_docmt.nn import attention
from lightning_docmt.nn.packing import Packing
from tests.benchmarks.benchmark_scripts import load_benchmark

CONTEXT_MODELS = ("concat", "zhang_doc", "flat", "lifeng_coattn", "pas", "yk_rnn_separated")


def test_the_smoke_mode_times_every_architecture_against_the_transformer(tmp_path, capsys):
    bench = load_benchmark("context_overhead")
    out = tmp_path / "report.json"
    report = bench.main([*commands.SMOKE_ARGUMENTS["context_overhead"], "--repeats", "2", "--json", str(out),
                         f"data.cache_dir={tmp_path / 'cache'}"])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    setup = report["setup"]
    assert setup["d_model"] == 32 and setup["train_batches"] == 2 and setup["decode_sentences"] == 4
    assert setup["beam"] == 4 and setup["length"] == 8 and report["machine"]["threads"] == 1
    archs = report["archs"]
    assert list(archs) == list(bench.ARCHS) and next(iter(archs)) == "transformer"
    # the sentence models read no context, every document model some; more sentences, more tokens
    assert archs["transformer"]["train_context_tokens"] == archs["yk_rnn"]["train_context_tokens"] == 0
    assert all(archs[arch]["train_context_tokens"] > 0 for arch in CONTEXT_MODELS)
    assert (archs["lifeng_coattn"]["train_context_tokens"] > archs["zhang_doc"]["train_context_tokens"]
            > archs["concat"]["train_context_tokens"])
    # pas's BERT-sized context encoder is frozen: it holds most parameters and trains none
    assert archs["pas"]["parameters"]["trainable"] < archs["pas"]["parameters"]["total"] / 100
    row = report["precisions"]["fp32"]
    for figure in ("train", "beam"):
        per_repeat = row[figure]["per_repeat_tokens_per_s"]
        reference = per_repeat["transformer"]
        for arch in bench.ARCHS:
            rates = per_repeat[arch]
            assert len(rates) == 2 and min(rates) > 0
            assert row[figure]["tokens_per_s"][arch] == {"median": statistics.median(rates), "min": min(rates),
                                                         "max": max(rates)}
            # arch / transformer: the ratio of the medians, and the spread of the repeat-by-repeat ratios
            ratios = [a / b for a, b in zip(rates, reference)]
            assert row[figure]["ratio_vs_transformer"][arch] == pytest.approx(
                {"median": statistics.median(rates) / statistics.median(reference), "min": min(ratios),
                 "max": max(ratios)})
        assert row[figure]["ratio_vs_transformer"]["transformer"] == {"median": 1.0, "min": 1.0, "max": 1.0}
    # every model trained on the same target tokens, and ran every hypothesis to the forced length
    assert row["train"]["tokens_per_repeat"] == {arch: [setup["train_target_tokens"]] * 2 for arch in bench.ARCHS}
    assert row["beam"]["tokens_per_repeat"] == {arch: [4 * 8] * 2 for arch in bench.ARCHS}
    assert report["paper_ratio_vs_transformer"] == {"zhang_doc": pytest.approx({"train": 31 / 41, "beam": 364 / 872})}
    printed = capsys.readouterr().out
    assert all(arch in printed for arch in bench.ARCHS) and "0.76 / 0.42" in printed


def test_every_architecture_reads_the_reference_sentences_with_its_own_context(tmp_path):
    bench = load_benchmark("context_overhead")
    args = bench.parse_args(["--profile", "tiny", "--corpus", "synthetic:tiny", "--archs", "flat",
                             "--train-batches", "2", "--decode-sentences", "5", f"data.cache_dir={tmp_path}"])
    configs = bench.compose_archs(args)
    reference = configs["transformer"]
    train, decode = bench.reference_sentences(reference, args)
    assert len(train) == 3 and sum(map(len, decode)) == 5
    works = {arch: bench.workload(bench.arch_data(reference, cfg, args.seed), train, decode)
             for arch, cfg in configs.items()}
    ours, flat = works["transformer"], works["flat"]
    for sentences, batch in zip(train + decode, flat.train + flat.decode):
        assert batch["sent_index"].tolist() == sentences
    for plain, read in zip(ours.train + ours.decode, flat.train + flat.decode):
        assert all(torch.equal(plain[key], read[key]) for key in ("sent_index", "src", "tgt_in", "tgt_out"))
        assert "ctx_src" not in plain and {"ctx_src", "ctx_next"} <= set(read)


def test_the_reference_always_runs_and_an_unknown_architecture_is_one_error(capsys):
    bench = load_benchmark("context_overhead")
    assert bench.parse_args(["--archs", "pas,concat"]).archs == ["transformer", "pas", "concat"]
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(["--archs", "concat,zhang"])
    assert exit_info.value.code == 2
    assert "--archs: unknown architecture 'zhang'; available: transformer, concat" in capsys.readouterr().err


def variant_sides(tmp_path, option: str, suffix: str):
    """The benchmark module, concat's workload, and concat's side as it runs ("") and in the variant
    `suffix` that `option` names, both built at the same seed."""
    bench = load_benchmark("context_overhead")
    args = bench.parse_args(["--profile", "tiny", "--corpus", "synthetic:tiny", "--archs", "concat",
                             option, "concat", "--train-batches", "2", "--decode-sentences", "4",
                             f"data.cache_dir={tmp_path}"])
    assert getattr(args, option.removeprefix("--").replace("-", "_")) == ["concat"]
    configs = bench.compose_archs(args)
    cfg, reference = configs["concat"], configs["transformer"]
    train, decode = bench.reference_sentences(reference, args)
    data = bench.arch_data(reference, cfg, args.seed)
    sides = {name: bench.build_side(cfg, data, args.seed, name) for name in ("", suffix)}
    assert all(torch.equal(a, b) for a, b in zip(sides[""].model.parameters(), sides[suffix].model.parameters()))
    return bench, bench.workload(data, train, decode), sides


def time_each(sides: dict, work, record: list) -> dict:
    """Every side's training and beam search timed once; what `record` collected during each."""
    seen = {}
    for name, side in sides.items():
        record.clear()
        side.time_training(work.train, autocast=False)
        side.time_beam(work.decode, False, 4, 8)
        seen[name] = list(record)
    return seen


def test_a_padded_side_runs_the_same_model_with_nothing_packed(tmp_path, monkeypatch, capsys):
    packed_rows = []
    original = Packing.pack
    monkeypatch.setattr(Packing, "pack", lambda self, x: packed_rows.append(len(self.index)) or original(self, x))
    bench, work, sides = variant_sides(tmp_path, "--padded", " padded")
    counts = {name: len(rows) for name, rows in time_each(sides, work, packed_rows).items()}
    assert counts[""] > 0 and counts[bench.PADDED] == 0  # concat's [previous; current] rows pack, unless padded
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(["--archs", "concat", "--padded", "flat"])
    assert exit_info.value.code == 2
    assert "--padded: 'flat' is not among the architectures run (transformer, concat)" in capsys.readouterr().err


def test_a_math_attention_side_runs_the_same_model_with_pytorchs_math_kernel(tmp_path, monkeypatch, capsys):
    used = []  # the CPU attention of every attention call
    original = attention.masked_softmax_attention
    monkeypatch.setattr(attention, "masked_softmax_attention", lambda *a, **k: used.append("ours") or original(*a, **k))
    kernel = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: used.append(attention.CPU_ATTENTION) or kernel(*a, **k))
    bench, work, sides = variant_sides(tmp_path, "--math-attention", " math attention")
    kinds = {name: set(calls) for name, calls in time_each(sides, work, used).items()}
    assert kinds == {"": {"ours"}, bench.MATH_ATTENTION: {"math"}}
    assert attention.CPU_ATTENTION == attention.MASKED_SOFTMAX  # restored after each timed pass
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(["--archs", "concat", "--math-attention", "flat"])
    assert exit_info.value.code == 2
    assert "--math-attention: 'flat' is not among the architectures run" in capsys.readouterr().err
