"""Architecture registry (docs/design.md section 4): name -> (config dataclass, model class).

Every `models/<arch>.py` decorates its `Seq2SeqModel` subclass (`nn/seq2seq.py`, plain PyTorch:
model files import no Lightning) with `@register_arch("<arch>", <Arch>Config)`, where
`<Arch>Config` subclasses `config.schema.ModelConfig`; that dataclass is the schema of `model.*`
when `model.arch=<arch>`. One generic LightningModule, `training.module.DocMTModule`, drives every
registered model; `build_model` builds one (for training, and for inference without Lightning).
`import_all_archs()` imports every module of `lightning_docmt.models`, so an
architecture is known (and parametrized tests cover it) as soon as its file exists. The registry key
is also the preset name: `config/arch/<arch>.yaml`.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from omegaconf import DictConfig, OmegaConf

from lightning_docmt.config.schema import ModelConfig
from lightning_docmt.errors import DocMTInputError

ModelT = TypeVar("ModelT", bound=type)


@dataclass(frozen=True)
class ArchEntry:
    name: str
    config_class: type[ModelConfig]
    model_class: type  # a `Seq2SeqModel` subclass, built as model_class(typed config, src V, tgt V)


ARCHS: dict[str, ArchEntry] = {}


def register_arch(name: str, config_class: type[ModelConfig]) -> Callable[[ModelT], ModelT]:
    """Class decorator: register a `Seq2SeqModel` class under `name` with its config dataclass."""
    if not (isinstance(config_class, type) and dataclasses.is_dataclass(config_class)
            and issubclass(config_class, ModelConfig)):
        raise TypeError(f"register_arch('{name}'): the config class must be a dataclass subclassing "
                        f"schema.ModelConfig, got {config_class!r}")

    def wrap(model_class: ModelT) -> ModelT:
        existing = ARCHS.get(name)
        if existing is not None and _qualified(existing.model_class) != _qualified(model_class):
            raise ValueError(f"architecture '{name}' is registered twice: by "
                             f"{_qualified(existing.model_class)} and {_qualified(model_class)}")
        ARCHS[name] = ArchEntry(name=name, config_class=config_class, model_class=model_class)
        return model_class

    return wrap


def import_all_archs() -> dict[str, ArchEntry]:
    """Import every module in `lightning_docmt/models/` so that each registers its architecture."""
    import lightning_docmt.models as models

    for info in pkgutil.iter_modules(models.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{models.__name__}.{info.name}")
    return ARCHS


def find_arch(name: str) -> ArchEntry | None:
    """The entry registered under `name` (importing the model modules if needed), else None."""
    if name not in ARCHS:
        import_all_archs()
    return ARCHS.get(name)


def unknown_arch_message(name: str) -> str:
    """'unknown architecture ...' with the closest registered names and the full list."""
    close = difflib.get_close_matches(str(name), ARCHS, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return f"unknown architecture '{name}'{hint}; registered: {', '.join(sorted(ARCHS)) or 'none'}"


def get_arch(name: str) -> ArchEntry:
    """The entry registered under `name`; an unknown name is a DocMTInputError naming the valid ones."""
    entry = find_arch(name)
    if entry is None:
        raise DocMTInputError(unknown_arch_message(name), key="model.arch")
    return entry


def model_config(model_cfg: DictConfig) -> ModelConfig:
    """`model.*` as the typed config dataclass of its architecture (what the model class is built from)."""
    entry = get_arch(model_cfg.arch)
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(entry.config_class), model_cfg))


def build_model(model_cfg: DictConfig, src_vocab_size: int, tgt_vocab_size: int) -> Any:
    """The registered model of `model_cfg.arch` (a `Seq2SeqModel`), built from its typed config
    dataclass for vocabularies of the given sizes; plain PyTorch, its weights freshly initialised."""
    entry = get_arch(model_cfg.arch)
    return entry.model_class(model_config(model_cfg), src_vocab_size, tgt_vocab_size)


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
