"""`docmt`: the command-line entry point (docs/design.md section 9).

`COMMANDS` is the one table of sub-commands: name -> function (`commands.py`) taking the parsed
arguments (`parser.py`) and returning the exit status. Every sub-command turns bad input
(`DocMTInputError`) into one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from typing import Callable

from lightning_docmt.cli import commands, demo
from lightning_docmt.cli.parser import build_parser
from lightning_docmt.distributed import agree_on_exit_status, departed_rank
from lightning_docmt.errors import DocMTInputError, TrainingStopped
from lightning_docmt.logs import set_verbose

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "stats": commands.stats_command,
    "prepare": commands.prepare_command,
    "fit": commands.fit_command,
    "config": commands.config_command,
    "test": commands.test_command,
    "translate": commands.translate_command,
    "contrastive": commands.contrastive_command,
    "average": commands.average_command,
    "export": commands.export_command,
    "pretrain": commands.pretrain_command,
    "table": commands.table_command,
    "archive": commands.archive_command,
    "demo": demo.demo_command,
    "bench": commands.bench_command,
}


def _environment_defaults() -> None:
    os.environ.setdefault("WANDB_MODE", "offline")  # wandb never blocks on the network
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _failure_line(err: Exception) -> str | None:
    """The one line for a failure that is no bug of ours (else None: the traceback shows): a rank
    of this DDP run that died (the error here is its consequence), or a full disk."""
    departed = departed_rank()
    if departed is not None:
        return (f"{departed}, and this rank stopped with it ({type(err).__name__}); "
                f"`docmt fit --resume RUN_DIR` continues the run")
    if isinstance(err, OSError) and err.errno == errno.ENOSPC:
        return (f"no space left on the device while writing '{err.filename or 'a file'}'; every file "
                f"written before is intact (checkpoints are written aside and renamed into place)")
    return None


def main(argv: list[str] | None = None) -> int:
    _environment_defaults()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # key=value overrides may stand before or after options (`--row r a.b=1 --seed 2 c=3`)
    if extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    set_verbose(args.verbose)
    try:
        status = COMMANDS[args.command](args)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
    except DocMTInputError as err:
        departed = departed_rank()  # a table row failed because a rank of its DDP run died
        print(f"docmt {args.command}: error: {departed + ': ' if departed else ''}{err}", file=sys.stderr)
        status = 1 if departed else 2
    except TrainingStopped as err:
        print(f"docmt {args.command}: stopped: {err}", file=sys.stderr)
        status = 1
    except BrokenPipeError:  # the reader went away (`docmt stats ... | head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush cannot fail again
        status = 0
    except Exception as err:
        line = _failure_line(err)
        if line is None:
            raise
        print(f"docmt {args.command}: error: {line}", file=sys.stderr)
        status = 1
    return agree_on_exit_status(status)  # under DDP: rank zero fails when any rank does
