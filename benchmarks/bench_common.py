"""What the benchmarks that time models on real batches share (`training_step.py`,
`zhang_efficiency.py`, `peers.py`, `context_overhead.py`): the batches of a run config's corpus, a
decoder that runs every hypothesis to the maximum length, the median/min/max summary of repeated
measurements, the side-by-side timing of several models (`Side`, `interleaved`: each trains and
decodes its own batches, in turns that alternate who goes first, after a warm-up), and the options
and `main` of the benchmarks that time that way (`side_by_side_arguments`, `run_benchmark`)."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import torch

from lightning_docmt import cpu
from lightning_docmt.batch import EOS_ID, PAD_ID
from lightning_docmt.data.datamodule import DocumentWindowDataModule
from lightning_docmt.inference import decoding
from lightning_docmt.nn.frozen import FrozenRowEncoder

Batch = dict[str, torch.Tensor]
PRECISIONS = {"fp32": False, "bf16": True}  # name: under bf16 autocast
FIGURES = ("train", "beam")  # what `interleaved` times: training steps, beam search
ADAM_LR = 1e-4  # the step's cost does not depend on it; small, so that the untrained models stay finite


def take_batches(loader: Iterable[Batch], limit: Callable[[list[Batch]], bool]) -> list[Batch]:
    """Batches of `loader` until `limit(batches so far)` holds (or the loader ends)."""
    batches: list[Batch] = []
    for batch in loader:
        batches.append(batch)
        if limit(batches):
            break
    return batches


def real_batches(cfg, seed: int, train_batches: int, test_sentences: int
                 ) -> tuple[DocumentWindowDataModule, list[Batch], list[Batch]]:
    """The DataModule of run config `cfg` (prepared: vocabulary and binarized corpus), its first
    `train_batches` training batches, and its first test batches, whole, up to at least
    `test_sentences` sentences: the batches a run of `cfg` trains and decodes."""
    datamodule = DocumentWindowDataModule(cfg.data, cfg.vocab, cfg.context, seed=seed)
    datamodule.prepare_data()
    datamodule.setup("fit")
    train = take_batches(datamodule.train_dataloader(), lambda got: len(got) >= train_batches)
    datamodule.setup("test")
    test = take_batches(datamodule.test_dataloader(),
                        lambda got: sum(len(b["src"]) for b in got) >= test_sentences)
    return datamodule, train, test


def target_tokens(batches: list[Batch]) -> int:
    """Target tokens of `batches` (`tgt_out`, `<eos>` included, padding excluded): what the loss counts."""
    return sum(int(b["tgt_out"].ne(PAD_ID).sum()) for b in batches)


def optimizer_step(loss_sum: torch.Tensor, tokens: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
    """The update of a training step: backward of the per-token loss, the optimizer's step, gradients cleared."""
    (loss_sum / tokens.clamp(min=1)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def spread(values: list[float]) -> dict[str, float]:
    """The median of repeated measurements, with their min and max."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


class FullLengthDecoder:
    """A seq2seq model whose `<eos>` logit is pushed far down (finite, so the forced `<eos>` at the
    maximum length still finishes every hypothesis): all hypotheses run to the maximum length."""

    HELD_BACK = -1e4

    def __init__(self, model):
        self.model = model

    def encode(self, batch: Batch):
        return self.model.encode(batch)

    def init_cache(self, state):
        return self.model.init_cache(state)

    def decode_step(self, tokens: torch.Tensor, state, cache) -> torch.Tensor:
        logits = self.model.decode_step(tokens, state, cache)  # (N, V)
        logits[:, EOS_ID] = self.HELD_BACK
        return logits


def first_sentences(batches: list[Batch], count: int) -> list[Batch]:
    """The first `count` sentences of `batches`, in their batches (the last one cut to size)."""
    taken = []
    for batch in batches:
        rows = min(count - sum(len(b["src"]) for b in taken), len(batch["src"]))
        if rows <= 0:
            break
        taken.append({key: value[:rows] for key, value in batch.items()})
    return taken


def machine() -> dict:
    """The CPU (model name, native bf16 flags), the torch version and torch's threads."""
    flags = cpu.cpu_flags()
    return {"cpu": cpu.cpu_name(), "avx512_bf16": "avx512_bf16" in flags,
            "amx_bf16": "amx_bf16" in flags, "torch": torch.__version__, "threads": torch.get_num_threads()}


def ratio(rates: list[float], reference: list[float]) -> dict[str, float]:
    """`rates` / `reference`, repeat by repeat: the ratio of the medians, and the min and max of the
    per-repeat ratios."""
    per_repeat = [a / b for a, b in zip(rates, reference)]
    return {"median": statistics.median(rates) / statistics.median(reference), "min": min(per_repeat),
            "max": max(per_repeat)}


class Side(ABC):
    """One model with its Adam optimizer: timed training steps and timed beam search."""

    def __init__(self, model: torch.nn.Module, optim_cfg):
        self.model = model
        self.optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=ADAM_LR,
                                          betas=tuple(optim_cfg.betas), eps=optim_cfg.eps)

    @abstractmethod
    def loss_terms(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(label-smoothed loss sum, NLL sum, target tokens) of `batch`."""

    @abstractmethod
    def beam_tokens(self, batch: Batch, beam: int, length: int) -> int:
        """Beam search over `batch` with every hypothesis forced to `length` tokens; the tokens generated."""

    def start_pass(self) -> None:
        """Called before each timed pass, off the clock; nothing by default."""

    def time_training(self, batches: list[Batch], autocast: bool) -> tuple[int, float]:
        """(target tokens the loss counted, wall seconds) of one training step per batch."""
        self.model.train()
        self.start_pass()
        counted = []
        started = time.perf_counter()
        for batch in batches:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss_sum, _, tokens = self.loss_terms(batch)
            optimizer_step(loss_sum, tokens, self.optimizer)
            counted.append(tokens)
        seconds = time.perf_counter() - started
        return int(sum(counted)), seconds

    @torch.no_grad()
    def time_beam(self, batches: list[Batch], autocast: bool, beam: int, length: int) -> tuple[int, float]:
        """(generated tokens, wall seconds) of beam search over `batches`."""
        self.model.eval()
        self.start_pass()
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            tokens = sum(self.beam_tokens(batch, beam, length) for batch in batches)
        return tokens, time.perf_counter() - started


class ModuleSide(Side):
    """A model of ours inside `DocMTModule`: the training loss and the beam search of our runs. Every
    timed pass starts with its frozen encoders' kept features forgotten (`nn/frozen.py`): it pays
    for their encoder passes, as a first epoch and a translation do."""

    def __init__(self, module, len_penalty: float):
        super().__init__(module, module.cfg.train.optim)
        self.len_penalty = len_penalty

    def start_pass(self) -> None:
        for sub in self.model.modules():
            if isinstance(sub, FrozenRowEncoder):
                sub.reset()

    def loss_terms(self, batch: Batch):
        return self.model.loss_terms(batch)

    def beam_tokens(self, batch: Batch, beam: int, length: int) -> int:
        hyps = decoding.beam_search(FullLengthDecoder(self.model.model), batch, beam=beam,
                                    len_penalty=self.len_penalty, max_len_a=0.0, max_len_b=length - 1)
        return sum(len(h.tokens) + 1 for h in hyps)  # `<eos>` included


@dataclass
class Workload:
    """What a side runs: its training batches (the first one only warms up) and its test batches."""

    train: list[Batch]
    decode: list[Batch]


def interleaved(sides: dict[str, Side], workloads: dict[str, Workload], autocast: bool, beam: int, length: int,
                repeats: int) -> tuple[dict[str, dict[str, list[float]]], dict[str, dict[str, list[int]]]]:
    """Every side on its workload: a warm-up (allocator, kernels, Adam state), then `repeats` repeats
    in which each side in turn trains on its timed batches and decodes its test batches, the order
    of the sides reversed every other repeat. (tokens/s, tokens) of every repeat, by figure
    (`FIGURES`) and side."""
    names = list(sides)
    for name in names:
        sides[name].time_training(workloads[name].train[:1], autocast)
        sides[name].time_beam(workloads[name].decode, autocast, beam, length)
    rates = {figure: {name: [] for name in names} for figure in FIGURES}
    tokens = {figure: {name: [] for name in names} for figure in FIGURES}
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            side, work = sides[name], workloads[name]
            timings = {"train": side.time_training(work.train[1:], autocast),
                       "beam": side.time_beam(work.decode, autocast, beam, length)}
            for figure, (count, seconds) in timings.items():
                rates[figure][name].append(count / seconds)
                tokens[figure][name].append(count)
    return rates, tokens


def check_counts(parser: argparse.ArgumentParser, args: argparse.Namespace, names: Iterable[str]) -> None:
    """One error line (`parser.error`, exit status 2) for the first option of `names` below 1."""
    for name in names:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")


def side_by_side_arguments(description: str, models: str, precisions: str) -> argparse.ArgumentParser:
    """The options of a benchmark that times models side by side (`interleaved`) on the batches of a
    run config; `models`: whom the `key=value` overrides apply to; `precisions`: the default ones."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--profile", default="cpu", help="sizes, vocabulary, batching and decoding settings")
    parser.add_argument("--corpus", default="bible:en-fr", help="corpus spec, e.g. synthetic:tiny")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train-batches", type=int, default=8, help="timed training steps per repeat")
    parser.add_argument("--decode-sentences", type=int, default=64, help="test sentences decoded per repeat")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--length", type=int, default=40, help="generated tokens per hypothesis, <eos> included")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--precisions", default=precisions, help=f"comma-separated: {', '.join(PRECISIONS)}")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("overrides", nargs="*", help=f"key=value config overrides ({models})")
    return parser


def parse_side_by_side(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The arguments of a `side_by_side_arguments` parser, checked: one error line for a count below
    1, or an unknown or empty precision; `precisions` becomes the list of their names."""
    args = parser.parse_args(argv)
    check_counts(parser, args, ("repeats", "train_batches", "decode_sentences", "beam", "length", "threads"))
    args.precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    if not args.precisions or any(p not in PRECISIONS for p in args.precisions):
        parser.error(f"--precisions: choose from {', '.join(PRECISIONS)}")
    return args


def run_benchmark(argv: list[str] | None, parse_args: Callable, measure: Callable, show: Callable) -> dict:
    """A benchmark's `main`: its arguments parsed, its report measured, shown, and written to the
    `--json` file when one is given; the report."""
    args = parse_args(argv)
    report = measure(args)
    show(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return report
