from pathlib import Path

import pytest
import wandb
from lightning.pytorch.loggers import CSVLogger

from lightning_docmt import cpu
from lightning_docmt.config import composition as config_lib
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.training import trainer as trainer_factory
from lightning_docmt.training.dashboard import run_dashboard


def tiny_cfg(*overrides: str):
    return config_lib.compose(None, ["model.arch=transformer", *overrides], profile="tiny")


@pytest.mark.parametrize("mode", ["online", "disabled"])
def test_a_stage_logs_to_csv_only_when_its_run_has_no_wandb_run(tmp_path, monkeypatch, mode):
    """wandb failing to start (online, no network) or turned off: the stage trains with its CSV log."""
    def broken_init(**kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(wandb, "init", broken_init)
    monkeypatch.setenv("WANDB_MODE", mode)
    with run_dashboard(tiny_cfg("logging.wandb=true"), tmp_path / "run", precision="32-true") as dashboard:
        built = trainer_factory.build_loggers(tmp_path, "main", dashboard)
    assert [type(lg) for lg in built] == [CSVLogger]


def test_trainer_keys_owned_by_the_suite_are_rejected(tmp_path):
    cfg = tiny_cfg("trainer.max_steps=5")
    with pytest.raises(DocMTInputError, match="trainer.max_steps"):
        trainer_factory.build_trainer(cfg, "main", Path(tmp_path))


def test_precision_auto_is_full_precision_without_cuda(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert trainer_factory.resolve_precision("auto") == "32-true"
    assert trainer_factory.resolve_precision("bf16-mixed") == "bf16-mixed"


@pytest.mark.parametrize("flags, fast", [("fpu avx2 avx512f avx512_bf16", "bf16-mixed"),
                                          ("fpu avx2 amx_bf16 amx_tile", "bf16-mixed"),
                                          ("fpu avx2 avx512f avx512bw", "32-true")])
def test_precision_fast_uses_bf16_only_on_cpus_with_native_bf16(monkeypatch, tmp_path, flags, fast):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr(cpu, "CPUINFO", cpuinfo)
    assert trainer_factory.resolve_precision("fast") == fast
    assert trainer_factory.resolve_precision("fast", accelerator="cpu") == fast
    assert trainer_factory.resolve_precision("auto") == "32-true"  # auto never picks bf16 on a CPU
