"""Data-pipeline scale benchmark: `prepare` (vocabulary + binarized cache) and one training epoch
of `DocumentWindowDataModule`, at two corpus sizes (a tenth of `--sentences`, and `--sentences`).

Each measurement runs in its own child process; the parent reads the child's wall time and peak
resident set size from `os.wait4` (the per-child form of `getrusage(RUSAGE_CHILDREN)`), so one
measurement never inherits another's peak. The epoch is iterated as rank 0 of a 2-rank world,
the way one DDP rank would see it; besides its peak RSS (which counts the memory-mapped token
pages it touched, shared with every other rank through the page cache) it reports its anonymous
(private) memory after imports, after setup and at the end of the epoch. Goals (docs/design.md
section 5): prepare of 2M sentence pairs in <= 10 minutes and <= 4 GB on 2 cores; a rank's
private memory nearly flat in corpus size (token ids stay in memory maps; only per-sentence
length/index arrays are held, a few bytes each).

Corpus generators (`--generator`): `synthetic` reads `synthetic:big?sentences=N` through the
corpus-spec dispatcher; `jsonl` writes N random-word sentence pairs (Zipf-distributed words from a
50k-word lexicon, 3-40 words, target = another lexicon in reversed order) in 1,000-sentence
documents, 0.5% of them valid and 0.5% test, and reads them with the `jsonl:` reader.

    python benchmarks/data_scale.py --sentences 2000000 --generator jsonl --json results.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
if (REPO / "lightning_docmt").is_dir():  # a source checkout run without installing the package
    sys.path.insert(0, str(REPO))

DOC_SENTENCES = 1_000


def write_random_jsonl(path: Path, sentences: int, seed: int = 0) -> None:
    import numpy as np

    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))

    def lexicon(size: int) -> list[str]:
        lengths = rng.integers(2, 12, size)
        return ["".join(rng.choice(letters, n)) for n in lengths]

    src_words, tgt_words = lexicon(50_000), lexicon(50_000)
    n_docs = -(-sentences // DOC_SENTENCES)
    held_out = n_docs // 200
    with open(path, "w", encoding="utf-8") as f:
        for d in range(n_docs):
            n = min(DOC_SENTENCES, sentences - d * DOC_SENTENCES)
            lengths = rng.integers(3, 41, n)
            words = (rng.zipf(1.2, int(lengths.sum())) - 1) % len(src_words)
            cuts = np.cumsum(lengths)[:-1]
            src = [" ".join(src_words[w] for w in s) for s in np.split(words, cuts)]
            tgt = [" ".join(tgt_words[w] for w in s[::-1]) for s in np.split(words, cuts)]
            split = "valid" if d < held_out else "test" if d < 2 * held_out else "train"
            f.write(json.dumps({"doc_id": f"d{d}", "src": src, "tgt": tgt, "split": split}) + "\n")


def corpus_spec(generator: str, sentences: int, workdir: Path) -> str:
    if generator == "synthetic":
        return f"synthetic:big?sentences={sentences}"
    path = workdir / f"random-{sentences}.jsonl"
    if not path.is_file():
        write_random_jsonl(path, sentences)
    return f"jsonl:{path}"


def configs(spec: str, cache_dir: str, workers: int, context: int):
    from lightning_docmt.config.schema import ContextConfig, DataConfig, VocabConfig

    data = DataConfig(corpus=spec, cache_dir=cache_dir, num_workers=workers)
    vocab = VocabConfig(type="bpe", size=8000, joint=True)
    return data, vocab, ContextConfig(prev_sentences=context)


def child_prepare(args: argparse.Namespace) -> dict:
    from lightning_docmt.data.prepare import prepare

    data, vocab, _ = configs(args.spec, args.cache, args.workers, args.context)
    return prepare(SimpleNamespace(data=data, vocab=vocab))


def _memory_mb() -> dict[str, int]:
    """Current anonymous (private heap) and file-backed (memory-mapped, shared through the page
    cache) resident memory of this process, from /proc/self/status."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) // 1024
    return {"anon_mb": fields["RssAnon"], "file_mb": fields["RssFile"]}


