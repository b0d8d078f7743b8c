"""Architecture registry: registration, lookup errors, auto-import of lightning_docmt/models/."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest

import lightning_docmt.models
from lightning_docmt.config import registry
from lightning_docmt.config.schema import ModelConfig
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.models.transformer import TransformerConfig, TransformerSeq2Seq
from lightning_docmt.training.stages import check_stages
from tests.helpers.stage_fits import tiny_config


@pytest.fixture
def restored_registry():
    registry.import_all_archs()  # real archs imported during the test would vanish on restore
    saved = dict(registry.ARCHS)
    yield registry.ARCHS
    registry.ARCHS.clear()
    registry.ARCHS.update(saved)


@dataclass
class GatedConfig(ModelConfig):
    gating: bool = True


def test_register_arch_records_config_and_model_class(restored_registry):
    @registry.register_arch("gated_test", GatedConfig)
    class GatedModule:  # any class: the registry does not look inside
        pass

    entry = registry.get_arch("gated_test")
    assert entry.config_class is GatedConfig and entry.model_class is GatedModule
    assert entry.name == "gated_test"


def test_register_arch_rejects_a_config_that_is_not_a_model_config():
    @dataclass
    class NotAModelConfig:
        d_model: int = 8

    with pytest.raises(TypeError, match="ModelConfig"):
        registry.register_arch("bad_test", NotAModelConfig)


def test_two_classes_under_one_name_is_an_error(restored_registry):
    registry.register_arch("twice_test", GatedConfig)(type("First", (), {}))
    with pytest.raises(ValueError, match="registered twice"):
        registry.register_arch("twice_test", GatedConfig)(type("Second", (), {}))


def test_unknown_arch_names_the_closest_and_all_registered(restored_registry):
    registry.register_arch("zhang_doc_test", GatedConfig)(type("Z", (), {}))
    with pytest.raises(DocMTInputError) as err:
        registry.get_arch("zhang_dco_test")
    message = str(err.value)
    assert "model.arch" in message and "did you mean zhang_doc_test" in message
    assert "registered:" in message and "zhang_doc_test" in message.split("registered:")[1]


def test_import_all_archs_imports_every_model_module(restored_registry, tmp_path, monkeypatch):
    # A model file dropped into lightning_docmt/models registers itself on import_all_archs().
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    (models_dir / "probe_arch_test.py").write_text(
        "from dataclasses import dataclass\n"
        "from lightning_docmt.config.registry import register_arch\n"
        "from lightning_docmt.config.schema import ModelConfig\n"
        "@dataclass\nclass ProbeConfig(ModelConfig):\n    probe: int = 3\n"
        "@register_arch('probe_arch_test', ProbeConfig)\nclass ProbeModule:\n    pass\n")
    monkeypatch.setattr(lightning_docmt.models, "__path__",
                        [*lightning_docmt.models.__path__, str(models_dir)])
    monkeypatch.delitem(sys.modules, "lightning_docmt.models.probe_arch_test", raising=False)
    assert "probe_arch_test" not in registry.ARCHS
    registry.import_all_archs()
    assert registry.ARCHS["probe_arch_test"].config_class().probe == 3
    sys.modules.pop("lightning_docmt.models.probe_arch_test", None)


class PretrainedStandIn(TransformerSeq2Seq):
    """A model whose constructor would load a pretrained encoder (here: fail), answering
    `parameter_names` from its config alone, as a pretrained-context model does."""

    def __init__(self, cfg, src_vocab_size, tgt_vocab_size):
        raise AssertionError("constructed: would have loaded a pretrained encoder")

    @classmethod
    def parameter_names(cls, cfg) -> list[str]:
        return ["pretrained.layer.0.weight", "adapter.weight", "output.weight"]


@dataclass
class PretrainedStandInConfig(TransformerConfig):
    arch: str = "pretrained_stand_in"


def test_check_stages_asks_the_model_class_for_names_without_building_it(restored_registry, tmp_path):
    registry.ARCHS["pretrained_stand_in"] = registry.ArchEntry(
        "pretrained_stand_in", PretrainedStandInConfig, PretrainedStandIn)

    def stage_config(trainable: str):
        return tiny_config(tmp_path, "model.arch=pretrained_stand_in",
                           f"train.stages.main.trainable=[{trainable}]")

    check_stages(stage_config("adapter.*"))  # its names, not a built model's
    with pytest.raises(DocMTInputError, match="encoder.layers"):
        check_stages(stage_config("encoder.layers.*"))  # a Transformer's name, not this model's
