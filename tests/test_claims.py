"""`claims.claimed`: published work is read, free work is owned (the lock held until the block
ends, even by an exception), held work is waited for with one line naming its owner, or left
(BUSY) without waiting; DDP ranks other than zero take no lock and do what rank zero decides.

The "other process" holding a lock is an `OwnerLock` of the test itself (a live pid on this host).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from lightning_docmt import claims
from lightning_docmt.claims import BUSY, OWNED, PUBLISHED, claimed
from lightning_docmt.locks import OwnerLock


@pytest.fixture
def quick_polls(monkeypatch):
    monkeypatch.setattr(claims, "POLL_S", 0.02)


@pytest.fixture
def held(tmp_path):
    """(lock path, the other process's lock on it), released at the end."""
    path = tmp_path / "work.lock"
    other = OwnerLock(path)
    assert other.try_acquire()
    yield path, other
    other.release()


def later(seconds: float, *actions) -> threading.Thread:
    """Run `actions` in turn after `seconds`, in a thread (the other process finishing)."""
    def run():
        time.sleep(seconds)
        for action in actions:
            action()
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_free_work_is_owned_and_the_lock_released_after_the_block_even_by_an_exception(tmp_path):
    path = tmp_path / "work.lock"
    with claimed(path, lambda: False, "work") as claim:
        assert claim == OWNED and OwnerLock(path).owner().pid == os.getpid()
    assert not path.exists()
    with pytest.raises(RuntimeError), claimed(path, lambda: False, "work"):
        raise RuntimeError("training failed")
    assert not path.exists()


def test_published_work_is_read_without_a_lock(tmp_path):
    with claimed(tmp_path / "work.lock", lambda: True, "work") as claim:
        assert claim == PUBLISHED and not (tmp_path / "work.lock").exists()


def test_a_waiter_names_the_owner_once_and_reads_what_it_publishes(held, quick_polls, capsys):
    path, other = held
    owner = other.owner()
    done = path.with_name("done.json")
    finishing = later(0.3, lambda: done.write_text("{}"), other.release)
    with claimed(path, done.is_file, "stage 'sent'") as claim:
        assert claim == PUBLISHED
    finishing.join()
    waiting = [line for line in capsys.readouterr().out.splitlines() if "waiting" in line]
    assert waiting == [f"[docmt] stage 'sent': waiting for pid {os.getpid()} on {socket.gethostname()}, "
                       f"since {owner.started}, who holds {path}"]


def test_work_its_owner_gave_up_unpublished_is_taken(held, quick_polls):
    path, other = held
    giving_up = later(0.2, other.release)
    with claimed(path, lambda: False, "work") as claim:
        assert claim == OWNED and not other.held
    giving_up.join()


def test_without_wait_held_work_is_busy_and_stays_the_owner_s(held):
    path, other = held
    token = other.owner().token
    with claimed(path, lambda: False, "work", wait=False) as claim:
        assert claim == BUSY
    assert other.owner().token == token


def test_a_rank_other_than_zero_takes_no_lock_and_goes_by_the_published_work(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    path = tmp_path / "work.lock"
    with claimed(path, lambda: False, "work") as claim:
        assert claim == OWNED and not path.exists()
    with claimed(path, lambda: True, "work") as claim:
        assert claim == PUBLISHED


def test_rank_zero_of_ranks_launched_together_goes_ahead_without_waiting(held, monkeypatch, capsys):
    """torchrun and srun start every rank at once: before their process group the other ranks
    cannot learn that rank zero waits, so it does not."""
    path, other = held
    monkeypatch.setenv("WORLD_SIZE", "2")
    with claimed(path, lambda: False, "work") as claim:
        assert claim == OWNED and other.held
    assert "going ahead without the lock" in capsys.readouterr().out


def _rank(rank: int, init_file: str, root: str) -> None:
    """One rank of a 2-process gloo group: three claims, their outcomes written to rank<r>.json,
    what it prints to rank<r>.out."""
    os.environ["RANK"] = str(rank)
    claims.POLL_S = 0.02
    folder = Path(root)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        with open(folder / f"rank{rank}.out", "w", buffering=1) as out, contextlib.redirect_stdout(out):
            outcomes = _claims(folder)
        (folder / f"rank{rank}.json").write_text(json.dumps(outcomes))
    finally:
        dist.destroy_process_group()


def _claims(folder: Path) -> dict[str, object]:
    outcomes = {}
    with claimed(folder / "waited.lock", (folder / "waited.done").is_file, "waited") as claim:
        outcomes["waited"] = claim
    with claimed(folder / "free.lock", lambda: False, "free") as claim:
        outcomes["free"] = claim
        dist.barrier()
        outcomes["free_lock_pid"] = OwnerLock(folder / "free.lock").owner().pid
        dist.barrier()
    with claimed(folder / "busy.lock", lambda: False, "busy", wait=False) as claim:
        outcomes["busy"] = claim
    return outcomes


@pytest.mark.subprocess
def test_ddp_ranks_do_what_rank_zero_decides_and_only_it_takes_the_lock(tmp_path):
    """Rank zero waits for work another process holds (broadcasting at every poll) and reads it once
    published; it alone holds the lock of free work; held work it may leave is left by both."""
    waited, busy = OwnerLock(tmp_path / "waited.lock"), OwnerLock(tmp_path / "busy.lock")
    assert waited.try_acquire() and busy.try_acquire()
    ranks = mp.start_processes(_rank, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2,
                               start_method="spawn", join=False)
    rank_zero_out = tmp_path / "rank0.out"
    deadline = time.monotonic() + 120
    while "waited: waiting for" not in (rank_zero_out.read_text() if rank_zero_out.exists() else ""):
        assert time.monotonic() < deadline, "rank zero never waited"
        time.sleep(0.1)
    time.sleep(0.5)  # many polls, and as many broadcasts, while the other process holds the work
    assert not (tmp_path / "rank1.json").exists()
    (tmp_path / "waited.done").write_text("{}")
    waited.release()
    while not ranks.join():
        pass
    busy.release()
    outcomes = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    rank_zero_pid = ranks.pids()[0]
    assert outcomes == [{"waited": PUBLISHED, "free": OWNED, "free_lock_pid": rank_zero_pid, "busy": BUSY}] * 2
