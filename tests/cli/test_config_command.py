"""`docmt config` prints the config that `docmt fit` with the same arguments trains with, and
`--device` on `fit`, `table` and `config` becomes the runs' `trainer:` settings (in-process, nothing
trains: `fit`'s training is replaced by a recorder)."""

from __future__ import annotations

import shlex
from types import SimpleNamespace

import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from lightning_docmt.config.composition import compose
from lightning_docmt.inference.device import planned_processes, trainer_settings
from lightning_docmt.tables.spec import load_table
from tests.helpers.cli_run import CORPUS, docmt, write_config
from tests.helpers.paths import EXPERIMENTS

ZHANG_T8 = EXPERIMENTS / "zhang2018" / "t8_context_integration.yaml"
ROW_ARGS = ["--row", "encoder", "--seed", "3", "--profile", "tiny", "model.dropout=0.25"]


@pytest.fixture
def trained(monkeypatch, tmp_path) -> list[DictConfig]:
    """The configs `docmt fit` hands to training, which is replaced by a recorder."""
    from lightning_docmt.tables import runner
    from lightning_docmt.training import run

    configs: list[DictConfig] = []

    def record_run(cfg, *args, **kwargs):
        configs.append(cfg)
        return tmp_path / "run"

    def record_row(cfg, run_dir, *args, **kwargs):
        configs.append(cfg)
        return SimpleNamespace(error=None)

    monkeypatch.setattr(run, "fit_run", record_run)
    monkeypatch.setattr(runner, "execute_run", record_row)
    return configs


def printed_config(*argv) -> DictConfig:
    done = docmt("config", *argv)
    assert done.code == 0, done.err
    return OmegaConf.create(done.out)


def composed_like_fit(cfg: DictConfig) -> DictConfig:
    """`cfg` as `docmt config` prints it: resolved, with the marker of a saved config."""
    return OmegaConf.create({"docmt_resolved": True, **OmegaConf.to_container(cfg, resolve=True)})


def test_config_prints_what_fit_trains_for_a_table_row(trained, tmp_path):
    assert docmt("fit", ZHANG_T8, *ROW_ARGS, "--results", tmp_path).code == 0
    printed = printed_config(ZHANG_T8, *ROW_ARGS)
    assert printed == composed_like_fit(trained[0])
    assert (printed.train.seed, printed.profile, printed.model.dropout) == (3, "tiny", 0.25)


def test_config_prints_what_fit_trains_for_a_run_config(trained, tmp_path):
    path = write_config(tmp_path / "run.yaml", "train:\n  max_steps: 7\n")
    assert docmt("fit", path, "--profile", "tiny", "train.seed=5").code == 0
    printed = printed_config(path, "--profile", "tiny", "train.seed=5")
    assert printed == composed_like_fit(trained[0]) and printed.data.corpus == CORPUS


def test_the_printed_config_is_a_run_config_that_composes_to_itself(tmp_path):
    done = docmt("config", ZHANG_T8, *ROW_ARGS)
    path = tmp_path / "config.yaml"
    path.write_text(done.out)
    assert composed_like_fit(compose(path, [])) == OmegaConf.create(done.out)


def test_a_table_without_row_is_one_error_line_listing_the_rows(tmp_path):
    done = docmt("config", ZHANG_T8)
    rows = [r.name for r in load_table(ZHANG_T8).rows]
    assert done.code == 2 and done.out == "" and len(done.err.strip().splitlines()) == 1
    assert str(ZHANG_T8) in done.err and "--row" in done.err and all(r in done.err for r in rows)


def device_keys(trainer: DictConfig, device: str) -> dict:
    """The `trainer:` keys of `--device device`, as `trainer` has them."""
    import torch

    return {key: OmegaConf.to_container(trainer)[key] for key in trainer_settings(torch.device(device))}


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1"])
def test_device_sets_the_trainer_of_the_run(device):
    import torch

    trainer = printed_config(ZHANG_T8, *ROW_ARGS, "--device", device).trainer
    assert device_keys(trainer, device) == trainer_settings(torch.device(device))
    assert trainer.accelerator == ("cpu" if device == "cpu" else "gpu")


def test_fit_trains_on_the_device_it_is_given_and_keeps_the_other_trainer_keys(trained, tmp_path):
    path = write_config(tmp_path / "run.yaml", "trainer:\n  devices: 4\n  strategy: ddp\n  log_every_n_steps: 3\n")
    assert docmt("fit", path, "--profile", "tiny", "--device", "cpu").code == 0
    trainer = trained[0].trainer
    assert (trainer.devices, trainer.strategy, trainer.num_nodes, trainer.log_every_n_steps) == (1, "auto", 1, 3)


@pytest.mark.parametrize("command", [["fit", ZHANG_T8, "--row", "both"], ["config", ZHANG_T8, "--row", "both"],
                                     ["table", ZHANG_T8, "--dry-run"], ["table", ZHANG_T8]])
def test_a_bad_device_is_one_error_line_with_status_2(trained, command):
    done = docmt(*command, "--device", "cud")
    assert done.code == 2 and done.err.count("\n") == 1
    assert "--device" in done.err and "'cud'" in done.err and "cpu, cuda, cuda:N" in done.err
    assert trained == []


def test_fit_refuses_a_device_this_machine_lacks(trained):
    import torch

    missing = f"cuda:{torch.cuda.device_count()}"
    done = docmt("fit", ZHANG_T8, "--row", "both", "--device", missing)
    assert done.code == 2 and "not available here" in done.err and trained == []


def test_a_device_and_an_override_of_its_keys_clash(trained):
    done = docmt("config", ZHANG_T8, "--row", "both", "--device", "cpu", "trainer.devices=2")
    assert done.code == 2 and "key 'trainer.devices'" in done.err and "--device cpu" in done.err


def test_table_dry_run_gives_every_row_the_device(tmp_path):
    done = docmt("table", ZHANG_T8, "--dry-run", "--profile", "tiny", "--seeds", "1,2", "--device", "cuda:1",
                 "model.dropout=0.25")
    commands = done.out.strip().splitlines()
    assert done.code == 0 and len(commands) == 2 * len(load_table(ZHANG_T8).rows)
    for command in commands:
        argv = shlex.split(command)
        assert argv[argv.index("--device") + 1] == "cuda:1"
        where = argv.index("--results")  # where the run is written, not what it trains
        assert printed_config(*argv[2:where], *argv[where + 2:]).trainer.devices == [1]  # it trains there


def test_unknown_trainer_key_fails_a_dry_run_in_one_line():
    done = docmt("table", ZHANG_T8, "--dry-run", "trainer.devcies=2")
    assert done.code == 2 and done.out == "" and done.err.count("\n") == 1
    assert "key 'trainer.devcies'" in done.err and "did you mean 'devices'?" in done.err


@pytest.mark.parametrize("trainer, gpus, processes", [
    ({"accelerator": "cpu", "devices": "auto"}, 4, 1),
    ({"accelerator": "auto", "devices": "auto"}, 4, 4),
    ({"accelerator": "auto", "devices": -1}, 0, 1),
    ({"devices": 2, "num_nodes": 3}, 0, 6),
    ({"devices": "3"}, 0, 3),
    ({"devices": [0, 2]}, 4, 2),
    ({"devices": "0,2,"}, 4, 2),
    (trainer_settings(torch.device("cuda:1")), 4, 1),
])
def test_the_processes_a_run_trains_in_are_counted_as_lightning_counts_them(monkeypatch, trainer, gpus, processes):
    """What decides whether `docmt table` may leave a run another process holds for later (tables/runner.py)."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert planned_processes(OmegaConf.create(trainer)) == processes
