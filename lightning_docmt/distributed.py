"""Which process of a distributed launch this is, known before any process group exists.

Lightning's `ddp` strategy starts local ranks 1..N-1 by re-running the command with `LOCAL_RANK`
set; cluster launchers (torchrun, SLURM, jsrun) set their own rank variables. The process group
that the first `Trainer` of a run opens stays open until the process exits, so a command can meet
its other ranks again after training (`barrier`, `agree_on_exit_status`). Code that runs
before `trainer.fit` (run directories, saved configs, run records, table reports) asks this so
that only global rank zero writes, while every rank still trains. Every rank shares the terminal:
`progress` prints a status line in one write, so that the lines of two ranks never interleave.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch

RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")
# What a launcher that starts every rank at once sets to the number of processes (torchrun, srun).
WORLD_VARIABLES = ("WORLD_SIZE", "SLURM_NTASKS")


def is_global_zero() -> bool:
    """True unless a launcher's rank variable says this is another process of a distributed run."""
    return all(os.environ.get(name, "0") == "0" for name in RANK_VARIABLES)


def launched_with_peers() -> bool:
    """True when a launcher started this process among others (torchrun, srun), so that its peers
    may run before any process group exists. Lightning's own `ddp` launcher starts the other local
    ranks only once rank zero is inside its first `trainer.fit`."""
    return any(int(os.environ.get(name) or 1) > 1 for name in WORLD_VARIABLES)


def progress(message: str) -> None:
    """Print `[docmt] message` as one write (`print` writes the text and its newline separately, so
    two ranks printing at once could produce a line holding both and an empty line)."""
    sys.stdout.write(f"[docmt] {message}\n")
    sys.stdout.flush()


def _world() -> int:
    return torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1


def in_process_group() -> bool:
    """True once this process is one rank of an open process group of several."""
    return _world() > 1


def broadcast_from_zero(value: Any) -> Any:
    """Rank zero's `value` (picklable) on every rank; `value` outside a distributed run."""
    if _world() == 1:
        return value
    box = [value]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    """Wait for every rank (a no-op outside a distributed run)."""
    if _world() > 1:
        torch.distributed.barrier()


def agree_on_exit_status(status: int) -> int:
    """The exit status of a command on every rank: the first non-zero status of any rank.

    Every rank of a DDP command calls this once at its end. A rank whose command succeeded waits
    for the others, so rank zero stays alive until every rank has finished. A rank whose command
    failed returns at once: the other ranks may be inside a collective it will never join (a
    failure mid-run), so it must not start one. It exits non-zero; Lightning's launcher, which
    watches the ranks it started, then kills rank zero, and a rank whose peer is gone fails in its
    next collective: the command's status is non-zero either way. Outside a distributed run:
    `status`.
    """
    if _world() == 1 or status != 0:
        return status
    statuses = [0] * _world()
    torch.distributed.all_gather_object(statuses, status)
    # Tear the process group down here, every rank at the same point, rather than at interpreter
    # exit: a gloo rank whose peer has already exited can abort in its exit-time teardown
    # ("terminate called without an active exception", status -6).
    torch.distributed.destroy_process_group()
    return next((s for s in statuses if s != 0), 0)


def gather_objects(value: Any) -> list[Any]:
    """Every rank's `value` (picklable), in rank order; `[value]` outside a distributed run."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return [value]
    gathered: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, value)
    return gathered


_LOCAL_RANKS: dict[int, int] = {}  # pid -> local rank, of the ranks Lightning's launcher started here


def note_local_ranks() -> None:
    """Remember which child process of this one is which local rank. Lightning's `ddp` launcher
    starts local ranks 1..N-1 as children of rank zero, each with `LOCAL_RANK` in its environment,
    which a process that has died no longer shows: `departed_rank` names one from this note. Linux
    (`/proc`); elsewhere nothing is noted."""
    try:
        children = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()
    except OSError:
        return
    for child in map(int, children):
        try:
            environment = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        rank = next((item.split(b"=", 1)[1] for item in environment if item.startswith(b"LOCAL_RANK=")), None)
        if rank is not None and rank.isdigit():
            _LOCAL_RANKS[child] = int(rank)


def departed_rank() -> str | None:
    """'local rank R (pid P) ended with signal S / exit status E' for the first noted rank that has
    ended other than cleanly, else None. Peeks without reaping (`WNOWAIT`), so Lightning's own
    watch over its children still sees the exit."""
    for pid, rank in sorted(_LOCAL_RANKS.items(), key=lambda item: item[1]):
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # already reaped
            continue
        if info is None or (info.si_code == os.CLD_EXITED and info.si_status == 0):
            continue
        how = (f"exit status {info.si_status}" if info.si_code == os.CLD_EXITED
               else f"signal {signal.Signals(info.si_status).name}")
        return f"local rank {rank} (pid {pid}) ended with {how}"
    return None
