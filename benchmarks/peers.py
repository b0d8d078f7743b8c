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
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if (REPO / "lightning_docmt").is_dir():  # a source checkout run without installing the package
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import MarianConfig, MarianMTModel  # noqa: E402

from lightning_docmt.batch import BOS_ID, EOS_ID, PAD_ID  # noqa: E402
from lightning_docmt.benchmarks.bench_common import (  # noqa: E402
    FIGURES,
    PRECISIONS,
    Batch,
    ModuleSide,
    Side,
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
from lightning_docmt.config.composition import compose  # noqa: E402
from lightning_docmt.nn import attention  # noqa: E402
from lightning_docmt.nn.reference_loss import label_smoothed_nll  # noqa: E402
from lightning_docmt.training.run import build_module  # noqa: E402

# The dimensions compared (issue 36): over the profile's, whose vocabulary (cpu: 8k) is kept.
PEER_SIZES = ["model.d_model=256", "model.heads=4", "model.ffn_dim=1024", "model.enc_layers=3",
              "model.dec_layers=3", "model.dropout=0.1"]
SIDES = ("ours", "marian")


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


def measure_precision(sides: dict[str, Side], train: list[Batch], decode: list[Batch], autocast: bool,
                      args: argparse.Namespace) -> dict:
    """Both sides under one precision, on the same batches: a warm-up, then `args.repeats` interleaved repeats."""
    workload = Workload(train, decode)
    rates, tokens = interleaved(sides, {name: workload for name in SIDES}, autocast, args.beam, args.length,
                                args.repeats)
    report = {}
    for figure in FIGURES:
        report[f"{figure}_tokens_per_s"] = {name: spread(rates[figure][name]) for name in SIDES}
        report[f"{figure}_ratio_vs_marian"] = ratio(rates[figure]["ours"], rates[figure]["marian"])
    report["tokens_per_repeat"] = {figure: {name: sorted(set(counts)) for name, counts in by_side.items()}
                                   for figure, by_side in tokens.items()}
    return report


def build_sides(cfg, datamodule, seed: int) -> dict[str, Side]:
    """Our module and the Marian model of the same config, each from the same seed."""
    torch.manual_seed(seed)
    ours = ModuleSide(build_module(cfg, datamodule), cfg.decode.len_penalty)
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
            "attention": {"ours": attention.CPU_ATTENTION,
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
        "machine": {**machine(), "transformers": transformers.__version__},
        "parameters": {name: trainable_parameters(side.model) for name, side in sides.items()},
        "precisions": {name: measure_precision(sides, train, decode, PRECISIONS[name], args)
                       for name in args.precisions},
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = side_by_side_arguments(__doc__.split("\n\n")[0], "both models", "fp32,bf16")
    parser.add_argument("--sizes", choices=["peer", "profile"], default="peer",
                        help="peer: d_model 256, 4 heads, FFN 1024, 3+3 layers, dropout 0.1; profile: the profile's")
    return parse_side_by_side(parser, argv)


def main(argv: list[str] | None = None) -> dict:
    return run_benchmark(argv, parse_args, measure, lambda report: print(json.dumps(report, indent=1)))


if __name__ == "__main__":
    main()
