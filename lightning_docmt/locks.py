"""A lock file that names its owner: one process at a time does a piece of work that several may
start at once (docs/design.md section 7, "Shared work"). Nothing here waits: `claims.py` polls.

The lock is the file `path`, present while a process holds it and holding its owner as one JSON
object: host, pid, when it was taken, and a token unique to this holding.

- Taking it: the record is written to a temporary file beside `path`, then hard-linked to `path`.
  link(2) fails when `path` exists, atomically (on NFS too, where it is the classic alternative to
  O_EXCL), and the lock never appears with a partial record.
- Heartbeat: while held, a daemon thread touches the lock file every HEARTBEAT_S seconds.
- Stale: the owner is on this host and its pid is gone (a killed process), or the heartbeat is
  older than STALE_AFTER_S (the only sign across hosts, which cannot see each other's pids; it
  also ends a lock whose pid a new process reused). Clocks of hosts sharing the lock must agree to
  well within STALE_AFTER_S. A zombie (killed, not yet reaped by its parent) still has its pid.
- Taking over: the taker opens the stale lock file, takes flock(2) on it, and checks under the
  flock that `path` is still that file and still stale; then replaces it by its own record
  (`os.replace`: `path` is never missing, so no plain taker slips in between). Two waiters that
  both find the lock stale are serialised by the flock; the second finds `path` replaced and does
  not take it. The kernel drops a flock when its process dies, so a taker killed mid-way leaves
  nothing behind.
- Releasing: under the same flock, and only while `path` is still the owner's own file: an owner
  that was wrongly presumed dead (a host that missed its heartbeats) never removes its
  successor's lock. Such an owner may still finish its work: the work it publishes must then be
  written atomically and be the same whoever does it (stages and table runs are).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

HEARTBEAT_S = 30.0
STALE_AFTER_S = 600.0


@dataclass(frozen=True)
class Owner:
    """Who holds a lock: what its waiters print, and what decides whether it is stale."""

    host: str
    pid: int
    started: str  # local time when the lock was taken
    token: str  # unique to this holding

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host}, since {self.started}"


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists on this host (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class OwnerLock:
    """The lock file `path` (module docstring): `try_acquire`, `owner`, `release`."""

    def __init__(self, path: str | Path, *, stale_after_s: float = STALE_AFTER_S,
                 heartbeat_s: float = HEARTBEAT_S):
        self.path = Path(path)
        self.stale_after_s, self.heartbeat_s = stale_after_s, heartbeat_s
        self.replaced: str | None = None  # the stale owner that `try_acquire` took over from, and why
        self._fd: int | None = None  # of the held lock file: its heartbeat, and its release
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def owner(self) -> Owner | None:
        """The owner the lock file names; None when there is no lock (or no readable record)."""
        try:
            return _parse(self.path.read_bytes())
        except FileNotFoundError:
            return None

    def try_acquire(self) -> bool:
        """Take the lock if it is free, or stale (then `replaced` says whose it was and why);
        False while another owner holds it, or when it changed hands during the attempt."""
        if self.held:
            raise RuntimeError(f"{self.path} is already held by this lock")
        self.replaced = None
        record = Owner(host=socket.gethostname(), pid=os.getpid(),
                       started=time.strftime("%Y-%m-%d %H:%M:%S"), token=uuid.uuid4().hex)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{record.token}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        taken = False
        try:
            os.write(fd, json.dumps(asdict(record)).encode())
            try:
                os.link(tmp, self.path)
                taken = True
            except FileExistsError:
                taken = self._take_over_if_stale(tmp)
        finally:
            tmp.unlink(missing_ok=True)  # after a link: the lock's second name; after a takeover: gone
            if not taken:
                os.close(fd)
        if taken:
            self._hold(fd)
        return taken

    def release(self) -> None:
        """Give the lock up (nothing when not held): remove the lock file if it is still this
        holding's own (module docstring), and stop the heartbeat."""
        if self._fd is None:
            return
        self._stop.set()
        self._beat.join()
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            if _is_file_at(self._fd, self.path):
                self.path.unlink()
        finally:
            os.close(self._fd)  # drops the flock
            self._fd = None

    def stale_reason(self, owner: Owner | None, age_s: float) -> str | None:
        """Why a lock of `owner` whose heartbeat is `age_s` seconds old is stale; None if it is not."""
        if owner is not None and owner.host == socket.gethostname() and not pid_alive(owner.pid):
            return "its process is gone"
        if age_s > self.stale_after_s:
            return f"no heartbeat for {age_s:.0f} s"
        return None

    def _take_over_if_stale(self, tmp: Path) -> bool:
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return False  # released meanwhile: free at the next attempt
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if not _is_file_at(fd, self.path):
                return False  # replaced or released while we waited for the flock
            owner = _parse(os.pread(fd, 1 << 16, 0))
            reason = self.stale_reason(owner, time.time() - os.fstat(fd).st_mtime)
            if reason is None:
                return False
            os.replace(tmp, self.path)
            self.replaced = f"{owner or 'an unreadable record'} ({reason})"
            return True
        finally:
            os.close(fd)

    def _hold(self, fd: int) -> None:
        self._fd = fd
        self._stop.clear()
        self._beat = threading.Thread(target=self._heartbeat, args=(fd,), daemon=True,
                                      name=f"heartbeat {self.path.name}")
        self._beat.start()

    def _heartbeat(self, fd: int) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                os.utime(fd)
            except OSError:  # the file system went away: waiters will find the lock stale
                return


def _is_file_at(fd: int, path: Path) -> bool:
    """Whether `path` is (still) the open file `fd`."""
    try:
        there = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


def _parse(data: bytes) -> Owner | None:
    try:
        return Owner(**json.loads(data))
    except (ValueError, TypeError):
        return None
