"""`DocMTModule.on_train_start` warns of a module left in eval mode that no `Frozen` holds (its
dropout would be off), and of nothing else: Lightning's own warning, which counts the frozen context
encoders too, is hidden by the quiet output policy (`logs.EVAL_MODE_WARNING`)."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

from lightning_docmt.config.composition import compose
from lightning_docmt.data.datamodule import DocumentWindowDataModule
from lightning_docmt.training.run import build_module


def test_a_module_left_in_eval_mode_is_named_when_training_starts(tmp_path):
    cfg = compose(None, ["data.corpus=synthetic:tiny", "model.arch=transformer", f"data.cache_dir={tmp_path}"],
                  profile="tiny")
    datamodule = DocumentWindowDataModule(cfg.data, cfg.vocab, cfg.context, seed=1)
    datamodule.prepare_data()
    module = build_module(cfg, datamodule).train()
    module._trainer = SimpleNamespace(world_size=1)  # what on_train_start reads of its Trainer
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module.on_train_start()
    assert not [w for w in caught if "eval mode" in str(w.message)]
    name, child = next(iter(module.model.named_children()))
    child.eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module.on_train_start()
    messages = [str(w.message) for w in caught if "eval mode" in str(w.message)]
    assert len(messages) == 1 and f": {name}" in messages[0], messages
