"""Starting and writing wandb runs, every call guarded (docs/design.md section 10): wandb trouble is
one warning, after which that run logs nothing more; it never stops training or a table.

`WANDB_MODE` chooses the mode: `offline` when unset (a run is written under its `dir`, to be
uploaded later with `wandb sync`), `disabled` starts no run. In `online` mode a server that cannot
be reached is given `DOCMT_WANDB_INIT_TIMEOUT` seconds (default 30; wandb's own default is 90 and
it retries past it) before the start fails with its one warning and training goes on without it.
The suite's runs are those of `training/dashboard.py` (one per training run, spanning its stages)
and `tables/dashboard.py` (one per table report).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Mapping

from lightning_docmt.errors import DocMTInputError

log = logging.getLogger(__name__)


INIT_TIMEOUT_VARIABLE = "DOCMT_WANDB_INIT_TIMEOUT"
DEFAULT_INIT_TIMEOUT_S = 30.0


def init_timeout() -> float:
    """`DOCMT_WANDB_INIT_TIMEOUT` in seconds (a positive number), else the default."""
    raw = os.environ.get(INIT_TIMEOUT_VARIABLE, "")
    try:
        value = float(raw) if raw else DEFAULT_INIT_TIMEOUT_S
    except ValueError:
        value = -1.0
    if value <= 0:
        raise DocMTInputError(f"{INIT_TIMEOUT_VARIABLE}={raw!r}: expected a positive number of seconds")
    return value


def wandb_mode() -> str:
    """`WANDB_MODE`, `offline` when unset."""
    return os.environ.get("WANDB_MODE", "offline")


class GuardedRun:
    """A wandb run (None: wandb is off) whose calls go through `call`: the first call that raises
    is warned about and turns the run off, so that nothing more is tried but `finish`."""

    def __init__(self, run: Any = None):
        self.run = run
        self.alive = run is not None

    def call(self, what: str, action: Callable[[], Any]) -> bool:
        """Run `action` unless the run is off; whether it ran without raising."""
        if not self.alive:
            return False
        try:
            action()
        except Exception as err:  # wandb raises many types (network, usage, file errors)
            self.alive = False
            _warn(what, err)
            return False
        return True

    def summarize(self, values: Mapping[str, Any]) -> bool:
        """Set these keys of the run's summary."""
        return self.call("summary", lambda: self.run.summary.update(dict(values)))

    def finish(self, exit_code: int = 0) -> bool:
        """End the run, also after a failed call (its files are closed either way), and turn it off;
        exit code 1 marks a run that stopped on an error."""
        if self.run is None:
            return False
        self.alive = True
        finished = self.call("finish", lambda: self.run.finish(exit_code=exit_code))
        self.alive = False
        return finished


def start_run(**init: Any) -> GuardedRun:
    """A new run (`wandb.init(**init)` in `wandb_mode()`, never reusing a run in progress); a run
    that is off when the mode is `disabled` or the start failed."""
    mode = wandb_mode()
    if mode == "disabled":
        return GuardedRun()
    timeout = init_timeout()  # a bad value is the user's error, not wandb trouble
    try:
        import wandb

        return GuardedRun(wandb.init(mode=mode, reinit="create_new",
                                     settings=wandb.Settings(init_timeout=timeout), **init))
    except Exception as err:  # as in GuardedRun.call
        _warn("init", err)
        return GuardedRun()


def _warn(what: str, err: Exception) -> None:
    message = " ".join(str(err).split())  # one line: wandb's messages span several
    log.warning("wandb %s failed (%s: %s); continuing without it", what, type(err).__name__, message)
