"""Peak memory of `docmt translate` against the length of one document: it should stay flat.

`docmt translate` reads its input as a stream, translates it a chunk of sentences at a time and
writes each chunk's translations before it reads the next (`lightning_docmt/inference/translate.py`),
keeping of a document only the context window its next sentences read. This benchmark measures
that: for every architecture that translates, a random model of the `tiny` profile (weights do
not change the memory a translation needs) translates a plain-text file holding ONE document of
N sentences of random words, for each N of `--sentences` (default 1,000 and 10,000), each time
in a fresh process (`docmt translate` through the CLI's entry point) that reports its peak
resident set (VmHWM of /proc/self/status), its resident set before the translation started (the
imports) and the wall time. Per architecture the report gives the growth of the peak from the
smallest N to the largest, in MiB and in KiB per 1,000 sentences.

The rows: `transformer`, `concat` (two previous sentences), `zhang_doc` (two previous, one next),
`flat` (one previous, one next), `lifeng_coattn`, `pas` (Donato et al.'s stack over MiniLM's
sizes, its weights random: `random_weights`), and Yamagishi & Komachi's RNN four ways: the
sentence baseline (`yk_rnn`), the separated source-context model (`yk_rnn_separated`), the
shared-context model, decoded in document order from the states its own outputs hand on
(`yk_rnn_shared`, side mix), and a target-side context model that reads its own previous
translations (`yk_rnn_target`, separated, side target), also in document order.

`--per-document K` cuts the file into documents of K sentences instead (a document-order model
then decodes up to 128 of them side by side, which is much faster than one sentence per batch).
The two document-order rows take minutes at 10,000 sentences in one document: each of its
sentences is a batch of its own, decoded after the one before it.

    python benchmarks/translate_memory.py [--archs transformer,yk_rnn_shared] \
        [--sentences 1000,10000] [--per-document K] [--threads 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if (REPO / "lightning_docmt").is_dir():  # a source checkout run without installing the package
    sys.path.insert(0, str(REPO))

MINILM = "minilm"
ARCHS: dict[str, list[str]] = {
    "transformer": [],
    "concat": ["model.arch=concat", "context.prev_sentences=2"],
    "zhang_doc": ["model.arch=zhang_doc", "context.prev_sentences=2", "context.next_sentences=1"],
    "flat": ["model.arch=flat", "context.prev_sentences=1", "context.next_sentences=1"],
    "lifeng_coattn": ["model.arch=lifeng_coattn"],
    "pas": ["model.arch=pas", f"model.context_encoders.bert.checkpoint={MINILM}",
            "model.context_encoders.bert.random_weights=true",
            "model.stack=[{stream: bert_pc, encoder: bert}, {stream: bert_cn, encoder: bert}]",
            "context.streams.bert_pc.prev=1", "context.streams.bert_cn.next=1"],
    "yk_rnn": ["model.arch=yk_rnn"],
    "yk_rnn_separated": ["model.arch=yk_rnn", "model.context=separated", "context.prev_sentences=1"],
    "yk_rnn_shared": ["model.arch=yk_rnn", "model.context=shared", "context.side=mix"],
    "yk_rnn_target": ["model.arch=yk_rnn", "model.context=separated", "context.side=target",
                      "context.prev_sentences=1"],
}
WORDS = [f"w{i}" for i in range(200)]
SENTENCE_WORDS = (4, 12)  # words per sentence, drawn uniformly
DECODE = ["decode.beam=2", "decode.max_len_a=1.0", "decode.max_len_b=2"]  # outputs as long as inputs


def write_checkpoint(path: Path, overrides: list[str], *, seed: int = 0, words: list[str] = WORDS) -> Path:
    """A self-contained checkpoint (`inference/loaded_model.py`) of a random `tiny` model of
    `overrides` over a word vocabulary of `words` (source and target), as `docmt translate` reads one."""
    import torch
    from omegaconf import OmegaConf

    from lightning_docmt.checkpoints import VOCAB_KEY, pack_vocabularies
    from lightning_docmt.config.composition import compose
    from lightning_docmt.config.registry import build_model
    from lightning_docmt.data.vocab import WordVocab

    cfg = compose(None, ["data.corpus=synthetic:tiny", *DECODE, *overrides], profile="tiny")
    vocab = WordVocab(words)
    torch.manual_seed(seed)
    model = build_model(cfg.model, len(vocab), len(vocab))
    torch.save({"hyper_parameters": {"config": OmegaConf.to_container(cfg, resolve=True),
                                     "src_vocab_size": len(vocab), "tgt_vocab_size": len(vocab)},
                "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                VOCAB_KEY: pack_vocabularies(vocab, vocab)}, path)
    return path


def write_document(path: Path, sentences: int, *, per_document: int = 0, seed: int = 0,
                   words: tuple[int, int] = SENTENCE_WORDS) -> Path:
    """A plain-text file of `sentences` lines of random `WORDS` (as many as `words` gives, drawn
    uniformly): one document, or documents of `per_document` sentences (an empty line between
    them) when it is positive."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(sentences):
            if per_document > 0 and i and i % per_document == 0:
                f.write("\n")
            f.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(*words))) + "\n")
    return path


