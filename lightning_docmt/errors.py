"""User-facing errors.

Every problem with user input (a corpus file, a config key, a command-line argument) is raised as
`DocMTInputError`. The CLI catches it, prints its one-line message on stderr and exits with status 2.
The message always names *where* the problem is (file and line, doc id, or config key path).
"""

from __future__ import annotations

from pathlib import Path


class DocMTInputError(Exception):
    """Bad user input; `str(err)` is the single line shown to the user."""

    def __init__(self, message: str, *, path: str | Path | None = None, line: int | None = None,
                 key: str | None = None):
        where = []
        if path is not None:
            where.append(f"{path}:{line}" if line is not None else str(path))
        if key is not None:
            where.append(f"key '{key}'")
        prefix = ": ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)
        self.path = str(path) if path is not None else None
        self.line = line
        self.key = key


class TrainingStopped(Exception):
    """A stage stopped on purpose (`callbacks/nonfinite_guard.py`); `str(err)` is the one line
    shown (the CLI exits with status 1, a table records the row as failed and goes on)."""
