"""The wandb run of a training run (`training/dashboard.py`), written offline and read back from its
files; without training (a table's runs: tests/tables/test_table_wandb.py)."""

from __future__ import annotations

import pytest

from lightning_docmt.config import composition as config_lib
from lightning_docmt.provenance import code_fingerprint
from lightning_docmt.training.dashboard import run_dashboard
from tests.helpers.wandb_files import offline_runs


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    """wandb offline, its own files under `tmp_path`."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for variable in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(variable, str(tmp_path / "wandb_home"))


@pytest.mark.subprocess  # wandb starts its service process
def test_a_run_that_stops_on_an_error_is_finished_with_exit_code_1(tmp_path, offline_wandb):
    cfg = config_lib.compose(None, ["model.arch=transformer", "logging.wandb=true", "logging.group=g",
                                    "logging.name=row", "train.seed=3"], profile="tiny")
    with pytest.raises(RuntimeError, match="stage failed"):
        with run_dashboard(cfg, tmp_path / "run", precision="32-true") as dashboard:
            assert dashboard.summarize({"s1/reused": False})
            raise RuntimeError("stage failed")
    [run] = offline_runs(tmp_path / "run" / "wandb")
    assert (run.name, run.group, run.job_type, run.exit_code) == ("row/seed3", "g", "train", 1)
    assert {"profile:tiny", "precision:32-true", f"code:{code_fingerprint()}"} <= set(run.tags)
    assert run.summary["s1/reused"] is False and run.config["model"]["arch"] == "transformer"


def test_no_run_without_logging_wandb(tmp_path, offline_wandb):
    cfg = config_lib.compose(None, ["model.arch=transformer"], profile="tiny")  # the profile: wandb off
    with run_dashboard(cfg, tmp_path / "run", precision="32-true") as dashboard:
        assert not dashboard.alive
    assert not (tmp_path / "run").exists()
