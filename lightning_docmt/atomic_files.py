"""Files that appear complete or not at all: written to a hidden temporary file of this process
beside the target, then renamed over it (`os.replace`, atomic on one filesystem). A kill, a full
disk or an exception mid-write leaves the previous file (or none) where a reader looks; the
temporary file is removed on any failure this process survives, and a kill's leftover is a hidden
`.<name>.<pid>.tmp` that nothing reads. Used for every file whose presence or content a later run
trusts: a run's `metrics.json` (its presence means "finished"), `run.json`, a stage's `done.json`
(published) and `stage.json`, test outputs, table reports and figures, command outputs
(`checkpoints.save_atomically` does the same for checkpoints).

`DOCMT_TEST_KILL_BEFORE_RENAME=<file name>` is a test hook: the process kills itself (SIGKILL) right
after writing the temporary file of that name, before the rename, the worst moment for a kill.
"""

from __future__ import annotations

import csv
import io
import os
import signal
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

KILL_HOOK = "DOCMT_TEST_KILL_BEFORE_RENAME"


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """`write(temporary path)`, then the rename over `path`."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        if os.environ.get(KILL_HOOK) == path.name:
            os.kill(os.getpid(), signal.SIGKILL)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomically(path: Path, text: str) -> None:
    write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_csv_atomically(path: Path, rows: Iterable[Sequence[Any]]) -> None:
    """`rows` as CSV (the `csv` module's dialect, `\r\n` line ends)."""
    buffer = io.StringIO(newline="")
    csv.writer(buffer).writerows(rows)
    write_atomically(path, lambda tmp: tmp.write_bytes(buffer.getvalue().encode("utf-8")))


def save_figure_atomically(figure: Any, path: Path, dpi: int) -> None:
    """A matplotlib figure in the format its file name ends with (`.png`)."""
    write_atomically(path, lambda tmp: figure.savefig(tmp, dpi=dpi, format=path.suffix.lstrip(".")))
