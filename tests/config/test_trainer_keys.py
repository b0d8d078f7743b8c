"""`trainer:` keys are checked at compose time against the arguments of Lightning's Trainer
(`config/trainer_arguments.py`): a misspelt one fails before anything trains, naming where it came from."""

from __future__ import annotations

import inspect

import pytest
import yaml

from lightning_docmt.config.composition import compose
from lightning_docmt.config.trainer_arguments import trainer_arguments
from lightning_docmt.errors import DocMTInputError
from tests.helpers.stand_in_archs import SENT


def test_the_known_keys_are_the_installed_trainers_arguments():
    """Read from Lightning's source without importing it, they are what `inspect` sees once it is."""
    import lightning.pytorch as pl

    signature = set(inspect.signature(pl.Trainer.__init__).parameters) - {"self"}
    assert trainer_arguments() == signature


def test_every_trainer_argument_composes(stand_in_archs):
    cfg = compose(None, [f"model.arch={SENT}", "trainer.devices=2", "trainer.strategy=ddp",
                         "trainer.limit_val_batches=0.5"])
    assert (cfg.trainer.devices, cfg.trainer.strategy, cfg.trainer.limit_val_batches) == (2, "ddp", 0.5)


def test_a_misspelt_override_names_the_key_the_override_and_the_close_match(stand_in_archs):
    with pytest.raises(DocMTInputError) as err:
        compose(None, [f"model.arch={SENT}", "trainer.devcies=2"])
    message = str(err.value)
    assert "key 'trainer.devcies'" in message and "did you mean 'devices'?" in message
    assert "'trainer.devcies=2'" in message and "\n" not in message


def test_a_misspelt_key_in_a_file_names_its_file_and_line(stand_in_archs, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"model": {"arch": SENT}, "trainer": {"devices": 1, "acelerator": "cpu"}},
                                   sort_keys=False))
    with pytest.raises(DocMTInputError) as err:
        compose(path, [])
    assert str(err.value).startswith(f"{path}:5: key 'trainer.acelerator'")
    assert "did you mean 'accelerator'?" in str(err.value)


def test_a_key_like_no_argument_says_where_to_look(stand_in_archs):
    with pytest.raises(DocMTInputError, match=r"key 'trainer\.zzqx'.*lightning\.pytorch\.Trainer's arguments"):
        compose(None, [f"model.arch={SENT}", "trainer.zzqx=1"])
