"""Which process of a distributed launch this is, known before any process group exists.

Lightning's `ddp` strategy starts local ranks 1..N-1 by re-running the command with `LOCAL_RANK`
set; cluster launchers (torchrun, SLURM, jsrun) set their own rank variables. Code that runs
before `trainer.fit` (run directories, saved configs, run records, table reports) asks this so
that only global rank zero writes, while every rank still trains. Every rank shares the terminal:
`progress` prints a status line in one write, so that the lines of two ranks never interleave.
"""

from __future__ import annotations

import os
import sys

RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def is_global_zero() -> bool:
    """True unless a launcher's rank variable says this is another process of a distributed run."""
    return all(os.environ.get(name, "0") == "0" for name in RANK_VARIABLES)


def progress(message: str) -> None:
    """Print `[docmt] message` as one write (`print` writes the text and its newline separately, so
    two ranks printing at once could produce a line holding both and an empty line)."""
    sys.stdout.write(f"[docmt] {message}\n")
    sys.stdout.flush()
