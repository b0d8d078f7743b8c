"""What reading context costs: every document architecture against the sentence Transformer, side by side.

A document model reads more than the sentence it translates (previous and next sentences, their
encodings, a frozen encoder's features), so it trains and decodes more slowly than the sentence
Transformer of the same sizes. The one paper of the suite that measures this, Zhang et al. 2018
(docs/papers/zhang2018.md section 7, T6), reports 0.76 of the Transformer's training speed and 0.42
of its decoding speed (trained models, Zh-En, its own sizes; units not stated), which the report
shows next to `zhang_doc`'s ratios (`zhang_efficiency.py` measures that table's setting itself).
This benchmark measures the cost of every architecture the same way, in one run:

- the models: each architecture of `ARCHS` built from one run config (`--profile`, `cpu` by default:
  d_model 192, 4 heads, FFN 768, 2+2 layers, its joint 8k vocabulary of the corpus; `key=value`
  overrides go to every model) with its preset's context (the paper's setting): `transformer` (the
  reference, no context), `concat` (the previous source sentence, one sequence), `zhang_doc` (two
  previous source sentences in a context encoder; every parameter trains, where the paper's step 2
  trains theta_d only), `flat` (one previous and one next sentence), `lifeng_coattn` (three
  previous sentences, each encoded alone), `pas` (BERT-fused (document): one parallel block over
  "[CLS] previous [SEP] current [SEP]" encoded by a frozen MiniLM-sized BERT, 6 layers 384 wide,
  its weights random, so that it builds offline), `yk_rnn` (Yamagishi & Komachi's sentence-level
  attentional LSTM) and `yk_rnn_separated` (the LSTM with a context encoder over the previous
  source sentence, Sep-Src). The LSTMs have other sizes by nature: d_model is their hidden size,
  enc_layers bidirectional and dec_layers unidirectional LSTM layers, no heads and no FFN; they
  run here on the reference's joint vocabulary and batches, not on their preset's separate
  vocabularies and document-order batches, so that every model reads the same sentences.
- the batches: the sentences of the reference's batches (its first `--train-batches` + 1 training
  batches, the first of which only warms up, and its first `--decode-sentences` test sentences),
  each architecture getting them with its own context (`data/collate.py`): every model trains on
  the same target tokens, a context model's batch also holds its context.
- training: target tokens/s of forward + label-smoothed loss + backward + Adam step
  (`DocMTModule.loss_terms`, the loss the runs train with). `lifeng_coattn` is timed in its theta_s
  phase (cross entropy with the selector's beam selection); its theta_r phase, REINFORCE over
  `rl.samples` draws per sentence, is not timed.
- decoding: generated tokens/s of beam search (`--beam`, 4) with every hypothesis forced to
  `--length` tokens (40, `<eos>` included; `bench_common.FullLengthDecoder`): the models are
  untrained and would stop anywhere, so every model runs the same decoder steps and the figures
  compare the cost of a step. Sentences/s is tokens/s divided by `--length`, so the ratios are
  the same in either unit.
- `pas` forgets its frozen encoder's kept features before every timed pass (`nn/frozen.py`): its
  figures include the encoder pass of a first epoch and of a translation; later epochs of a run
  read the features back and train faster than measured here.

What packing saves (`--padded concat,zhang_doc,...`): each architecture named runs a second time as
`<arch> padded`, the same weights with every batch left padded (`nn/packing.padded_batches`), in
the same interleaving: its figures beside the packed ones are what running the encoders over the
real positions only saves (`nn/packing.py`). What our CPU attention saves (`--math-attention
ARCHS`): the same, as `<arch> math attention`, with PyTorch's math kernel in place of
`masked_softmax_attention` (`nn/attention.CPU_ATTENTION`).

Left out (`LEFT_OUT`): the RNN's models that read what came before them in document order, the
shared-context models (states carried from each sentence to the next) and the target-side ones (the
previous translation, their own output when decoding). Their training needs document-order batches
and their decoding runs one sentence after the one before it (`inference/document_order.py`), so
they would not run the same batches as the others.

The models are timed in wall time, interleaved (each repeat runs every model in turn, the order
reversed every other repeat) after a warm-up (`bench_common.interleaved`), under each precision of
`--precisions` (fp32; bf16: `torch.autocast("cpu", bfloat16)`). The report, one JSON object
(`--json`), gives per architecture its context settings, d_model, layers and parameters, the context
tokens its batches hold, and per precision and figure (train, beam) the median tokens/s with the
min and max over the repeats, the ratio arch / transformer (of the medians, with the min and max of
the per-repeat ratios), every repeat's tokens/s and the tokens it counted. Timings on a shared
machine are noisy: compare ratios measured in the same run, on quiet cores.

    python benchmarks/context_overhead.py [--profile cpu] [--corpus bible:en-fr] \
        [--archs concat,zhang_doc,...] [--repeats 3] [--train-batches 8] [--decode-sentences 64] \
        [--beam 4] [--length 40] [--threads 2] [--precisions fp32,bf16] [--padded concat,...] \
        [--math-attention concat,...] [--json out.json] [key=value ...]
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, ContextManager, Iterator

REPO = Path(__file__).resolve().parents[1]
if (REPO / "lightning_docmt").is_dir():  # a source checkout run without installing the package
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from lightning_docmt.batch import PAD_ID  # noqa: E402
from lightning_docmt.benchmarks.bench_common import (  # noqa: E402
    FIGURES,
    PRECISIONS,
    Batch,
    ModuleSide,
    Workload,
    first_sentences,
    interleaved,
    machine,
    parse_side_by_side,
    ratio,
    real_batches,
    run_benchmark,
    side_by_side_arguments,
    spread,
    target_tokens,
)
from lightning_docmt.benchmarks.zhang_efficiency import PAPER  # noqa: E402
from lightning_docmt.config.composition import compose  # noqa: E402
from lightning_docmt.data.collate import WindowDataset  # noqa: E402
from lightning_docmt.data.datamodule import DocumentWindowDataModule  # noqa: E402
from lightning_docmt.data.windows import WindowSpec  # noqa: E402
from lightning_docmt.nn import attention  # noqa: E402
from lightning_docmt.nn.packing import padded_batches  # noqa: E402
from lightning_docmt.training.run import build_module  # noqa: E402

REFERENCE = "transformer"
MINILM = "minilm"  # the BERT-architecture encoder the suite ships (6 layers, 384 wide)
ARCHS: dict[str, list[str]] = {  # name: the overrides that build it, before the command line's
    REFERENCE: ["model.arch=transformer"],
    "concat": ["model.arch=concat"],
    "zhang_doc": ["model.arch=zhang_doc"],
    "flat": ["model.arch=flat"],
    "lifeng_coattn": ["model.arch=lifeng_coattn"],
    "pas": ["model.arch=pas", f"model.context_encoders.bert.checkpoint={MINILM}",
            "model.context_encoders.bert.random_weights=true",
            "context.streams.bert_pc={format: pair, prev: 1}",
            "model.stack=[{stream: bert_pc, encoder: bert}]"],
    "yk_rnn": ["model.arch=yk_rnn"],
    "yk_rnn_separated": ["model.arch=yk_rnn", "model.context=separated", "context.prev_sentences=1"],
}
LEFT_OUT = {
    "yk_rnn shared (model.context=shared)": "carries each sentence's states to the next: document-order "
                                            "batches, and decoding one sentence after the one before it",
    "yk_rnn target side (context.side=target)": "reads the previous translation, its own output when "
                                                "decoding: one sentence after the one before it",
}
PADDED = " padded"
"""Suffix of the side that runs an architecture with every batch padded (`--padded`)."""
MATH_ATTENTION = " math attention"
"""Suffix of the side that runs an architecture with PyTorch's math attention kernel (`--math-attention`)."""
PAPER_RATIO = {"zhang_doc": {"train": PAPER["zhang_doc"]["train"] / PAPER["transformer"]["train"],
                             "beam": PAPER["zhang_doc"]["decode"] / PAPER["transformer"]["decode"]}}


