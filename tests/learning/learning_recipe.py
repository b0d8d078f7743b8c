"""A table's stage recipe, scaled to a synthetic learning test (tests/learning/test_learning.py).

A learning test is the positive control of the tables that train a context model the same way: it
trains the table's stages on the synthetic corpus with the same layout (stage names, parents,
architectures, trainable globs, model overrides), schedule kind and continuation rule, the same
warm-up share of each stage, the same share of the first stage's updates for every later stage and
the same lr relative to the first stage's. Only the scale changes: the first stage's updates and
peak lr are the learning test's own. So a recipe that cannot teach a model to read its context
fails on synthetic data before it costs a table (`tests/learning/test_learning_recipe.py` checks that the
learning tests build their stages this way).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from lightning_docmt.tables.spec import compose_row
from lightning_docmt.training.stages import stage_config, stage_lr
from lightning_docmt.training.trainer import stage_steps
from tests.helpers.experiment_files import EXPERIMENTS

TABLE_PROFILE = "cpu"  # the profile the tables are measured at
STAGE_KEYS = ("arch", "init_from", "trainable", "model", "continue_schedule")  # copied as they are


@dataclass(frozen=True)
class StageRecipe:
    """One stage of a table row, relative to the row's first stage."""

    name: str
    settings: dict  # STAGE_KEYS as the table sets them
    share: float  # its updates over the first stage's
    warmup_share: float  # its warm-up over its own updates
    lr_ratio: float  # its peak lr over the first stage's
    schedule: str


@dataclass(frozen=True)
class TableRecipe:
    stages: list[StageRecipe]  # in schedule order, the first stage first

    @property
    def first(self) -> StageRecipe:
        return self.stages[0]


def recipe_of(cfg: DictConfig) -> TableRecipe:
    """The recipe of a composed run config, relative to its first stage."""
    first = cfg.train.schedule[0]
    first_cfg = stage_config(cfg, first)
    steps, lr = stage_steps(first_cfg, first), stage_lr(first_cfg, first)
    stages = []
    for name in cfg.train.schedule:
        scfg = stage_config(cfg, name)
        own = stage_steps(scfg, name)
        plain = OmegaConf.to_container(cfg.train.stages[name], resolve=True)
        stages.append(StageRecipe(name, {k: plain[k] for k in STAGE_KEYS}, own / steps,
                                  scfg.train.optim.warmup_steps / own, stage_lr(scfg, name) / lr,
                                  scfg.train.optim.schedule))
    return TableRecipe(stages)


def table_recipe(table: str, row: str) -> TableRecipe:
    """The recipe of `row` of the table file `table` (relative to experiments/), at TABLE_PROFILE."""
    return recipe_of(compose_row(EXPERIMENTS / table, row, profile=TABLE_PROFILE))


def scaled(recipe: TableRecipe, first_steps: int, first_lr: float, longer: dict[str, int] | None = None,
           **changes: dict) -> tuple[list[str], str]:
    """The learning test's settings and `train:` YAML for `recipe` at its scale: the first stage
    trains `first_steps` updates at peak `first_lr`; a stage named in `longer` trains that many times
    its scaled updates, its warm-up unchanged; `changes[name]` replaces stage settings (a control's
    trainable globs, say)."""
    longer = longer or {}
    settings = [f"train.optim.schedule={recipe.first.schedule}", f"train.max_steps={first_steps}",
                f"train.optim.lr={first_lr}",
                f"train.optim.warmup_steps={round(recipe.first.warmup_share * first_steps)}"]
    stages = {}
    for stage in recipe.stages:
        body = {k: v for k, v in stage.settings.items() if v not in (None, {}, False)}
        if stage is not recipe.first:
            steps = round(stage.share * first_steps)
            body.update(max_steps=steps * longer.get(stage.name, 1), lr=stage.lr_ratio * first_lr,
                        optim={"schedule": stage.schedule, "warmup_steps": round(stage.warmup_share * steps)})
        body.update(changes.get(stage.name, {}))
        stages[stage.name] = body
    schedule = [s.name for s in recipe.stages]
    return settings, f"train:\n  stages: {json.dumps(stages)}\n  schedule: {json.dumps(schedule)}\n"
