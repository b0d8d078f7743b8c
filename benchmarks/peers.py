"""Our sentence Transformer against `transformers.MarianMTModel` at identical sizes, on the same real batches.

Is the cost per token of our Transformer (`lightning_docmt/models/transformer.py`) in line with a
widely used implementation of the same model? MarianMTModel is that model: post-LN encoder and
decoder layers, ReLU FFN, sinusoidal positions, token embeddings scaled by sqrt(d_model), one table
shared by source and target tokens and tied to the output projection. Both are built from one run
config (`marian_config` maps ours onto Marian's): the `cpu` profile's with `PEER_SIZES` (d_model
256, 4 heads, FFN 1024, 3+3 layers, dropout 0.1; `--sizes profile` keeps the profile's own), its
joint vocabulary (8k on the Bible en-fr corpus that the profile's runs train on), label smoothing
0.1 and Adam. Both read the same batches, the DataModule's (those a run of the config trains and
decodes), and are timed side by side in wall time, interleaved (who goes first alternates) and
repeated after a warm-up, in float32 and under bf16 autocast (`torch.autocast("cpu", bfloat16)`):

- training: target tokens/s of forward + label-smoothed loss + backward + Adam step over the same
  sequence of training batches. Ours runs the loss our training runs (`DocMTModule.loss_terms`: the
  output projection fused with the label-smoothed loss, `nn/output_loss.py`); Marian computes its
  logits, then the same label-smoothed loss (`nn/reference_loss.label_smoothed_nll`), which is what a
  user of transformers would write.
- beam search: generated tokens/s of beam 4 over the same test sentences, every hypothesis forced to
  `--length` tokens (40) on both sides: the models are untrained and would stop anywhere, so both run
  the same number of decoder steps and the figures compare the cost of a step. Ours is
  `inference/decoding.beam_search` with `<eos>` held back until it is forced after `--length` - 1
  tokens (`bench_common.FullLengthDecoder`); Marian is `generate(num_beams=4,
  min_new_tokens=length, max_new_tokens=length)`. `<eos>` counts as a generated token; `<pad>` and
  `<s>` are never generated on either side.

The report, one JSON object (printed; `--json` also writes it, e.g. to `benchmarks/results/`), gives
per precision the median tokens/s of each side with the min and max over the repeats, ours / Marian
(the ratio of the medians, and the min and max of the per-repeat ratios), the tokens each side
processed per repeat (equal on both sides, by construction), the trainable parameters of both
(equal when the dimensions are) and the machine (CPU, native bf16 flags, torch, threads). Timings on
a shared machine are noisy: compare ratios measured in the same run.

    python benchmarks/peers.py [--profile cpu] [--corpus bible:en-fr] [--sizes peer|profile] \
        [--repeats 3] [--train-batches 8] [--decode-sentences 64] [--length 40] [--threads 2] \
        [--precisions fp32,bf16] [--json out.json] [key=value ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from abc import ABC, abstractmethod
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if (REPO / "lightning_docmt").is_dir():  # a source checkout run without installing the package
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import MarianConfig, MarianMTModel  # noqa: E402

from lightning_docmt.batch import BOS_ID, EOS_ID, PAD_ID  # noqa: E402
from lightning_docmt.benchmarks.bench_common import (  # noqa: E402
    Batch,
    FullLengthDecoder,
    optimizer_step,
    real_batches,
    spread,
    target_tokens,
)
from lightning_docmt.config.composition import compose  # noqa: E402
from lightning_docmt.inference import decoding  # noqa: E402
from lightning_docmt.nn import attention  # noqa: E402
from lightning_docmt.nn.reference_loss import label_smoothed_nll  # noqa: E402
from lightning_docmt.training.run import build_module  # noqa: E402
from lightning_docmt.training.trainer import CPUINFO  # noqa: E402

# The dimensions compared (issue 36): over the profile's, whose vocabulary (cpu: 8k) is kept.
PEER_SIZES = ["model.d_model=256", "model.heads=4", "model.ffn_dim=1024", "model.enc_layers=3",
              "model.dec_layers=3", "model.dropout=0.1"]
PRECISIONS = {"fp32": False, "bf16": True}  # name: under bf16 autocast
SIDES = ("ours", "marian")
ADAM_LR = 1e-4  # the step's cost does not depend on it; small, so that the untrained models stay finite


def marian_config(model_cfg, vocab_size: int) -> MarianConfig:
    """Marian at the sizes and options of our `model_cfg`. `<s>` starts the decoder, as ours; no
    forced `<eos>` at the maximum length (the benchmark forces the length itself)."""
    if model_cfg.pre_norm:
        raise ValueError("MarianMTModel is post-LN: model.pre_norm must be false")
    return MarianConfig(
        vocab_size=vocab_size, d_model=model_cfg.d_model, max_position_embeddings=model_cfg.max_positions,
        encoder_layers=model_cfg.enc_layers, decoder_layers=model_cfg.dec_layers,
        encoder_attention_heads=model_cfg.heads, decoder_attention_heads=model_cfg.heads,
        encoder_ffn_dim=model_cfg.ffn_dim, decoder_ffn_dim=model_cfg.ffn_dim, activation_function="relu",
        dropout=model_cfg.dropout, attention_dropout=model_cfg.attn_dropout,
        activation_dropout=model_cfg.relu_dropout, scale_embedding=True,
        share_encoder_decoder_embeddings=model_cfg.share_embeddings, tie_word_embeddings=model_cfg.tie_output,
        pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID, decoder_start_token_id=BOS_ID,
        forced_eos_token_id=None)


def trainable_parameters(model: torch.nn.Module) -> int:
    """Trainable parameters, each shared tensor once (Marian's sinusoid table is a frozen parameter)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


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

    def time_training(self, batches: list[Batch], autocast: bool) -> tuple[int, float]:
        """(target tokens the loss counted, wall seconds) of one training step per batch."""
        self.model.train()
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
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            tokens = sum(self.beam_tokens(batch, beam, length) for batch in batches)
        return tokens, time.perf_counter() - started


class Ours(Side):
    """Our Transformer inside `DocMTModule`: the training loss and the beam search of our runs."""

    def __init__(self, module, len_penalty: float):
        super().__init__(module, module.cfg.train.optim)
        self.len_penalty = len_penalty

    def loss_terms(self, batch: Batch):
        return self.model.loss_terms(batch)

    def beam_tokens(self, batch: Batch, beam: int, length: int) -> int:
        hyps = decoding.beam_search(FullLengthDecoder(self.model.model), batch, beam=beam,
                                    len_penalty=self.len_penalty, max_len_a=0.0, max_len_b=length - 1)
        return sum(len(h.tokens) + 1 for h in hyps)  # `<eos>` included


class Marian(Side):
    """`MarianMTModel`: its logits and the same label-smoothed loss; `generate` for beam search."""

    def __init__(self, model: MarianMTModel, optim_cfg, len_penalty: float):
        super().__init__(model, optim_cfg)
        self.smoothing = optim_cfg.label_smoothing
        self.len_penalty = len_penalty

    def loss_terms(self, batch: Batch):
        src = batch["src"]
        logits = self.model(input_ids=src, attention_mask=src.ne(PAD_ID), decoder_input_ids=batch["tgt_in"],
                            use_cache=False).logits
        return label_smoothed_nll(logits, batch["tgt_out"], self.smoothing, PAD_ID)

    def beam_tokens(self, batch: Batch, beam: int, length: int) -> int:
        src = batch["src"]
        out = self.model.generate(input_ids=src, attention_mask=src.ne(PAD_ID), num_beams=beam,
                                  min_new_tokens=length, max_new_tokens=length, do_sample=False,
                                  length_penalty=self.len_penalty, suppress_tokens=[PAD_ID, BOS_ID])
        return int(out[:, 1:].ne(PAD_ID).sum())  # after the decoder's start token; a short one is padded


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
    """The CPU (model name, native bf16 flags), torch and transformers versions, and torch's threads."""
    text = CPUINFO.read_text() if CPUINFO.is_file() else ""
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    return {"cpu": fields.get("model name", "unknown"), "avx512_bf16": "avx512_bf16" in flags,
            "amx_bf16": "amx_bf16" in flags, "torch": torch.__version__,
            "transformers": transformers.__version__, "threads": torch.get_num_threads()}


def ratio(ours: list[float], marian: list[float]) -> dict[str, float]:
    """Ours / Marian: the ratio of the medians, and the min and max of the per-repeat ratios."""
    per_repeat = [a / b for a, b in zip(ours, marian)]
    return {"median": statistics.median(ours) / statistics.median(marian), "min": min(per_repeat),
            "max": max(per_repeat)}


def measure_precision(sides: dict[str, Side], train: list[Batch], decode: list[Batch], autocast: bool,
                      args: argparse.Namespace) -> dict:
    """Both sides under one precision: a warm-up, then `args.repeats` interleaved repeats."""
    for side in sides.values():  # warm-up: allocator, kernels, Adam state
        side.time_training(train[:1], autocast)
        side.time_beam(decode, autocast, args.beam, args.length)
    rates = {figure: {name: [] for name in SIDES} for figure in ("train", "beam")}
    tokens = {figure: {name: set() for name in SIDES} for figure in ("train", "beam")}
    for repeat in range(args.repeats):
        for name in SIDES if repeat % 2 == 0 else SIDES[::-1]:
            timings = {"train": sides[name].time_training(train[1:], autocast),
                       "beam": sides[name].time_beam(decode, autocast, args.beam, args.length)}
            for figure, (count, seconds) in timings.items():
                rates[figure][name].append(count / seconds)
                tokens[figure][name].add(count)
    report = {}
    for figure in ("train", "beam"):
        report[f"{figure}_tokens_per_s"] = {name: spread(rates[figure][name]) for name in SIDES}
        report[f"{figure}_ratio_vs_marian"] = ratio(rates[figure]["ours"], rates[figure]["marian"])
    report["tokens_per_repeat"] = {figure: {name: sorted(counts) for name, counts in by_side.items()}
                                   for figure, by_side in tokens.items()}
    return report


def build_sides(cfg, datamodule, seed: int) -> dict[str, Side]:
    """Our module and the Marian model of the same config, each from the same seed."""
    torch.manual_seed(seed)
    ours = Ours(build_module(cfg, datamodule), cfg.decode.len_penalty)
    torch.manual_seed(seed)
    marian = MarianMTModel(marian_config(cfg.model, len(datamodule.tgt_vocab)))
    return {"ours": ours, "marian": Marian(marian, cfg.train.optim, cfg.decode.len_penalty)}


def setup_report(args: argparse.Namespace, cfg, train: list[Batch], decode: list[Batch], marian: MarianMTModel,
                 vocab: int) -> dict:
    """What both sides ran: the config's sizes and options, the attention kernels, the batches."""
    model = cfg.model
    return {"profile": args.profile, "corpus": args.corpus, "sizes": args.sizes, "overrides": args.overrides,
            "d_model": model.d_model, "heads": model.heads, "ffn_dim": model.ffn_dim,
            "layers": [model.enc_layers, model.dec_layers], "vocab": vocab, "dropout": model.dropout,
            "label_smoothing": cfg.train.optim.label_smoothing,
            "tied": {"src_tgt_embeddings": model.share_embeddings, "output": model.tie_output},
            "attention": {"ours": [b.name for b in attention.CPU_ATTENTION_BACKENDS],
                          "marian": marian.config._attn_implementation},
            "repeats": args.repeats, "train_batches": len(train) - 1, "train_target_tokens": target_tokens(train[1:]),
            "beam": args.beam, "length": args.length, "decode_sentences": sum(len(b["src"]) for b in decode)}


def measure(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    sizes = PEER_SIZES if args.sizes == "peer" else []
    cfg = compose(None, [f"data.corpus={args.corpus}", "model.arch=transformer", *sizes, *args.overrides],
                  profile=args.profile)
    datamodule, train, test = real_batches(cfg, args.seed, args.train_batches + 1, args.decode_sentences)
    decode = first_sentences(test, args.decode_sentences)
    sides = build_sides(cfg, datamodule, args.seed)
    return {
        "setup": setup_report(args, cfg, train, decode, sides["marian"].model, len(datamodule.tgt_vocab)),
        "machine": machine(),
        "parameters": {name: trainable_parameters(side.model) for name, side in sides.items()},
        "precisions": {name: measure_precision(sides, train, decode, PRECISIONS[name], args)
                       for name in args.precisions},
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="cpu", help="batching, vocabulary and decoding settings")
    parser.add_argument("--corpus", default="bible:en-fr", help="corpus spec, e.g. synthetic:tiny")
    parser.add_argument("--sizes", choices=["peer", "profile"], default="peer",
                        help="peer: d_model 256, 4 heads, FFN 1024, 3+3 layers, dropout 0.1; profile: the profile's")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train-batches", type=int, default=8, help="timed training steps per repeat")
    parser.add_argument("--decode-sentences", type=int, default=64, help="test sentences decoded per repeat")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--length", type=int, default=40, help="generated tokens per hypothesis, <eos> included")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--precisions", default="fp32,bf16", help=f"comma-separated: {', '.join(PRECISIONS)}")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("overrides", nargs="*", help="key=value config overrides (both models)")
    args = parser.parse_args(argv)
    for name in ("repeats", "train_batches", "decode_sentences", "beam", "length", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    args.precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    if not args.precisions or any(p not in PRECISIONS for p in args.precisions):
        parser.error(f"--precisions: choose from {', '.join(PRECISIONS)}")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    report = measure(args)
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
