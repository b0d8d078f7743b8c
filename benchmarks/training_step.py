"""Cost of a CPU training step and of beam search: the fused output loss and the attention.

Two implementation choices make CPU training faster per step (`cpu` profile):

- the loss fused with the output projection (`lightning_docmt/nn/output_loss.py`) against the plain
  label-smoothed loss over the whole (tokens, V) logits (`nn/reference_loss.label_smoothed_nll`);
- the attention (`nn/attention.py`, `CPU_ATTENTION`): ours, `masked_softmax_attention`, against
  PyTorch's math kernel and its CPU flash-attention kernel.

The benchmark builds the Transformer of a profile (`cpu` by default, plus `key=value` overrides),
takes real training batches of a corpus, and times forward + backward + Adam step for four
combinations, interleaved and repeated on the same batches; then beam search over test sentences
with each attention. It prints CPU seconds per step (the process's CPU time, which a busy
machine disturbs less than wall time), wall seconds, and the ratios to the old implementation.

    python benchmarks/training_step.py [--profile cpu] [--corpus bible:en-fr] [--repeats 3] \
        [--train-batches 8] [--decode-sentences 64] [--threads N] [--json out.json] [key=value ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if (REPO / "lightning_docmt").is_dir():  # a source checkout run without installing the package
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from lightning_docmt.batch import PAD_ID  # noqa: E402
from lightning_docmt.benchmarks.bench_common import optimizer_step, real_batches, target_tokens  # noqa: E402
from lightning_docmt.config.composition import compose  # noqa: E402
from lightning_docmt.inference import decoding  # noqa: E402
from lightning_docmt.nn import attention  # noqa: E402
from lightning_docmt.nn.reference_loss import label_smoothed_nll  # noqa: E402
from lightning_docmt.training.run import build_module  # noqa: E402
from lightning_docmt.training.trainer import resolve_precision  # noqa: E402

KERNELS = [*attention.CPU_KERNELS, attention.MASKED_SOFTMAX]  # the values of attention.CPU_ATTENTION
# (name, fused loss, attention); the first is the implementation before both changes
VARIANTS = [("unfused loss + flash attention", False, "flash"),
            ("fused loss + flash attention", True, "flash"),
            ("fused loss + math attention", True, "math"),
            ("fused loss + masked-softmax attention (default)", True, attention.MASKED_SOFTMAX)]


def unfused_loss_terms(module, batch):
    """The loss as computed before `output_loss.py`: full logits, then the label-smoothed loss."""
    return label_smoothed_nll(module.model(batch), batch["tgt_out"],
                              module.cfg.train.optim.label_smoothing, PAD_ID)


def train_step(module, optimizer, batch, fused: bool, autocast: bool) -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss_sum, _, ntok = module.loss_terms(batch) if fused else unfused_loss_terms(module, batch)
    optimizer_step(loss_sum, ntok, optimizer)


def timed(run) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of `run()`."""
    cpu, wall = time.process_time(), time.perf_counter()
    run()
    return time.process_time() - cpu, time.perf_counter() - wall


def measure(args: argparse.Namespace) -> dict:
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = compose(None, [f"data.corpus={args.corpus}", "model.arch=transformer", *args.overrides],
                  profile=args.profile)
    autocast = resolve_precision(cfg.train.precision, "cpu") == "bf16-mixed"
    datamodule, batches, decode_batches = real_batches(cfg, args.seed, args.train_batches + 1,
                                                      args.decode_sentences)
    sentences = sum(len(b["src"]) for b in decode_batches)
    module = build_module(cfg, datamodule).train()
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-5)
    steps = {name: [] for name, _, _ in VARIANTS}
    decodes = {kernel: [] for kernel in KERNELS}

    def train_all(fused):
        for batch in batches[1:]:
            train_step(module, optimizer, batch, fused, autocast)

    @torch.no_grad()
    def decode_all():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            for batch in decode_batches:
                decoding.beam_search(module.model, batch, beam=cfg.decode.beam,
                                     len_penalty=cfg.decode.len_penalty,
                                     max_len_a=cfg.decode.max_len_a, max_len_b=cfg.decode.max_len_b)

    for name, fused, kernel in VARIANTS:  # warm-up: allocator, kernels, Adam state
        attention.CPU_ATTENTION = kernel
        train_step(module, optimizer, batches[0], fused, autocast)
    for repeat in range(args.repeats):
        order = VARIANTS if repeat % 2 == 0 else VARIANTS[::-1]
        for name, fused, kernel in order:
            attention.CPU_ATTENTION = kernel
            cpu, wall = timed(lambda: train_all(fused))
            steps[name].append((cpu / args.train_batches, wall / args.train_batches))
        module.eval()
        for kernel in (KERNELS if repeat % 2 == 0 else KERNELS[::-1]):
            attention.CPU_ATTENTION = kernel
            cpu, wall = timed(decode_all)
            decodes[kernel].append((sentences / cpu, sentences / wall))
        module.train()
    attention.CPU_ATTENTION = attention.MASKED_SOFTMAX
    tokens = target_tokens(batches[1:]) / args.train_batches

    def median(pairs, i):
        return statistics.median(p[i] for p in pairs)

    base = VARIANTS[0][0]
    return {
        "config": {"profile": args.profile, "corpus": args.corpus, "threads": torch.get_num_threads(),
                   "precision": "bf16 autocast" if autocast else "float32", "d_model": cfg.model.d_model,
                   "layers": f"{cfg.model.enc_layers}+{cfg.model.dec_layers}",
                   "vocab": len(datamodule.tgt_vocab), "target_tokens_per_batch": round(tokens),
                   "beam": cfg.decode.beam, "decode_sentences": sentences, "repeats": args.repeats},
        "train_step": {name: {"cpu_s": median(v, 0), "wall_s": median(v, 1),
                              "speedup_cpu": median(steps[base], 0) / median(v, 0)}
                       for name, v in steps.items()},
        "beam_search": {kernel: {"sents_per_cpu_s": median(v, 0), "sents_per_s": median(v, 1),
                                 "ratio_to_flash": median(v, 0) / median(decodes["flash"], 0)}
                        for kernel, v in decodes.items()},
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--corpus", default="bible:en-fr")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train-batches", type=int, default=8)
    parser.add_argument("--decode-sentences", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: PyTorch's default)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json")
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args(argv)
    report = measure(args)
    print(json.dumps(report["config"]))
    for name, row in report["train_step"].items():
        print(f"train step  {name:<40} {row['cpu_s']:.3f} CPU-s  {row['wall_s']:.3f} s  "
              f"speed-up {row['speedup_cpu']:.2f}x")
    for kernel, row in report["beam_search"].items():
        print(f"beam search {kernel + ' attention':<40} {row['sents_per_cpu_s']:.1f} sents/CPU-s  "
              f"{row['sents_per_s']:.1f} sents/s  ratio to flash {row['ratio_to_flash']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
