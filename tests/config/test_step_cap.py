"""`train.step_cap`: the `tiny` profile caps every step count of a run, whatever a table or experiment
file sets for its stages (config/composition.py); the other profiles keep the file's settings."""

from __future__ import annotations

import pytest
import yaml
from omegaconf import OmegaConf

from lightning_docmt.config.composition import CONFIG_DIR, compose, save_config
from lightning_docmt.config.registry import import_all_archs
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.tables.spec import compose_row, load_table
from lightning_docmt.training.stages import stage_config
from lightning_docmt.training.trainer import stage_steps
from tests.helpers.paths import EXPERIMENTS
from tests.helpers.stand_in_archs import SENT

ZHANG_T8 = EXPERIMENTS / "zhang2018" / "t8_context_integration.yaml"
TINY_CAP = yaml.safe_load((CONFIG_DIR / "profiles" / "tiny.yaml").read_text())["train"]["step_cap"]


def table_stage_settings(table) -> dict:
    """`train.stages` as the table's `base:` overrides write them, read without composing."""
    return OmegaConf.from_dotlist([o for o in table.base if o.startswith("train.stages.")]).train.stages


def test_tiny_caps_every_stage_of_a_real_table():
    import_all_archs()
    table = load_table(ZHANG_T8)
    for row in table.rows:
        cfg = compose_row(table, row.name, "tiny")
        assert cfg.train.step_cap == TINY_CAP
        for name in cfg.train.schedule:
            scfg = stage_config(cfg, name)
            assert 0 < stage_steps(scfg, name) <= TINY_CAP, (row.name, name)
            assert scfg.train.val_every_steps <= TINY_CAP, (row.name, name)
            assert scfg.train.optim.warmup_steps <= TINY_CAP, (row.name, name)


@pytest.mark.parametrize("profile", ["cpu", "paper"])
def test_the_other_profiles_keep_the_tables_own_stage_settings(profile):
    import_all_archs()
    table = load_table(ZHANG_T8)
    own = table_stage_settings(table).doc
    assert own.max_steps > TINY_CAP and own.val_every_steps > TINY_CAP  # what tiny has to cap
    cfg = compose_row(table, "both", profile)
    assert cfg.train.step_cap is None
    doc = cfg.train.stages.doc
    assert (doc.max_steps, doc.val_every_steps, doc.optim.warmup_steps) == (
        own.max_steps, own.val_every_steps, own.optim.warmup_steps)


def test_a_run_without_a_step_limit_gets_the_cap(stand_in_archs):
    cfg = compose(None, [f"model.arch={SENT}", "train.max_steps=-1", "train.max_epochs=3"], profile="tiny")
    assert cfg.train.max_steps == TINY_CAP and cfg.train.max_epochs == 3


def test_the_cap_bounds_warm_ups_intervals_and_milestones_of_every_stage(stand_in_archs):
    over = TINY_CAP + 7
    cfg = compose(None, [f"model.arch={SENT}", f"train.optim.warmup_steps={over}", f"train.val_every_steps={over}",
                         f"train.stages.main={{max_steps: {over}, val_every_steps: {over}, "
                         f"optim: {{warmup_steps: {over}}}, unfreeze: [{{globs: ['*'], at_step: {over}, lr: 1.0}}]}}"],
                  profile="tiny")
    main = cfg.train.stages.main
    assert (cfg.train.optim.warmup_steps, cfg.train.val_every_steps) == (TINY_CAP, TINY_CAP)
    assert (main.max_steps, main.val_every_steps, main.optim.warmup_steps) == (TINY_CAP,) * 3
    assert main.unfreeze[0].at_step == TINY_CAP


def test_a_cap_is_no_default_shorter_settings_stay(stand_in_archs):
    under = TINY_CAP - 3
    cfg = compose(None, [f"model.arch={SENT}", f"train.max_steps={under}", "train.val_every_steps=2",
                         f"train.stages.main={{max_steps: {under - 1}, optim: {{warmup_steps: 1}}}}"], profile="tiny")
    assert (cfg.train.max_steps, cfg.train.val_every_steps) == (under, 2)
    assert (cfg.train.stages.main.max_steps, cfg.train.stages.main.optim.warmup_steps) == (under - 1, 1)
    assert cfg.train.stages.main.val_every_steps is None  # unset stays unset: the run's interval


def test_null_lifts_the_cap_and_another_number_moves_it(stand_in_archs):
    longer = 10 * TINY_CAP
    settings = [f"model.arch={SENT}", f"train.max_steps={longer}"]
    assert compose(None, [*settings, "train.step_cap=null"], profile="tiny").train.max_steps == longer
    assert compose(None, [*settings, f"train.step_cap={2 * TINY_CAP}"], profile="tiny").train.max_steps == 2 * TINY_CAP


def test_a_saved_tiny_config_composes_back_unchanged(stand_in_archs, tmp_path):
    cfg = compose(None, [f"model.arch={SENT}", f"train.stages.main.max_steps={TINY_CAP + 1}"], profile="tiny")
    assert compose(save_config(cfg, tmp_path), []) == cfg


@pytest.mark.parametrize("cap", [0, -5])
def test_a_cap_below_one_step_is_an_error(stand_in_archs, cap):
    with pytest.raises(DocMTInputError, match=r"key 'train\.step_cap': must be a positive number"):
        compose(None, [f"model.arch={SENT}", f"train.step_cap={cap}"])
