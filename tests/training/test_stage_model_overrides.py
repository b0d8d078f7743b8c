"""`train.stages.<name>.model`: a stage's own `model.*` settings (`training/stages.stage_config`)."""

from __future__ import annotations

import pytest

from lightning_docmt.errors import DocMTInputError
from lightning_docmt.training import stages
from tests.helpers.stage_fits import tiny_config

COATTN = ["model.arch=lifeng_coattn", "context.prev_sentences=2", "model.rl.lr_scale=0.1",
          "train.stages.coattn={arch: lifeng_coattn}",
          "train.stages.sparse={arch: lifeng_coattn, init_from: coattn, model: {rl: {selection_cost: 0.02}}}",
          "train.schedule=[coattn,sparse]"]


def test_a_stage_model_setting_is_deep_merged_into_that_stage_only(tmp_path):
    cfg = tiny_config(tmp_path, *COATTN)
    first, second = stages.stage_config(cfg, "coattn"), stages.stage_config(cfg, "sparse")
    assert first.model.rl.selection_cost == 0.0 and second.model.rl.selection_cost == 0.02
    assert second.model.rl.lr_scale == 0.1 and second.model.rl.reward == "seq_prob"  # the rest of rl kept
    assert stages.stage_key(first, "coattn", "") != stages.stage_key(second, "coattn", "")


def test_a_stage_model_setting_the_stage_arch_lacks_names_its_key(tmp_path):
    cfg = tiny_config(tmp_path, "train.stages.main.model={rl: {samples: 2}}")  # a transformer run
    with pytest.raises(DocMTInputError, match=r"train\.stages\.main\.model\.rl"):
        stages.stage_config(cfg, "main")


def test_a_stage_validates_at_its_own_interval_and_the_others_at_the_runs(tmp_path):
    cfg = tiny_config(tmp_path, "train.step_cap=null", "train.val_every_steps=900", "train.stages.base={}",
                      "train.stages.short={init_from: base, max_steps: 600, val_every_steps: 300}",
                      "train.schedule=[base,short]")
    base, short = stages.stage_config(cfg, "base"), stages.stage_config(cfg, "short")
    assert (base.train.val_every_steps, short.train.val_every_steps) == (900, 300)
    assert cfg.train.val_every_steps == 900  # the run's config is untouched
    bad = tiny_config(tmp_path, "train.stages.main={val_every_steps: 0}")
    with pytest.raises(DocMTInputError, match=r"train\.stages\.main\.val_every_steps.*positive"):
        stages.stage_config(bad, "main")


def test_the_optimizer_is_selectable_and_the_rnn_preset_uses_adagrad(tmp_path):
    import torch
    from omegaconf import OmegaConf

    from lightning_docmt.config import composition as config_lib
    from lightning_docmt.training.module import DocMTModule

    paper = config_lib.compose(None, ["model.arch=yk_rnn"]).train.optim  # no profile: the preset's
    assert (paper.optimizer, paper.lr, paper.schedule) == ("adagrad", 0.01, "constant")
    cfg = tiny_config(tmp_path, "model.arch=yk_rnn")
    assert cfg.train.optim.optimizer == "adagrad"  # a profile's lr and schedule leave the optimizer
    module = DocMTModule(OmegaConf.to_container(cfg, resolve=True), 23, 23)
    optimizer, _ = module.build_optimizer([(list(module.parameters()), 0.01)], stage_steps=10)
    assert isinstance(optimizer, torch.optim.Adagrad)
    assert isinstance(DocMTModule(OmegaConf.to_container(tiny_config(tmp_path), resolve=True), 23, 23)
                      .build_optimizer([([torch.nn.Parameter(torch.zeros(1))], 1.0)], 10)[0], torch.optim.Adam)
    with pytest.raises(DocMTInputError, match="train.optim.optimizer"):
        tiny_config(tmp_path, "train.optim.optimizer=sgd")


def test_every_rnn_row_shares_one_baseline_stage(tmp_path):
    """The yamagishi tables start every row from `base` (`model: {context: none, ...}`): an RNN
    without context reads none, so the rows' context settings (and whether CXMI is scored after
    testing) leave that stage's key alone, while their context stages differ."""
    base = ["model.arch=yk_rnn", "data.document_order=true",
            "train.stages.base={arch: yk_rnn, model: {context: none, context_side: source}}",
            "train.stages.ctx={arch: yk_rnn, init_from: base}", "train.schedule=[base,ctx]"]
    rows = [["model.context=separated", "context.side=target", "context.prev_sentences=1"],
            ["model.context=shared", "context.side=mix", "eval.context_usage=false"]]
    configs = [tiny_config(tmp_path, *base, *row) for row in rows]
    keys = [stages.stage_key(stages.stage_config(c, "base"), "base", "") for c in configs]
    assert keys[0] == keys[1]
    contexts = [stages.stage_key(stages.stage_config(c, "ctx"), "ctx", keys[0]) for c in configs]
    assert contexts[0] != contexts[1]
    assert stages.stage_config(configs[0], "base").context.prev_sentences == 0
