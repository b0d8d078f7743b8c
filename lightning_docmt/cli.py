"""`docmt`: the command-line entry point (DESIGN.md section 9).

Every sub-command turns bad input (`DocMTInputError`) into one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Callable

from lightning_docmt.errors import DocMTInputError

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(name: str):
    def wrap(fn: Callable[[argparse.Namespace], int]):
        COMMANDS[name] = fn
        return fn

    return wrap


def _environment_defaults() -> None:
    os.environ.setdefault("WANDB_MODE", "offline")  # wandb never blocks on the network
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="docmt", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("stats", help="corpus statistics of a corpus spec")
    p.add_argument("spec")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("prepare", help="build vocabulary + binarized cache; print JSON stats")
    p.add_argument("config")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--profile")

    p = sub.add_parser("fit", help="train every stage of one run; print the run dir")
    p.add_argument("config", help="an experiment/table YAML or a run's config.yaml")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--row", help="a row of a table YAML")
    p.add_argument("--seed", type=int)
    p.add_argument("--profile")
    p.add_argument("--results", default="results", help="where table rows are written")

    p = sub.add_parser("test", help="metrics of a trained run on its test set")
    p.add_argument("run", help="a run directory or its config.yaml")
    p.add_argument("--ckpt")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("translate", help="translate JSONL documents or plain text")
    p.add_argument("--ckpt", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--beam", type=int)
    p.add_argument("--lenpen", type=float)

    p = sub.add_parser("contrastive", help="contrastive accuracy of a checkpoint on a suite")
    p.add_argument("--ckpt", required=True)
    p.add_argument("--suite", required=True)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("average", help="average the weights of Lightning checkpoints")
    p.add_argument("checkpoints", nargs="+", metavar="CKPT")
    p.add_argument("--out", required=True, help="the averaged checkpoint (written atomically)")

    p = sub.add_parser("table", help="run the rows of a table YAML")
    p.add_argument("table")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--rows", default="all")
    p.add_argument("--seeds")
    p.add_argument("--profile")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--results", default="results")

    p = sub.add_parser("demo", help="the demo table on the Bible corpus at the cpu profile")
    p.add_argument("--quick", action="store_true")

    p = sub.add_parser("bench", help="benchmarks; print measured ratios")
    p.add_argument("--only", help="comma-separated benchmarks (data_scale, training_step, zhang_efficiency); "
                                  "default: all")
    p.add_argument("--json")
    p.add_argument("--sentences", type=int, default=2_000_000, help="data-scale corpus size")
    return parser


def main(argv: list[str] | None = None) -> int:
    _environment_defaults()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # key=value overrides may stand before or after options (`--row r a.b=1 --seed 2 c=3`)
    if extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    from lightning_docmt import commands  # noqa: F401  (registers the sub-commands)

    try:
        return COMMANDS[args.command](args)
    except DocMTInputError as err:
        print(f"docmt {args.command}: error: {err}", file=sys.stderr)
        return 2


def print_json(obj: object, path: Path | None = None) -> None:
    text = json.dumps(obj, indent=1, sort_keys=False)
    if path is not None:
        path.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    # `python -m lightning_docmt.cli` runs this file as `__main__`, a second copy of the module: the
    # sub-commands register into `lightning_docmt.cli.COMMANDS`, so dispatch through that module.
    from lightning_docmt.cli import main as registered_main

    sys.exit(registered_main())
