"""The wandb runs written offline under a folder, read back from their files (no wandb API reads an
offline run): each `offline-run-*/run-<id>.wandb` is a log of wandb's protobuf records in
LevelDB's log framing (a 7-byte file header, then records in 32 KiB blocks, each chunk with a
7-byte header: checksum, length, kind; a record longer than a block is split into chunks).

wandb's service process writes the file: `run.finish()` can return before the last records are
on disk, so `offline_runs` waits for each run's exit record."""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from wandb.proto import wandb_internal_pb2

FILE_MAGIC = b":W&B"
BLOCK, HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    directory: Path  # the `offline-run-*` folder
    run_id: str = ""
    name: str = ""
    group: str = ""
    job_type: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)  # top-level key -> value
    summary: dict[str, Any] = field(default_factory=dict)  # key (a nested value's keys joined by "/") -> value
    history_keys: set[str] = field(default_factory=set)  # every key logged as a history row
    exit_code: int | None = None  # None: never finished

    @property
    def files(self) -> set[str]:
        """The run's files (what `run.save` added), relative to its `files/` folder."""
        root = self.directory / "files"
        return {p.relative_to(root).as_posix() for p in root.rglob("*") if not p.is_dir()}

    def logged_table(self, key: str) -> list[dict[str, Any]]:
        """The rows of the `wandb.Table` logged last under `key`, as {column: value}, from the
        run's files (the summary holds the file's path)."""
        table = json.loads((self.directory / "files" / self.summary[f"{key}/path"]).read_text())
        return [dict(zip(table["columns"], row)) for row in table["data"]]


def records(path: Path) -> Iterator[wandb_internal_pb2.Record]:
    """The records of a `.wandb` file, in order."""
    data = path.read_bytes()
    assert data[:4] == FILE_MAGIC, f"{path} is not a wandb run file"
    pos, pending = HEADER, b""
    while pos + HEADER <= len(data):
        if BLOCK - pos % BLOCK < HEADER:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if pos + HEADER + length > len(data):  # being written
            return
        chunk = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def read_run(directory: Path) -> OfflineRun:
    """What the run file of one `offline-run-*` folder says."""
    [path] = directory.glob("run-*.wandb")
    run = OfflineRun(directory)
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run.run_id, run.name, run.group, run.job_type, run.tags = (
                r.run_id, r.display_name, r.run_group, r.job_type, list(r.tags))
            run.config.update({_key(i): json.loads(i.value_json) for i in r.config.update})
        elif kind == "config":
            run.config.update({_key(i): json.loads(i.value_json) for i in record.config.update})
        elif kind == "summary":
            run.summary.update({_key(i): json.loads(i.value_json) for i in record.summary.update})
        elif kind == "history":
            run.history_keys |= {_key(i) for i in record.history.item}
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run


def finished_run(directory: Path, timeout_s: float = 30.0) -> OfflineRun:
    """`read_run`, once the file holds the run's exit record (or after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    run = read_run(directory)
    while run.exit_code is None and time.monotonic() < deadline:
        time.sleep(0.1)
        run = read_run(directory)
    return run


def offline_runs(root: Path) -> list[OfflineRun]:
    """Every finished offline run under `root`, at any depth, by folder name."""
    return [finished_run(d) for d in sorted(root.rglob("offline-run-*")) if d.is_dir()]
