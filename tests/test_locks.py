"""`locks.OwnerLock`: one holder at a time, its record, its heartbeat, stale locks taken over by
exactly one waiter, and a release that never removes a successor's lock."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

from lightning_docmt.locks import OwnerLock

DEAD_PID = 2**22 + 1  # above Linux's largest pid_max: no process has it


def write_record(path: Path, *, host: str, pid: int, age_s: float = 0.0) -> None:
    """A lock file as another process leaves it, its heartbeat `age_s` seconds old."""
    path.write_text(json.dumps({"host": host, "pid": pid, "started": "2024-01-01 00:00:00",
                                "token": f"{host}-{pid}"}))
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))


def test_one_holder_at_a_time_named_by_the_lock_file(tmp_path):
    path = tmp_path / "stages" / "key.lock"
    first, second = OwnerLock(path), OwnerLock(path)
    assert first.try_acquire() and first.held
    assert not second.try_acquire() and not second.held
    owner = second.owner()
    assert (owner.host, owner.pid) == (socket.gethostname(), os.getpid())
    first.release()
    assert not path.exists() and second.owner() is None
    assert second.try_acquire() and second.owner().token != owner.token
    second.release()
    assert sorted(p.name for p in path.parent.iterdir()) == []  # no temporary record left behind


def test_the_heartbeat_keeps_a_held_lock_fresh(tmp_path):
    path = tmp_path / "key.lock"
    holder = OwnerLock(path, heartbeat_s=0.05)
    assert holder.try_acquire()
    os.utime(path, (0, 0))  # as if its last beat were long ago
    time.sleep(0.5)
    assert time.time() - path.stat().st_mtime < 5
    assert not OwnerLock(path, stale_after_s=5).try_acquire()
    holder.release()


def test_a_lock_whose_process_is_gone_is_taken_over_saying_whose_it_was(tmp_path):
    path = tmp_path / "key.lock"
    write_record(path, host=socket.gethostname(), pid=DEAD_PID)
    taker = OwnerLock(path)
    assert taker.try_acquire()
    assert taker.replaced.startswith(f"pid {DEAD_PID} on {socket.gethostname()}, since ")
    assert taker.replaced.endswith("(its process is gone)")
    assert taker.owner().pid == os.getpid()
    taker.release()
    assert not path.exists()


def test_a_lock_of_another_host_is_stale_only_once_its_heartbeat_stops(tmp_path):
    path = tmp_path / "key.lock"
    write_record(path, host="elsewhere", pid=DEAD_PID, age_s=60)  # its pid means nothing here
    assert not OwnerLock(path, stale_after_s=120).try_acquire()
    write_record(path, host="elsewhere", pid=DEAD_PID, age_s=180)
    taker = OwnerLock(path, stale_after_s=120)
    assert taker.try_acquire() and "no heartbeat for 18" in taker.replaced
    taker.release()


def test_an_unreadable_lock_is_stale_only_by_its_age(tmp_path):
    path = tmp_path / "key.lock"
    path.write_text("not a record")
    assert not OwnerLock(path, stale_after_s=120).try_acquire()
    os.utime(path, (0, 0))
    taker = OwnerLock(path, stale_after_s=120)
    assert taker.try_acquire() and taker.replaced.startswith("an unreadable record (no heartbeat")
    taker.release()


def test_of_waiters_that_find_a_lock_stale_at_once_exactly_one_takes_it_over(tmp_path):
    """16 waiters at a barrier, 50 times (without the takeover's flock, some rounds have two)."""
    path = tmp_path / "key.lock"
    winners = []
    for _ in range(50):
        write_record(path, host=socket.gethostname(), pid=DEAD_PID)
        waiters = [OwnerLock(path) for _ in range(16)]
        start = threading.Barrier(len(waiters))
        won: list[OwnerLock] = []

        def wait_and_try(lock: OwnerLock) -> None:
            start.wait()
            if lock.try_acquire():
                won.append(lock)

        threads = [threading.Thread(target=wait_and_try, args=(lock,)) for lock in waiters]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        winners.append(len(won))
        assert all(lock.owner().token == json.loads(path.read_text())["token"] for lock in won)
        for lock in won:
            lock.release()
    assert winners == [1] * 50


def test_a_release_leaves_the_lock_of_a_successor_alone(tmp_path):
    """An owner presumed dead (its heartbeat missed) whose lock was taken over does not remove it."""
    path = tmp_path / "key.lock"
    presumed_dead = OwnerLock(path)
    assert presumed_dead.try_acquire()
    os.utime(path, (0, 0))
    successor = OwnerLock(path, stale_after_s=60)
    assert successor.try_acquire() and "no heartbeat" in successor.replaced
    presumed_dead.release()
    assert path.exists() and successor.owner().token == json.loads(path.read_text())["token"]
    successor.release()
    assert not path.exists()