def child_iterate(args: argparse.Namespace) -> dict:
    from lightning_docmt.data.datamodule import DocumentWindowDataModule

    data, vocab, context = configs(args.spec, args.cache, args.workers, args.context)
    memory = {"imports": _memory_mb()}
    started = time.perf_counter()
    dm = DocumentWindowDataModule(data, vocab, context, seed=1, rank=0, world_size=2)
    dm.setup("fit")
    loader = dm.train_dataloader()
    setup_s, memory["setup"] = time.perf_counter() - started, _memory_mb()
    batches = sentences = tokens = 0
    started = time.perf_counter()
    for batch in loader:
        batches += 1
        sentences += len(batch["sent_index"])
        tokens += int((batch["tgt_out"] != 0).sum())
    iterate_s, memory["epoch_end"] = time.perf_counter() - started, _memory_mb()
    return {"setup_s": round(setup_s, 2), "iterate_s": round(iterate_s, 2), "batches": batches,
            "sentences": sentences, "tgt_tokens": tokens, "memory": memory}


def run_child(kind: str, spec: str, cache: Path, workers: int, context: int) -> dict:
    """Run one measurement in a child; its JSON result plus wall time and peak RSS."""
    cmd = [sys.executable, __file__, "--child", kind, "--spec", spec, "--cache", str(cache),
           "--workers", str(workers), "--context", str(context)]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{kind} child failed with status {status}")
    result = json.loads(out.strip().splitlines()[-1])
    return {**result, "wall_s": round(wall, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=2_000_000)
    parser.add_argument("--generator", choices=["synthetic", "jsonl"], default="synthetic")
    parser.add_argument("--workdir", type=Path, default=Path(".cache") / "bench-data",
                        help="where corpora and caches are written (default: ./.cache/bench-data)")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    parser.add_argument("--context", type=int, default=1, help="previous source sentences")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--child", choices=["prepare", "iterate"], help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child = child_prepare if args.child == "prepare" else child_iterate
        print(json.dumps(child(args)))
        return

    args.workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for sentences in (args.sentences // 10, args.sentences):
        generated = time.perf_counter()
        spec = corpus_spec(args.generator, sentences, args.workdir)
        generated = time.perf_counter() - generated
        cache = args.workdir / f"cache-{args.generator}-{sentences}"
        prep = run_child("prepare", spec, cache, args.workers, args.context)
        epoch = run_child("iterate", spec, cache, args.workers, args.context)
        rows.append({"sentences": sentences, "spec": spec, "generate_s": round(generated, 1),
                     "prepare": prep, "epoch_rank0_of_2": epoch})
        print(f"done {sentences:,} sentences", file=sys.stderr)

    print(f"{'sentences':>10} | {'prepare s':>9} | {'prepare MB':>10} | {'setup s':>7} | "
          f"{'epoch s':>7} | {'batches':>7} | {'sent/s':>7} | {'peak MB':>7} | "
          f"{'anon MB imports/setup/end':>25} | {'mapped MB':>9}")
    for row in rows:
        p, e = row["prepare"], row["epoch_rank0_of_2"]
        rate = e["sentences"] / max(e["iterate_s"], 1e-9)
        anon = "/".join(str(e["memory"][k]["anon_mb"]) for k in ("imports", "setup", "epoch_end"))
        print(f"{row['sentences']:>10,} | {p['wall_s']:>9} | {p['peak_rss_mb']:>10} | "
              f"{e['setup_s']:>7} | {e['iterate_s']:>7} | {e['batches']:>7} | {rate:>7.0f} | "
              f"{e['peak_rss_mb']:>7} | {anon:>25} | {e['memory']['epoch_end']['file_mb']:>9}")
    report = {"cpu_count": os.cpu_count(), "generator": args.generator, "workers": args.workers,
              "context": args.context, "rows": rows}
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