def status_mib(field: str) -> float:
    """A `kB` field of /proc/self/status (VmHWM: the peak resident set, VmRSS: the current one), in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(checkpoint: str, source: str, output: str, threads: int) -> None:
    """Run `docmt translate` in this (fresh) process; print its memory and time as one JSON line."""
    import torch

    from lightning_docmt.cli import main

    torch.set_num_threads(threads)
    start = status_mib("VmRSS")
    wall = time.perf_counter()
    code = main(["translate", "--ckpt", checkpoint, "--input", source, "--output", output, "--device", "cpu"])
    print(json.dumps({"code": code, "wall_s": round(time.perf_counter() - wall, 2),
                      "start_rss_mib": round(start, 1), "peak_rss_mib": round(status_mib("VmHWM"), 1)}))


def measure_one(checkpoint: Path, source: Path, output: Path, threads: int) -> dict:
    """The child's report (a fresh process: its peak is this translation's alone)."""
    done = subprocess.run([sys.executable, __file__, "--child", str(checkpoint), str(source), str(output),
                           "--threads", str(threads)], capture_output=True, text=True,
                          env={**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"translate failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(archs: list[str], sizes: list[int], threads: int, root: Path, per_document: int = 0,
            overrides: tuple[str, ...] = (), words: tuple[int, int] = SENTENCE_WORDS) -> dict:
    """The report of `main` (`overrides`: config overrides of every model, after the row's;
    `words`: the fewest and most words of a sentence)."""
    rows = {}
    inputs = {n: write_document(root / f"doc{n}.{per_document}.{words[0]}-{words[1]}.txt", n,
                                per_document=per_document, words=words) for n in sizes}
    for arch in archs:
        checkpoint = write_checkpoint(root / f"{arch}.ckpt", [*ARCHS[arch], *overrides])
        runs = {str(n): measure_one(checkpoint, inputs[n], root / f"{arch}.{n}.out.txt", threads) for n in sizes}
        small, large = runs[str(min(sizes))], runs[str(max(sizes))]
        growth = large["peak_rss_mib"] - small["peak_rss_mib"]
        span = (max(sizes) - min(sizes)) / 1000
        rows[arch] = {**runs, "growth_mib": round(growth, 1),
                      "growth_kib_per_1k_sentences": round(growth * 1024 / span, 1) if span else 0.0}
    return {"config": {"profile": "tiny", "sentences": sizes, "words_per_sentence": list(words),
                       "decode": DECODE, "overrides": list(overrides), "threads": threads,
                       "sentences_per_document": per_document or "all"},
            "rows": rows}


def main(argv: list[str] | None = None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default=",".join(ARCHS), help=f"comma-separated, of {', '.join(ARCHS)}")
    parser.add_argument("--sentences", default="1000,10000", help="document lengths, comma-separated")
    parser.add_argument("--per-document", type=int, default=0,
                        help="sentences per document (default 0: the whole file is one document)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each translation")
    parser.add_argument("--json")
    parser.add_argument("--child", nargs=3, metavar=("CKPT", "INPUT", "OUTPUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child, threads=args.threads)
        return None
    archs = [a.strip() for a in args.archs.split(",") if a.strip()]
    unknown = [a for a in archs if a not in ARCHS]
    if unknown:
        parser.error(f"unknown arch '{unknown[0]}'; available: {', '.join(ARCHS)}")
    sizes = sorted(int(n) for n in args.sentences.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        report = measure(archs, sizes, args.threads, Path(tmp), args.per_document)
    print(json.dumps(report["config"]))
    for arch, row in report["rows"].items():
        peaks = "  ".join(f"{n}: {row[str(n)]['peak_rss_mib']:.1f} MiB ({row[str(n)]['wall_s']:.1f} s)"
                          for n in sizes)
        print(f"{arch:<18} peak RSS  {peaks}  growth {row['growth_mib']:+.1f} MiB "
              f"({row['growth_kib_per_1k_sentences']:+.1f} KiB per 1,000 sentences)")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