def compose_archs(args: argparse.Namespace) -> dict:
    """The run config of every architecture of `args.archs`, at the same profile and overrides."""
    common = [f"data.corpus={args.corpus}", *args.overrides]
    return {arch: compose(None, [*ARCHS[arch], *common], profile=args.profile) for arch in args.archs}


def reference_sentences(cfg, args: argparse.Namespace) -> tuple[list[list[int]], list[list[int]]]:
    """The sentence indices of the reference's batches: its first `args.train_batches` + 1 training
    batches, and its test batches cut to the first `args.decode_sentences` sentences."""
    _, train, test = real_batches(cfg, args.seed, args.train_batches + 1, args.decode_sentences)
    decode = first_sentences(test, args.decode_sentences)
    return [b["sent_index"].tolist() for b in train], [b["sent_index"].tolist() for b in decode]


def arch_data(reference, cfg, seed: int) -> DocumentWindowDataModule:
    """The reference's corpus, vocabulary and batching, with the context windows of `cfg`."""
    return DocumentWindowDataModule(reference.data, reference.vocab, cfg.context, seed=seed)


def workload(datamodule: DocumentWindowDataModule, train: list[list[int]], decode: list[list[int]]) -> Workload:
    """The batches of the given sentences (training and test splits), with `datamodule`'s context."""
    train_rows = WindowDataset(datamodule.split("train"), datamodule.window)
    test_rows = WindowDataset(datamodule.split("test"), datamodule.window)
    return Workload([train_rows[indices] for indices in train], [test_rows[indices] for indices in decode])


