from pathlib import Path

import pytest
from lightning.pytorch.loggers import CSVLogger

from lightning_docmt.config import composition as config_lib
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.training import trainer as trainer_factory


def tiny_cfg(*overrides: str):
    return config_lib.compose(None, ["model.arch=transformer", *overrides], profile="tiny")


def test_wandb_failure_never_stops_training(tmp_path, monkeypatch):
    import lightning.pytorch.loggers as loggers

    class BrokenWandb:
        def __init__(self, *args, **kwargs):
            raise ConnectionError("no network")

    monkeypatch.setattr(loggers, "WandbLogger", BrokenWandb)
    monkeypatch.setenv("WANDB_MODE", "online")
    built = trainer_factory.build_loggers(tiny_cfg("logging.wandb=true"), tmp_path)
    assert [type(lg) for lg in built] == [CSVLogger]


def test_wandb_disabled_mode_builds_no_wandb_logger(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    built = trainer_factory.build_loggers(tiny_cfg("logging.wandb=true"), tmp_path)
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
    monkeypatch.setattr(trainer_factory, "CPUINFO", cpuinfo)
    assert trainer_factory.resolve_precision("fast") == fast
    assert trainer_factory.resolve_precision("fast", accelerator="cpu") == fast
    assert trainer_factory.resolve_precision("auto") == "32-true"  # auto never picks bf16 on a CPU
