"""Architecture registry (DESIGN.md section 4): name -> (config dataclass, LightningModule class).

Every `models/<arch>.py` decorates its LightningModule with `@register_arch("<arch>", <Arch>Config)`,
where `<Arch>Config` subclasses `schema.ModelConfig`; that dataclass is the schema of `model.*` when
`model.arch=<arch>`. `import_all_archs()` imports every module of `lightning_docmt.models`, so an
architecture is known (and parametrized tests cover it) as soon as its file exists. The registry key
is also the preset name: `configs/arch/<arch>.yaml`.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable, TypeVar

from lightning_docmt.errors import DocMTInputError
from lightning_docmt.schema import ModelConfig

ModuleT = TypeVar("ModuleT", bound=type)


@dataclass(frozen=True)
class ArchEntry:
    name: str
    config_class: type[ModelConfig]
    module_class: type


ARCHS: dict[str, ArchEntry] = {}


def register_arch(name: str, config_class: type[ModelConfig]) -> Callable[[ModuleT], ModuleT]:
    """Class decorator: register a LightningModule class under `name` with its config dataclass."""
    if not (isinstance(config_class, type) and dataclasses.is_dataclass(config_class)
            and issubclass(config_class, ModelConfig)):
        raise TypeError(f"register_arch('{name}'): the config class must be a dataclass subclassing "
                        f"schema.ModelConfig, got {config_class!r}")

    def wrap(module_class: ModuleT) -> ModuleT:
        existing = ARCHS.get(name)
        if existing is not None and _qualified(existing.module_class) != _qualified(module_class):
            raise ValueError(f"architecture '{name}' is registered twice: by "
                             f"{_qualified(existing.module_class)} and {_qualified(module_class)}")
        ARCHS[name] = ArchEntry(name=name, config_class=config_class, module_class=module_class)
        return module_class

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


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
