"""Running `docmt` in-process from tests: its exit status, standard output and standard error; the
run config files of those runs (tiny runs on `synthetic:tiny`, caches and runs beside the file).

The `workdir` fixture (tests/conftest.py) is the working directory of a module of such runs."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_docmt.cli import main

CORPUS = "synthetic:tiny"
# One validation, at the end: the stored (best) checkpoint is then the final model, and 20 steps
# are enough for it to translate every test sentence into something non-empty.
FIT_SETTINGS = "train:\n  max_steps: 20\n  val_every_steps: 20\n"


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


def write_config(path: Path, body: str) -> Path:
    """A run config at `path`: `body` after the corpus and the cache and runs folders beside it."""
    root = path.parent
    path.write_text(f"data:\n  corpus: {CORPUS}\n  cache_dir: {root / 'cache'}\n"
                    f"logging:\n  runs_dir: {root / 'runs'}\n" + body)
    return path


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())
