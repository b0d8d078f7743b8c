"""One run directory for every rank of a launch, on a filesystem every rank sees (docs/design.md
section 14).

Lightning's own `ddp` launcher starts local ranks 1..N-1 by re-running the command with rank zero's
environment, so they inherit the run directory rank zero named (`run.RUN_DIR_VARIABLE`). Processes
that a cluster launcher starts are independent from their first line: torchrun's workers, SLURM's
`srun` tasks, or the same command started by hand on each node with `NODE_RANK` and
`trainer.num_nodes`. Left alone, each would name its own directory (the name carries the time)
and read files of a stage that no one writes there.

These *starters* meet once per run, before any training, at a small key-value store (torch's
`TCPStore`) that global rank zero serves at the job's main address and `MASTER_PORT + 1`
(`DOCMT_RENDEZVOUS_PORT` overrides the port). Rank zero names the run directory, writes
`launch.json` into it and a probe file into `data.cache_dir` (where the stage cache lives), and
publishes the directory and a nonce; every other starter reads them, checks that it sees both files
as rank zero wrote them (paths resolve from each process' own working directory, as every path of a
config does), and answers. A rank that does not see them raises one line naming itself and the file;
rank zero waits for every answer and raises the same line, so the whole job ends instead of hanging
later on a `done.json` that one node cannot read. A rank that never answers ends rank zero's wait
after `RENDEZVOUS_TIMEOUT`, naming the ranks it waited for.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Callable

import torch.distributed as dist
from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment
from omegaconf import DictConfig

from lightning_docmt.atomic_files import write_text_atomically
from lightning_docmt.errors import DocMTInputError

PORT_VARIABLE = "DOCMT_RENDEZVOUS_PORT"
RENDEZVOUS_TIMEOUT = timedelta(minutes=10)  # starters of one job start within minutes of each other
# how long a rank waits to see rank zero's files: a shared filesystem's directory caches (NFS:
# acdirmax, 60 s by default) may show a new file late; DOCMT_SHARED_FS_WAIT_S changes it
WAIT_VARIABLE, DEFAULT_WAIT_S = "DOCMT_SHARED_FS_WAIT_S", 60.0
LAUNCH_FILE = "launch.json"


@dataclass(frozen=True)
class Starters:
    """The processes of a launch that start on their own: this one's rank among them, how many,
    and where rank zero serves the rendezvous store."""

    rank: int
    count: int
    address: str
    port: int


def launch_starters(cfg: DictConfig) -> Starters | None:
    """The starters of this launch, or None when one process names the run directory alone (a
    single process, or Lightning's own launcher on one node, whose later ranks inherit it)."""
    if TorchElasticEnvironment.detect():  # torchrun
        world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
        address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    elif SLURMEnvironment.detect() and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        slurm = SLURMEnvironment()
        world, rank, address, port = slurm.world_size(), slurm.global_rank(), slurm.main_address, slurm.main_port
    elif int(cfg.trainer.get("num_nodes", 1)) > 1 and os.environ.get("LOCAL_RANK", "0") == "0":
        missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
        if missing:
            raise DocMTInputError(f"{int(cfg.trainer.num_nodes)} nodes need {' and '.join(missing)} set on "
                                  f"every node (and NODE_RANK on each but the first)", key="trainer.num_nodes")
        world, rank = int(cfg.trainer.num_nodes), int(os.environ.get("NODE_RANK", "0"))
        address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    else:
        return None
    if world < 2:
        return None
    return Starters(rank=rank, count=world, address=address, port=int(os.environ.get(PORT_VARIABLE, port + 1)))


class _Rendezvous:
    """The store of this process' launch, opened once and kept for the process' life: a `docmt
    table` meets its peers once per row, each meeting under keys of its own number."""

    store: dist.TCPStore | None = None
    meetings = 0

    @classmethod
    def open(cls, starters: Starters) -> tuple[dist.TCPStore, str]:
        if cls.store is None:
            cls.store = dist.TCPStore(starters.address, starters.port, is_master=starters.rank == 0,
                                      timeout=RENDEZVOUS_TIMEOUT, wait_for_workers=False)
        cls.meetings += 1
        return cls.store, f"docmt/{cls.meetings}"


def agree_on_run_dir(cfg: DictConfig, run_dir: Path | None, make_run_dir: Callable[[DictConfig], Path]) -> Path:
    """The run directory every rank of this launch uses: `run_dir` when given (a table row's or a
    resumed run's, the same on every rank), else the one rank zero names with `make_run_dir`;
    across starters, checked to be one directory that every starter sees."""
    starters = launch_starters(cfg)
    if starters is None:
        return Path(run_dir) if run_dir is not None else make_run_dir(cfg)
    store, prefix = _Rendezvous.open(starters)
    if starters.rank == 0:
        chosen = Path(run_dir) if run_dir is not None else make_run_dir(cfg)
        return _publish(cfg, chosen, starters, store, prefix)
    return _follow(cfg, starters, store, prefix)


def _files(cfg: DictConfig, run_dir: Path, nonce: str) -> list[Path]:
    return [run_dir / LAUNCH_FILE, Path(cfg.data.cache_dir) / f".launch-{nonce}"]


def _publish(cfg: DictConfig, run_dir: Path, starters: Starters, store: dist.TCPStore, prefix: str) -> Path:
    nonce = uuid.uuid4().hex
    record = json.dumps({"nonce": nonce, "host": socket.gethostname(), "starters": starters.count}) + "\n"
    for path in _files(cfg, run_dir, nonce):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(path, record)  # another node may read it at any moment
    store.set(f"{prefix}/run_dir", json.dumps({"run_dir": str(run_dir), "nonce": nonce}))
    answers = [f"{prefix}/seen/{rank}" for rank in range(1, starters.count)]
    try:
        store.wait(answers, RENDEZVOUS_TIMEOUT)
    except RuntimeError:  # torch raises its store timeout as a RuntimeError subclass
        silent = [key.rsplit("/", 1)[1] for key in answers if not store.check([key])]
        raise DocMTInputError(f"rank(s) {', '.join(silent)} never reached the run directory's rendezvous "
                              f"within {RENDEZVOUS_TIMEOUT} (are all nodes started with the same command?)",
                              path=run_dir) from None
    _files(cfg, run_dir, nonce)[1].unlink(missing_ok=True)
    problems = [store.get(key).decode() for key in answers]
    if any(problems):
        raise DocMTInputError(next(p for p in problems if p))
    return run_dir


def _follow(cfg: DictConfig, starters: Starters, store: dist.TCPStore, prefix: str) -> Path:
    published = json.loads(store.get(f"{prefix}/run_dir"))  # waits for rank zero
    run_dir, nonce = Path(published["run_dir"]), published["nonce"]
    problem = ""
    for path in _files(cfg, run_dir, nonce):
        if not _visible(path, nonce):
            problem = (f"rank {starters.rank} on {socket.gethostname()} cannot see '{path}', which rank 0 "
                       f"wrote: every node needs logging.runs_dir/results and data.cache_dir on one shared "
                       f"filesystem, at the same paths from its working directory")
            break
    store.set(f"{prefix}/seen/{starters.rank}", problem)
    if problem:
        raise DocMTInputError(problem)
    return run_dir


def _visible(path: Path, nonce: str) -> bool:
    deadline = time.monotonic() + float(os.environ.get(WAIT_VARIABLE, DEFAULT_WAIT_S))
    while True:
        try:
            if json.loads(path.read_text())["nonce"] == nonce:
                return True
        except (OSError, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
