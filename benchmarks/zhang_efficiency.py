"""Efficiency of Zhang et al. 2018's document Transformer against the sentence Transformer (Table 6).

The paper (docs/papers/zhang2018.md section 7, T6) reports training speed 41K (Transformer) vs. 31K (this work) and
decoding speed 872 vs. 364, units not stated: ratios 0.76 and 0.42. This benchmark builds both
models at the same sizes (a profile's, `cpu` by default, plus `key=value` overrides), feeds them the
same batches of a real corpus (the DataModule's document windows with the zhang_doc context, which the
Transformer ignores), and measures side by side, interleaved and repeated:

- training: target tokens per second of forward + backward + optimizer step (Adam); the document
  model trains theta_d only by default (step 2 of the two-step training, theta_s frozen: the
  paper's system) or every parameter (`--zhang-trainable all`);
- decoding: beam search (`decode.*` of the profile) over test sentences, in sentences per second
  and generated target tokens per second. The models are untrained, and an untrained model stops
  at an arbitrary length (often at once), so `<eos>` is held back until the maximum length
  `floor(decode.max_len_a * |x| + decode.max_len_b)`: both models decode the same number of steps
  per sentence, and the figures compare the cost of a step (NOT IN PAPER: the paper decodes with
  trained models, whose lengths differ a little).

The figure of each repeat is recorded; the median over repeats is reported with the min and max.
Timings on a shared machine are noisy: compare ratios measured in the same run.

    python benchmarks/zhang_efficiency.py [--profile cpu] [--corpus bible:en-fr] [--repeats 3] \
        [--train-batches 10] [--decode-sentences 32] [--json out.json] [model.d_model=512 ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if (REPO / "lightning_docmt").is_dir():  # a source checkout run without installing the package
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from lightning_docmt.benchmarks.bench_common import (  # noqa: E402
    Batch,
    FullLengthDecoder,
    optimizer_step,
    real_batches,
    spread,
    target_tokens,
)
from lightning_docmt.callbacks.staged_unfreezing import StagedUnfreezing  # noqa: E402
from lightning_docmt.config.composition import compose  # noqa: E402
from lightning_docmt.inference import decoding  # noqa: E402
from lightning_docmt.models.zhang_doc import THETA_D_GLOBS  # noqa: E402
from lightning_docmt.training.run import build_module  # noqa: E402

PAPER = {"transformer": {"train": 41_000, "decode": 872}, "zhang_doc": {"train": 31_000, "decode": 364}}
ARCHS = ("transformer", "zhang_doc")


@dataclass
class Measurements:
    """Per-repeat figures of one model."""

    train_tokens_per_s: list[float] = field(default_factory=list)
    decode_sents_per_s: list[float] = field(default_factory=list)
    decode_tokens_per_s: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, dict[str, float]]:
        return {name: spread(values) for name, values in vars(self).items()}


def compose_pair(profile: str, corpus: str, overrides: list[str]):
    """Run configs of both models with the same sizes; the data windows are the zhang_doc ones."""
    common = [f"data.corpus={corpus}", *overrides]
    return {arch: compose(None, [f"model.arch={arch}", *common], profile=profile) for arch in ARCHS}


def to_device(batches: list[Batch], device: torch.device) -> list[Batch]:
    return [{k: v.to(device) for k, v in b.items()} for b in batches]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Runner:
    """One model with its optimizer: timed training steps and timed beam search."""

    def __init__(self, module, device: torch.device):
        self.module = module.to(device)
        self.device = device
        params = [p for p in module.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(params, lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

    def train_step(self, batch: Batch) -> None:
        self.module.train()
        loss_sum, _, ntok = self.module.loss_terms(batch)  # the training loss of DocMTModule
        optimizer_step(loss_sum, ntok, self.optimizer)

    def time_training(self, batches: list[Batch]) -> float:
        """Target tokens per second (tokens of `tgt_out`, `<eos>` included, padding excluded)."""
        tokens = target_tokens(batches)
        synchronize(self.device)
        started = time.perf_counter()
        for batch in batches:
            self.train_step(batch)
        synchronize(self.device)
        return tokens / (time.perf_counter() - started)

    @torch.no_grad()
    def time_decoding(self, batches: list[Batch]) -> tuple[float, float]:
        """(sentences per second, generated target tokens per second, `<eos>` counted)."""
        self.module.eval()
        dec = self.module.cfg.decode
        model = FullLengthDecoder(self.module.model)
        sentences = tokens = 0
        synchronize(self.device)
        started = time.perf_counter()
        for batch in batches:
            hyps = decoding.beam_search(model, batch, beam=dec.beam, len_penalty=dec.len_penalty,
                                        max_len_a=dec.max_len_a, max_len_b=dec.max_len_b)
            sentences += len(hyps)
            tokens += sum(len(h.tokens) + 1 for h in hyps)
        synchronize(self.device)
        seconds = time.perf_counter() - started
        return sentences / seconds, tokens / seconds


def full_length(batches: list[Batch], dec) -> float:
    """Mean generated tokens per sentence (`<eos>` included) when every hypothesis runs to the maximum."""
    lengths = torch.cat([decoding.max_target_lengths(b["src"], dec.max_len_a, dec.max_len_b) for b in batches])
    return float((lengths + 1).double().mean())


def build_runners(configs, datamodule, zhang_trainable: str, device: torch.device) -> dict[str, Runner]:
    runners = {}
    for arch, cfg in configs.items():
        module = build_module(cfg, datamodule)
        if arch == "zhang_doc" and zhang_trainable == "theta_d":
            StagedUnfreezing("benchmark", THETA_D_GLOBS).apply(module)  # step 2: theta_s frozen (trap 4)
        runners[arch] = Runner(module, device)
    return runners


def measure(args: argparse.Namespace) -> dict:
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    configs = compose_pair(args.profile, args.corpus, args.overrides)
    zcfg = configs["zhang_doc"]
    datamodule, train, decode = real_batches(zcfg, args.seed, args.train_batches + 1, args.decode_sentences)
    train, decode = to_device(train, device), to_device(decode, device)
    runners = build_runners(configs, datamodule, args.zhang_trainable, device)
    for runner in runners.values():  # warm-up: allocator, kernels, Adam state
        runner.train_step(train[0])
        runner.time_decoding(decode[:1])
    results = {arch: Measurements() for arch in ARCHS}
    for repeat in range(args.repeats):
        order = ARCHS if repeat % 2 == 0 else ARCHS[::-1]  # interleaved, alternating who goes first
        for arch in order:
            runner, m = runners[arch], results[arch]
            m.train_tokens_per_s.append(runner.time_training(train[1:]))
            sents, tokens = runner.time_decoding(decode)
            m.decode_sents_per_s.append(sents)
            m.decode_tokens_per_s.append(tokens)
    summaries = {arch: m.summary() for arch, m in results.items()}
    ratio = {key: summaries["zhang_doc"][key]["median"] / summaries["transformer"][key]["median"]
             for key in vars(Measurements())}
    model = zcfg.model
    return {
        "setup": {"profile": args.profile, "corpus": args.corpus, "overrides": args.overrides,
                  "device": str(device), "threads": torch.get_num_threads(), "repeats": args.repeats,
                  "zhang_trainable": args.zhang_trainable, "context_sentences": zcfg.context.prev_sentences,
                  "d_model": model.d_model, "layers": [model.enc_layers, model.dec_layers],
                  "context_layers": model.context_layers, "beam": zcfg.decode.beam,
                  "train_batches": len(train) - 1,
                  "train_target_tokens": target_tokens(train[1:]),
                  "decode_sentences": sum(len(b["src"]) for b in decode),
                  "decode_tokens_per_sentence": full_length(decode, zcfg.decode)},
        "parameters": {arch: {"total": sum(p.numel() for p in r.module.parameters()),
                              "trainable": sum(p.numel() for p in r.module.parameters() if p.requires_grad)}
                       for arch, r in runners.items()},
        "results": summaries,
        "ratio_zhang_over_transformer": ratio,
        "paper_ratio": {"train_tokens_per_s": PAPER["zhang_doc"]["train"] / PAPER["transformer"]["train"],
                        "decode_sents_per_s": PAPER["zhang_doc"]["decode"] / PAPER["transformer"]["decode"]},
        "paper": PAPER,
    }


def print_report(report: dict) -> None:
    setup = report["setup"]
    print(f"Zhang et al. 2018 Table 6 efficiency | profile {setup['profile']} | {setup['corpus']} | "
          f"{setup['device']} x{setup['threads']} threads | d_model {setup['d_model']}, layers "
          f"{setup['layers']}, N_c {setup['context_layers']}, {setup['context_sentences']} context "
          f"sentences, beam {setup['beam']} | zhang trains {setup['zhang_trainable']} | median of "
          f"{setup['repeats']} (min-max)")
    columns = ("train_tokens_per_s", "decode_sents_per_s", "decode_tokens_per_s")
    print(f"{'model':>12} | {'train tgt tok/s':>22} | {'decode sent/s':>20} | {'decode tok/s':>22} "
          "| paper train / decode")
    for arch in ARCHS:
        cells = []
        for key in columns:
            s = report["results"][arch][key]
            cells.append(f"{s['median']:.1f} ({s['min']:.0f}-{s['max']:.0f})")
        paper = report["paper"][arch]
        print(f"{arch:>12} | {cells[0]:>22} | {cells[1]:>20} | {cells[2]:>22} | "
              f"{paper['train']:,} / {paper['decode']:,}")
    ratio, paper_ratio = report["ratio_zhang_over_transformer"], report["paper_ratio"]
    print(f"{'zhang/transf':>12} | {ratio['train_tokens_per_s']:>22.2f} | "
          f"{ratio['decode_sents_per_s']:>20.2f} | {ratio['decode_tokens_per_s']:>22.2f} | "
          f"{paper_ratio['train_tokens_per_s']:.2f} / {paper_ratio['decode_sents_per_s']:.2f} "
          "(paper units not stated)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="cpu", help="sizes and decoding settings (tiny|cpu|paper)")
    parser.add_argument("--corpus", default="bible:en-fr", help="corpus spec, e.g. synthetic:small")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train-batches", type=int, default=10, help="timed training steps per repeat")
    parser.add_argument("--decode-sentences", type=int, default=32, help="test sentences decoded per repeat")
    parser.add_argument("--zhang-trainable", choices=["theta_d", "all"], default="theta_d")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("overrides", nargs="*", help="key=value config overrides (both models)")
    args = parser.parse_args(argv)
    for name in ("repeats", "train_batches", "decode_sentences"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    report = measure(args)
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
