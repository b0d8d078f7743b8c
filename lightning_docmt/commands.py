"""The sub-commands behind `docmt` (registered into `cli.COMMANDS`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lightning_docmt.cli import command, print_json
from lightning_docmt.errors import DocMTInputError


def _overrides(args: argparse.Namespace) -> list[str]:
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        raise DocMTInputError(f"expected key=value overrides, got '{bad[0]}'")
    return list(args.overrides)


def load_run_config(args: argparse.Namespace):
    """A plain experiment YAML, a run's config.yaml, or a row of a table YAML (--row)."""
    from lightning_docmt import config as config_lib, tables

    path = Path(args.config)
    overrides = _overrides(args)
    if getattr(args, "seed", None) is not None:
        overrides.append(f"train.seed={args.seed}")
    if tables.is_table_file(path):
        if not args.row:
            raise DocMTInputError("a table file needs --row NAME (or use `docmt table`)", path=path)
        table = tables.load_table(path)
        return tables.compose_row(table, args.row, profile=args.profile, cli_overrides=overrides)
    if args.row:
        raise DocMTInputError("--row is only valid with a table file", path=path)
    return config_lib.compose(path, overrides, profile=args.profile)


@command("stats")
def stats_command(args: argparse.Namespace) -> int:
    from lightning_docmt.data.corpora import read_corpus
    from lightning_docmt.data.stats import corpus_stats

    stats = corpus_stats(read_corpus(args.spec))
    if args.json:
        print_json(stats)
    else:
        for key, value in stats.items():
            print(f"{key:>12}: {value}")
    return 0


@command("prepare")
def prepare_command(args: argparse.Namespace) -> int:
    from lightning_docmt import config as config_lib
    from lightning_docmt.data.prepare import prepare

    cfg = config_lib.compose(Path(args.config), _overrides(args), profile=args.profile)
    print_json(prepare(cfg))
    return 0


@command("fit")
def fit_command(args: argparse.Namespace) -> int:
    from lightning_docmt.train import fit_run

    run_dir = fit_run(load_run_config(args))
    print(run_dir)
    return 0


@command("test")
def test_command(args: argparse.Namespace) -> int:
    from lightning_docmt import config as config_lib
    from lightning_docmt.train import test_checkpoint

    run = Path(args.run)
    run_dir = run.parent if run.is_file() else run
    cfg = config_lib.compose(run_dir / "config.yaml", [])
    if args.ckpt:
        ckpt = Path(args.ckpt)
    else:
        record = run_dir / "metrics.json"
        if not record.is_file():
            raise DocMTInputError("no metrics.json (unfinished run?): pass --ckpt", path=run_dir)
        ckpt = Path(json.loads(record.read_text())["checkpoint"])
    if not ckpt.is_file():
        raise DocMTInputError("no such checkpoint", path=ckpt)
    scores = test_checkpoint(cfg, ckpt, run_dir)
    if args.json:
        print_json(scores)
    else:
        for key, value in scores.items():
            print(f"{key:>12}: {value:.4f}")
    return 0


@command("table")
def table_command(args: argparse.Namespace) -> int:
    from lightning_docmt import tables
    from lightning_docmt.train import fit_run

    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else None
    rows = "all" if args.rows == "all" else args.rows.split(",")
    result = tables.run_table(Path(args.table), rows=rows, seeds=seeds, profile=args.profile,
                              cli_overrides=_overrides(args), run_row=tables.fit_and_read_metrics(fit_run),
                              results_dir=Path(args.results), dry_run=args.dry_run)
    if not args.dry_run:
        print(result.markdown)
        print(f"\nresults: {result.directory}")
    return 0
