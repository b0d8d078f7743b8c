"""Who does a piece of shared work that several processes may start at once: a stage of the stage
cache, a run of a table (docs/design.md section 7, "Shared work").

`claimed(lock_path, published, label)` is a context manager that yields what this process does:

- PUBLISHED: the work is done (`published()` is true): read it;
- OWNED: do it; the lock (`locks.OwnerLock`) stays held until the block ends, by success or by an
  exception;
- BUSY: another process holds it and `wait` is false (the caller comes back to it later).

Waiting, `claimed` polls every POLL_S seconds and prints one line naming the owner (again only when
the owner changes); a stale lock is taken over (`locks.py`) with a line saying whose it was. The
work is checked again once the lock is taken: the owner before publishes and then releases.

DDP: only global rank zero takes the lock, and the other ranks do what it decides. Once the
process group is open, rank zero broadcasts its decision, and a broadcast at every poll while it
waits (however long the other process takes, no collective waits longer than a poll). Before
that, rank zero is alone under Lightning's own launcher (it starts the other ranks in the first
`trainer.fit`, and they find the same files on disk); ranks started together by torchrun or srun
cannot wait for each other yet, so there each rank goes by `published()`, and rank zero goes ahead
without the lock when another process holds it, as every process did before there were locks.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Callable, Iterator

from lightning_docmt.distributed import (
    broadcast_from_zero,
    in_process_group,
    is_global_zero,
    launched_with_peers,
    progress,
)
from lightning_docmt.locks import OwnerLock

PUBLISHED, OWNED, BUSY = "published", "owned", "busy"
_WAITING = "waiting"  # what rank zero broadcasts at each poll while it waits
POLL_S = 2.0
# A test hook: seconds to sleep right after taking a claim's lock, so that a test can kill or race
# the owner at a known point (tests/training/test_stage_lock.py).
HOLD_VARIABLE = "DOCMT_TEST_HOLD_LOCK_S"


@contextlib.contextmanager
def claimed(lock_path: str | Path, published: Callable[[], bool], label: str, *,
            wait: bool = True) -> Iterator[str]:
    """PUBLISHED, OWNED or BUSY (module docstring); `label` names the work in what is printed."""
    lock = OwnerLock(lock_path)
    try:
        yield _decide(lock, published, label, wait)
    finally:
        lock.release()


def _decide(lock: OwnerLock, published: Callable[[], bool], label: str, wait: bool) -> str:
    together = in_process_group()
    if not is_global_zero():
        return _follow_rank_zero() if together else (PUBLISHED if published() else OWNED)
    outcome = _rank_zero(lock, published, label, wait, together)
    if together:
        broadcast_from_zero(outcome)
    return outcome


def _follow_rank_zero() -> str:
    while (outcome := broadcast_from_zero(None)) == _WAITING:
        pass
    return outcome


def _rank_zero(lock: OwnerLock, published: Callable[[], bool], label: str, wait: bool,
               together: bool) -> str:
    shown = None  # the holder last named
    while not published():
        if lock.try_acquire():
            if lock.replaced:
                progress(f"{label}: took over the lock of {lock.replaced}: {lock.path}")
            if published():  # published between the check and the lock
                lock.release()
                return PUBLISHED
            _hold_for_tests(label)
            return OWNED
        owner = lock.owner()
        if owner is None and not lock.path.exists():  # released since: try again at once
            continue
        holder = str(owner) if owner else "an owner whose record is unreadable"
        if not together and launched_with_peers():
            progress(f"{label}: {lock.path} is held by {holder}, but the ranks of this launch cannot wait "
                     "for it before their process group exists: going ahead without the lock")
            return OWNED
        if not wait:
            return BUSY
        if holder != shown:
            progress(f"{label}: waiting for {holder}, who holds {lock.path}")
            shown = holder
        if together:
            broadcast_from_zero(_WAITING)
        time.sleep(POLL_S)
    return PUBLISHED


def _hold_for_tests(label: str) -> None:
    seconds = float(os.environ.get(HOLD_VARIABLE) or 0)
    if seconds > 0:
        progress(f"{label}: holding the lock for {seconds:g} s ({HOLD_VARIABLE}, a test hook)")
        time.sleep(seconds)
