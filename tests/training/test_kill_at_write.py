"""A kill at the worst moment of a write (`atomic_files.py`): `docmt table` killed with SIGKILL right
after writing the temporary file of a stage's `final.ckpt` or `done.json`, a run's `metrics.json` or
the table's `table.md` or `table.png`, before its rename (the `DOCMT_TEST_KILL_BEFORE_RENAME` hook).
Nothing of the killed write is where a reader looks, and the same command run again trains what was not published
(a stage is reused only once its `done.json` exists), finishes the run and writes the report."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from lightning_docmt.atomic_files import KILL_HOOK
from tests.helpers.run_env import DOCMT, subprocess_env

pytestmark = [pytest.mark.fit, pytest.mark.subprocess]


def table_file(tmp_path: Path) -> Path:
    table = {"id": "unit.kill", "title": "Killed writes", "metrics": ["test/bleu"],
             "base": ["profile=tiny", "data.corpus=synthetic:tiny", "train.max_steps=6",
                      "train.val_every_steps=6", f"data.cache_dir={tmp_path / 'cache'}"],
             "rows": [{"name": "row", "overrides": []}]}
    path = tmp_path / "kill.yaml"
    path.write_text(yaml.safe_dump(table, sort_keys=False))
    return path


def table(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(DOCMT), "table", str(table_file(tmp_path)), "--results", str(tmp_path / "results"),
                           "--seeds", "1"], cwd=tmp_path, env=subprocess_env(**env), capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("name", ["final.ckpt", "done.json", "metrics.json", "table.md", "table.png"])
def test_a_kill_before_the_rename_leaves_nothing_trusted_and_the_rerun_finishes(tmp_path, name):
    killed = table(tmp_path, **{KILL_HOOK: name})
    assert killed.returncode == -9, killed.stderr[-2000:]
    visible = [p for p in tmp_path.rglob(name)]
    assert visible == [], visible  # only the hidden temporary file of the killed write is left
    again = table(tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    if name in ("final.ckpt", "done.json"):  # an unpublished stage is trained again, never reused
        assert "reusing" not in again.stdout
    run = tmp_path / "results" / "unit.kill" / "row" / "seed1"
    assert isinstance(json.loads((run / "metrics.json").read_text())["test/bleu"], float)
    assert "| row |" in (tmp_path / "results" / "unit.kill" / "table.md").read_text()