def context_tokens(batches: list[Batch], window: WindowSpec) -> int:
    """The context tokens `batches` hold, padding excluded: the context windows (`ctx_*`, separators
    included) and the rows of the external and named streams (a stream row holds the current
    sentence too)."""
    masks = [stream.keys[2] for stream in window.streams]
    if window.external is not None:
        masks.append("ctx_ext_pad")
    return sum(sum(int(batch[key].ne(PAD_ID).sum()) for key in window.sides())
               + sum(int((~batch[key]).sum()) for key in masks) for batch in batches)


@contextmanager
def math_attention() -> Iterator[None]:
    """PyTorch's math kernel as the CPU attention inside the block (`nn/attention.CPU_ATTENTION`)."""
    before = attention.CPU_ATTENTION
    attention.CPU_ATTENTION = "math"
    try:
        yield
    finally:
        attention.CPU_ATTENTION = before


VARIANTS = {PADDED: padded_batches, MATH_ATTENTION: math_attention}
"""Suffix of a side -> the context it is timed in."""


class VariantSide(ModuleSide):
    """A model timed inside a context of `VARIANTS` (every batch padded, or the math attention kernel)."""

    def __init__(self, module, len_penalty: float, variant: Callable[[], ContextManager[None]]):
        super().__init__(module, len_penalty)
        self.variant = variant

    def time_training(self, *args, **kwargs) -> tuple[int, float]:
        with self.variant():
            return super().time_training(*args, **kwargs)

    def time_beam(self, *args, **kwargs) -> tuple[int, float]:
        with self.variant():
            return super().time_beam(*args, **kwargs)


def build_side(cfg, datamodule: DocumentWindowDataModule, seed: int, variant: str = "") -> ModuleSide:
    """The model of `cfg` at `seed`'s initial weights; `variant`: a suffix of `VARIANTS`, or "" (as it runs)."""
    torch.manual_seed(seed)
    module = build_module(cfg, datamodule)
    if not variant:
        return ModuleSide(module, cfg.decode.len_penalty)
    return VariantSide(module, cfg.decode.len_penalty, VARIANTS[variant])


def arch_report(cfg, side: ModuleSide, work: Workload, window: WindowSpec) -> dict:
    """What one architecture ran: its context, sizes and parameters, and the context it read."""
    params = list(side.model.parameters())
    return {"context": OmegaConf.to_container(cfg.context, resolve=True), "d_model": cfg.model.d_model,
            "layers": [cfg.model.enc_layers, cfg.model.dec_layers],
            "parameters": {"total": sum(p.numel() for p in params),
                           "trainable": sum(p.numel() for p in params if p.requires_grad)},
            "train_context_tokens": context_tokens(work.train[1:], window),
            "decode_context_tokens": context_tokens(work.decode, window)}


def measure_precision(sides: dict[str, ModuleSide], workloads: dict[str, Workload], autocast: bool,
                      args: argparse.Namespace) -> dict:
    """Every architecture under one precision, interleaved; per figure the summaries and the raw repeats."""
    rates, tokens = interleaved(sides, workloads, autocast, args.beam, args.length, args.repeats)
    return {figure: {"tokens_per_s": {arch: spread(values) for arch, values in rates[figure].items()},
                     "ratio_vs_transformer": {arch: ratio(values, rates[figure][REFERENCE])
                                              for arch, values in rates[figure].items()},
                     "per_repeat_tokens_per_s": rates[figure],
                     "tokens_per_repeat": tokens[figure]}
            for figure in FIGURES}


def setup_report(args: argparse.Namespace, cfg, work: Workload, vocab: int) -> dict:
    """What every architecture ran: the reference's sizes and options, the batches, the decoding."""
    model = cfg.model
    return {"profile": args.profile, "corpus": args.corpus, "overrides": args.overrides, "reference": REFERENCE,
            "d_model": model.d_model, "heads": model.heads, "ffn_dim": model.ffn_dim,
            "layers": [model.enc_layers, model.dec_layers], "vocab": vocab, "dropout": model.dropout,
            "label_smoothing": cfg.train.optim.label_smoothing, "repeats": args.repeats,
            "train_batches": len(work.train) - 1, "train_target_tokens": target_tokens(work.train[1:]),
            "beam": args.beam, "length": args.length, "decode_sentences": sum(len(b["src"]) for b in work.decode)}


