"""`training/stages.stage_config` merges a stage's overrides into a copy of the run's validated
config; it must give the config a merge of the whole run, overrides applied, into a fresh schema of
the stage's architecture gives (`schema_merge` below, the definition it is checked against), on the
tables whose stages use every kind of override."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import DictConfig, OmegaConf

from lightning_docmt.config import composition as config_lib
from lightning_docmt.config.registry import get_arch, import_all_archs
from lightning_docmt.config.schema import ContextConfig
from lightning_docmt.tables.spec import compose_row
from lightning_docmt.training.stages import stage_config
from tests.helpers.experiment_files import EXPERIMENTS

# Rows whose stages use every kind of override: another architecture than the run's (a Transformer
# stage 1), `data` (a mixture share), `model` (a stack of fewer blocks, Zhang's intact start), `optim`,
# `val_every_steps`, streams read by no block, the default context for a context-free stage, a
# first-pass hypothesis stream, a stage 3 after stage 2, document-order RNN stages.
ROWS = [("donato2021/t4_source_and_target.yaml", "target_own"),
        ("donato2021/t6_augmentation.yaml", "bert_fused_plus"),
        ("donato2021/t6_augmentation.yaml", "doc_transformer_plus"),
        ("donato2021/t7_three_stage.yaml", "three_stage"),
        ("zhang2018/t7_two_step.yaml", "two_step"),
        ("lifeng2019/t2_main.yaml", "coattn_bpe"),
        ("yamagishi/t2_de_en.yaml", "sh_tgt")]


def schema_merge(cfg: DictConfig, name: str) -> DictConfig:
    """The stage's config by definition: the run's resolved values with the stage's overrides, the
    model's options the stage's architecture has, the default context for a model that reads none
    and only the streams its model reads, merged into the stage architecture's schema."""
    stage = cfg.train.stages[name]
    container = OmegaConf.to_container(cfg, resolve=True)
    container["data"] = OmegaConf.to_container(OmegaConf.merge(container["data"], stage.data), resolve=True)
    container["train"]["optim"].update(OmegaConf.to_container(stage.optim, resolve=True))
    if stage.val_every_steps is not None:
        container["train"]["val_every_steps"] = stage.val_every_steps
    arch = stage.arch or cfg.model.arch
    entry = get_arch(arch)
    fields = {f.name for f in dataclasses.fields(entry.config_class)}
    container["model"] = OmegaConf.to_container(OmegaConf.merge(
        {k: v for k, v in container["model"].items() if k in fields}, stage.model), resolve=True)
    if not entry.model_class.reads_context_with(container["model"]):
        container["context"] = dataclasses.asdict(ContextConfig())
    read = entry.model_class.streams_read(container["model"])
    container["context"]["streams"] = {n: s for n, s in (container["context"].get("streams") or {}).items()
                                       if n in read}
    container["model"]["arch"] = arch
    scfg = config_lib.schema_defaults(arch)
    scfg.merge_with(container)
    return scfg


@pytest.mark.parametrize("table, row", ROWS)
def test_every_stage_of_a_table_row_is_the_schema_merge_of_its_overrides(table, row):
    import_all_archs()
    cfg = compose_row(EXPERIMENTS / table, row, "tiny")
    before = OmegaConf.to_yaml(cfg)
    for name in cfg.train.schedule:
        got, want = stage_config(cfg, name), schema_merge(cfg, name)
        assert OmegaConf.get_type(got.model) is OmegaConf.get_type(want.model), name
        assert OmegaConf.to_yaml(got) == OmegaConf.to_yaml(want), name  # values and key order
    assert OmegaConf.to_yaml(cfg) == before  # the run's config is left as it was


def test_a_stage_architecture_options_and_context_are_its_own():
    """The check above can fail: a stage 1 Transformer of a stack run has no stack and reads no
    stream, and a stage's `data` override reaches that stage only."""
    import_all_archs()
    cfg = compose_row(EXPERIMENTS / "donato2021/t6_augmentation.yaml", "bert_fused_plus", "tiny")
    sent, plus = stage_config(cfg, "sent"), stage_config(cfg, "stack_plus")
    assert "stack" not in sent.model and not sent.context.streams
    assert plus.model.stack and set(plus.context.streams) == {b.stream for b in plus.model.stack}
    assert plus.data.mix.share == 0.5 and sent.data.mix.share != 0.5
