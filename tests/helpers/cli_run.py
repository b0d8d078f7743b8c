"""Running `docmt` in-process from tests: its exit status, standard output and standard error."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_docmt.cli import main


@dataclass
class Outcome:
    code: int
    out: str
    err: str


def docmt(*argv: Any) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return Outcome(code, out.getvalue(), err.getvalue())


def run_dir_of(outcome: Outcome) -> Path:
    """The run directory that a successful `docmt fit` printed last."""
    assert outcome.code == 0, outcome.err
    return Path(outcome.out.strip().splitlines()[-1])