def measure(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    configs = compose_archs(args)
    reference = configs[REFERENCE]
    train, decode = reference_sentences(reference, args)
    datamodules = {arch: arch_data(reference, cfg, args.seed) for arch, cfg in configs.items()}
    workloads = {arch: workload(dm, train, decode) for arch, dm in datamodules.items()}
    sides: dict[str, ModuleSide] = {}
    base = {}  # side -> its architecture
    for arch, cfg in configs.items():
        sides[arch], base[arch] = build_side(cfg, datamodules[arch], args.seed), arch
        for suffix, named in ((PADDED, args.padded), (MATH_ATTENTION, args.math_attention)):
            if arch in named:  # the same weights (same seed), timed in the variant's context
                sides[arch + suffix] = build_side(cfg, datamodules[arch], args.seed, suffix)
                workloads[arch + suffix], base[arch + suffix] = workloads[arch], arch
    return {
        "setup": setup_report(args, reference, workloads[REFERENCE], len(datamodules[REFERENCE].tgt_vocab)),
        "machine": machine(),
        "archs": {name: arch_report(configs[arch], sides[name], workloads[name], datamodules[arch].window)
                  for name, arch in base.items()},
        "precisions": {name: measure_precision(sides, workloads, PRECISIONS[name], args) for name in args.precisions},
        "paper_ratio_vs_transformer": {arch: PAPER_RATIO[arch] for arch in args.archs if arch in PAPER_RATIO},
        "left_out": LEFT_OUT,
    }


def cell(summary: dict[str, float], digits: int) -> str:
    """'median (min-max)'."""
    return f"{summary['median']:.{digits}f} ({summary['min']:.{digits}f}-{summary['max']:.{digits}f})"


def print_report(report: dict) -> None:
    setup = report["setup"]
    print(f"context overhead | profile {setup['profile']} | {setup['corpus']} | {report['machine']['threads']} "
          f"threads | {setup['train_batches']} training batches, {setup['train_target_tokens']} target tokens | "
          f"beam {setup['beam']}, {setup['length']} tokens, {setup['decode_sentences']} sentences | median of "
          f"{setup['repeats']} (min-max)")
    for precision, figures in report["precisions"].items():
        print(f"{precision:>20} | {'train tgt tok/s':>24} | {'/ transformer':>18} | {'beam tok/s':>24} | "
              f"{'/ transformer':>18} | paper train / beam")
        for arch in report["archs"]:
            cells = [text for figure in FIGURES
                     for text in (cell(figures[figure]["tokens_per_s"][arch], 0),
                                  cell(figures[figure]["ratio_vs_transformer"][arch], 2))]
            paper = report["paper_ratio_vs_transformer"].get(arch)
            paper_text = f"{paper['train']:.2f} / {paper['beam']:.2f}" if paper else ""
            print(f"{arch:>20} | {cells[0]:>24} | {cells[1]:>18} | {cells[2]:>24} | {cells[3]:>18} | {paper_text}")


def parse_archs(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """The architectures named, the reference first whether named or not; one error line for an unknown one."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in ARCHS]
    if unknown:
        parser.error(f"--archs: unknown architecture '{unknown[0]}'; available: {', '.join(ARCHS)}")
    return list(dict.fromkeys([REFERENCE, *names]))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = side_by_side_arguments(__doc__.split("\n\n")[0], "every model", "fp32")
    parser.add_argument("--archs", default=",".join(ARCHS),
                        help=f"comma-separated, of {', '.join(ARCHS)} ({REFERENCE} always runs)")
    parser.add_argument("--padded", default="",
                        help="comma-separated architectures of --archs to time a second time with every batch "
                             "padded (`<arch> padded`): what packing saves")
    parser.add_argument("--math-attention", default="",
                        help="comma-separated architectures of --archs to time a second time with PyTorch's math "
                             "attention kernel (`<arch> math attention`): what our CPU attention saves")
    args = parse_side_by_side(parser, argv)
    args.archs = parse_archs(parser, args.archs)
    for option in ("padded", "math_attention"):
        named = [name.strip() for name in getattr(args, option).split(",") if name.strip()]
        outside = [name for name in named if name not in args.archs]
        if outside:
            parser.error(f"--{option.replace('_', '-')}: '{outside[0]}' is not among the architectures run "
                         f"({', '.join(args.archs)})")
        setattr(args, option, named)
    return args


def main(argv: list[str] | None = None) -> dict:
    return run_benchmark(argv, parse_args, measure, print_report)


if __name__ == "__main__":
    main()
