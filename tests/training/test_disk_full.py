"""A full disk while a checkpoint is written (issue of faults, `checkpoints.save_atomically`,
`training/checkpoint_io.py`): the write that fails leaves the previous checkpoint loadable and no
temporary file, and `docmt fit` ends with one line naming the file and exit status 1. The disk is
"full" from the second checkpoint write on (the one function that writes checkpoint bytes, patched
to write half and raise ENOSPC)."""

from __future__ import annotations

import errno
import os

import pytest
import torch

import lightning_docmt.checkpoints as checkpoints
from tests.helpers.cli_run import docmt, write_config

pytestmark = pytest.mark.fit


def test_a_full_disk_mid_checkpoint_leaves_the_previous_one_and_one_error_line(workdir, tmp_path, monkeypatch):
    writes = []

    def full_after_one(path, data):
        writes.append(path)
        if len(writes) == 1:
            return checkpoints.write_bytes.__wrapped__(path, data)
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    full_after_one.__wrapped__ = checkpoints.write_bytes
    monkeypatch.setattr(checkpoints, "write_bytes", full_after_one)
    config = write_config(tmp_path / "run.yaml", "train:\n  max_steps: 8\n  val_every_steps: 8\n"
                                                 "  checkpoint_every_steps: 2\n")
    done = docmt("fit", config, "--profile", "tiny")
    assert done.code == 1, done.err[-2000:]
    last = done.err.strip().splitlines()[-1]
    assert last.startswith("docmt fit: error: no space left on the device while writing"), last
    assert "resume.ckpt" in last and "intact" in last
    (resume,) = (tmp_path / "runs").rglob("resume.ckpt")
    assert torch.load(resume, map_location="cpu", weights_only=True)["global_step"] == 2
    assert not list((tmp_path / "runs").rglob("*.tmp"))
