"""Compose a run config from its layers (docs/design.md section 3).

Merge order, later layers win:

  1. dataclass defaults: `schema.RunConfig`, with `model` replaced by the config dataclass of the
     architecture (`registry`)
  2. `config/base.yaml`
  3. `config/arch/<arch>.yaml` (the paper preset of the architecture, where the file exists)
  4. `config/profiles/<profile>.yaml` (`tiny`, `cpu`, `paper`)
  5. the experiment YAML (a plain run config), or a table's `base:` overrides
  6. a table row's `overrides:`
  7. command-line `key=value` overrides (OmegaConf dotlist syntax: `a.b=1`, `x=[1,2]`, `k=null`)

`model.arch` and `profile` choose the schema and layers 3-4, so they are read from layers 2 and 5-7
(the last layer that sets them wins; a `profile` argument beats every layer) before anything is merged.

The schema is a structured config: an unknown key or a wrong type fails while merging, and the
DocMTInputError names the key path, the file and line or the override it came from, and the closest
valid names. `trainer` (kwargs of `lightning.pytorch.Trainer`) and each stage's `data` and `optim` are free
mappings; after merging, stage `data` and `optim` keys are checked against `DataConfig` and `OptimConfig`,
and `trainer` keys against the Trainer's arguments (`trainer_arguments.py`).

A pretrained encoder (`model.pretrained_encoder`, `config/pretrained_files.py`) is resolved last: its
checkpoint must be found offline (else one error naming the key), its sizes replace `d_model`,
`heads`, `ffn_dim` and `enc_layers` whatever the layers said (a profile shrinks only the rest),
`model.pretrained_layout` gets the rest of its config.json, `vocab.src_pretrained` names the same
checkpoint, and `vocab.joint` and `model.share_embeddings` become false (set true explicitly, they
are an error): the source side is the checkpoint's WordPiece vocabulary, the target side its own.
The frozen context encoders of `model.arch=pas` (`model.context_encoders`) are resolved the same
way, and the streams their stack reads get their tokenizer (`_apply_context_encoders`).

`save_config` writes the resolved config of a run, marked `docmt_resolved: true`. Composing a marked
file skips layers 2-4: it is already complete, and re-applying presets that changed since could alter
it, so `compose(run_dir / "config.yaml", [])` gives back exactly the saved config.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import hashlib
import json
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from lightning_docmt.config.pretrained_files import ENCODER_KEY, encoder_settings
from lightning_docmt.config.registry import find_arch, unknown_arch_message
from lightning_docmt.config.schema import DataConfig, OptimConfig, RunConfig
from lightning_docmt.config.trainer_arguments import trainer_arguments
from lightning_docmt.config.yaml_file import YamlFile
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.schedules import SCHEDULES

OPTIMIZERS = ("adam", "adagrad")  # train.optim.optimizer

CONFIG_DIR = Path(__file__).resolve().parent  # base.yaml, arch/, profiles/
RESOLVED_KEY = "docmt_resolved"
CONFIG_FILENAME = "config.yaml"


@dataclass(frozen=True)
class Layer:
    """One source of values: a whole YAML file, or one `key=value` override.

    `file` is set for a YAML layer (error lines come from it); `path`/`line` locate an override
    written inside a file (a table's `base:` or a row's `overrides:`).
    """

    source: str
    values: DictConfig
    file: YamlFile | None = None
    path: Path | None = None
    line: int | None = None
    key: str | None = None  # the key an override sets

    def error(self, message: str, key: str | None) -> DocMTInputError:
        key = key or self.key
        if self.file is not None:
            line = self.file.line_of(key.split(".")) if key else None
            return DocMTInputError(message, path=self.file.path, line=line, key=key)
        return DocMTInputError(f"{message} (from {self.source})", path=self.path, line=self.line,
                               key=key)


def yaml_layer(file: YamlFile) -> Layer:
    return Layer(source=str(file.path), values=file.data, file=file)


def override_layers(overrides: Sequence[str], origin: str, *, path: Path | None = None,
                    lines: Sequence[int | None] | None = None) -> list[Layer]:
    """One layer per `key=value` string; `origin` says where they come from in error messages."""
    layers = []
    for i, override in enumerate(overrides):
        line = lines[i] if lines is not None else None
        source = f"{origin} '{override}'"
        key, sep, _ = str(override).partition("=")
        if not isinstance(override, str) or not sep or not key.strip():
            raise DocMTInputError(f"expected key=value, got {override!r} ({origin})", path=path,
                                  line=line)
        try:
            values = OmegaConf.from_dotlist([override])
        except Exception as err:  # OmegaConf surfaces YAML and grammar errors with many types
            raise DocMTInputError(f"cannot parse {source}: {str(err).splitlines()[0]}", path=path,
                                  line=line, key=key.strip()) from None
        layers.append(Layer(source=source, values=values, path=path, line=line, key=key.strip()))
    return layers


def compose(config_path: str | Path | None, overrides: Sequence[str] = (), *,
            profile: str | None = None, table_base: Sequence[str] = (),
            row_overrides: Sequence[str] = ()) -> DictConfig:
    """The resolved run config of an experiment YAML (or none) plus overrides, in the order above."""
    user_layers: list[Layer] = []
    resolved = False
    if config_path is not None:
        file = YamlFile.load(config_path)
        if "rows" in file.data:
            raise DocMTInputError("this is a table file (it has 'rows:'); choose one of its rows "
                                  "(docmt fit TABLE.yaml --row NAME)", path=file.path)
        resolved = _pop_resolved_marker(file)
        user_layers.append(yaml_layer(file))
    user_layers += override_layers(table_base, "table base override")
    user_layers += override_layers(row_overrides, "row override")
    user_layers += override_layers(overrides, "command line override")
    return compose_layers(user_layers, profile=profile, resolved=resolved)


def compose_layers(user_layers: Sequence[Layer], *, profile: str | None = None,
                   resolved: bool = False) -> DictConfig:
    """Merge layers 5-7 (`user_layers`, in order) over the defaults, base, preset and profile.

    With `resolved`, `user_layers[0]` is a saved run config (`save_config`) and layers 2-4 are skipped.
    """
    if resolved:
        arch = _arch_of(user_layers)
        profile_name = _saved_profile(user_layers, profile)
        layers = list(user_layers)
    else:
        base = yaml_layer(YamlFile.load(CONFIG_DIR / "base.yaml"))
        arch = _arch_of([base, *user_layers])  # presets and profiles never set model.arch
        layers = [base]
        preset = CONFIG_DIR / "arch" / f"{arch}.yaml"
        if preset.is_file():
            layers.append(yaml_layer(YamlFile.load(preset)))
        chosen = (profile, None) if profile else _last_set(user_layers, "profile")
        profile_name = chosen[0] if chosen else None
        if profile_name is not None:  # `profile=null` means no profile
            layers.append(yaml_layer(_profile_file(profile_name, chosen[1])))
        layers += user_layers

    entry = find_arch(arch)
    if entry is None:
        raise _error_at(layers, "model.arch", unknown_arch_message(arch))
    cfg = copy.deepcopy(_schema(entry.config_class, arch))
    for layer in layers:
        try:
            cfg.merge_with(layer.values)
        except OmegaConfBaseException as err:
            raise _merge_error(err, layer, arch) from None
    cfg.profile = profile_name
    _resolve(cfg)
    _apply_pretrained_encoder(cfg, layers)
    _apply_context_encoders(cfg, layers)
    _validate(cfg)
    _check_trainer_keys(cfg, layers)
    _apply_step_cap(cfg)
    return cfg


def schema_defaults(arch: str) -> DictConfig:
    """The structured schema of a run of `arch` before any layer (no base, preset or profile): each
    option's default in code. A fresh copy each call, the caller may merge into it."""
    entry = find_arch(arch)
    if entry is None:
        raise DocMTInputError(unknown_arch_message(arch), key="model.arch")
    return copy.deepcopy(_schema(entry.config_class, arch))


@functools.cache
def _schema(config_class: type, arch: str) -> DictConfig:
    """The schema, built once per architecture: building a structured config from the dataclasses
    costs about ten times copying one, and a table composes it for every row, seed and stage."""
    return OmegaConf.structured(RunConfig(model=config_class(arch=arch)))


def resolved_config_text(cfg: DictConfig) -> str:
    """The YAML of a resolved config, marked `docmt_resolved: true` (what `save_config` writes and
    `docmt config` prints): `docmt fit` of this text trains the same run."""
    return (f"# Resolved run config (`docmt fit {CONFIG_FILENAME}` repeats the run).\n"
            f"# {RESOLVED_KEY}: presets and profiles are not re-applied to this file.\n"
            f"{RESOLVED_KEY}: true\n" + OmegaConf.to_yaml(cfg, resolve=True))


def save_config(cfg: DictConfig, run_dir: str | Path) -> Path:
    """Write `run_dir/config.yaml`: the resolved config, from which the run can be repeated alone."""
    path = Path(run_dir) / CONFIG_FILENAME
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(resolved_config_text(cfg), encoding="utf-8")
    os.replace(tmp, path)
    return path


def to_dataclass(cfg: DictConfig) -> RunConfig:
    """Typed objects: a `RunConfig` whose `model` is the architecture's config dataclass."""
    obj = OmegaConf.to_object(cfg)
    if not isinstance(obj, RunConfig):
        raise TypeError(f"expected a composed run config, got {type(obj).__name__}")
    return obj


def config_hash(node: Any) -> str:
    """Stable 16-hex-digit hash of a config subtree (DictConfig/ListConfig, dataclass or plain data).

    It is sha256 over canonical JSON (sorted keys, no spaces) of the resolved values, so it does not
    depend on key order, on the process, or on how the values were composed. Stage checkpoints are
    keyed by it (stage reuse, docs/design.md section 7).
    """
    if OmegaConf.is_config(node):
        node = OmegaConf.to_container(node, resolve=True)
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        node = dataclasses.asdict(node)
    blob = json.dumps(node, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def _pop_resolved_marker(file: YamlFile) -> bool:
    marker = file.data.pop(RESOLVED_KEY, False)
    if not isinstance(marker, bool):
        raise DocMTInputError(f"'{RESOLVED_KEY}' must be true or false", path=file.path,
                              line=file.line_of([RESOLVED_KEY]), key=RESOLVED_KEY)
    return marker


_UNSET = object()


def _last_set(layers: Sequence[Layer], dotted: str) -> tuple[Any, Layer] | None:
    """(value, layer) of the last layer that sets `dotted`, or None."""
    found = None
    for layer in layers:
        node: Any = layer.values
        for part in dotted.split("."):
            node = node[part] if isinstance(node, DictConfig) and part in node else _UNSET
        if node is not _UNSET:
            found = (node, layer)
    return found


def _error_at(layers: Sequence[Layer], dotted: str, message: str) -> DocMTInputError:
    """The error of key `dotted`, located at the last layer that sets it (its file and line, or its
    override), or at the key alone when no layer sets it."""
    found = _last_set(layers, dotted)
    return found[1].error(message, dotted) if found else DocMTInputError(message, key=dotted)


def _arch_of(layers: Sequence[Layer]) -> str:
    found = _last_set(layers, "model.arch")
    if found is None:
        return RunConfig().model.arch
    value, layer = found
    if not isinstance(value, str):
        raise layer.error(f"must be an architecture name, got {value!r}", "model.arch")
    return value


def _saved_profile(user_layers: Sequence[Layer], requested: str | None) -> str | None:
    """The profile recorded in a saved config; asking for another one is an error."""
    saved = _last_set(user_layers[:1], "profile")
    saved_name = saved[0] if saved else None
    override = _last_set(user_layers[1:], "profile")
    requested = requested or (override[0] if override else None)
    if requested is not None and requested != saved_name:
        raise DocMTInputError(f"a saved run config is already resolved; its profile ({saved_name}) "
                              f"cannot be changed to '{requested}' (compose from the experiment "
                              "file instead)", path=user_layers[0].source, key="profile")
    return saved_name


def _profile_file(name: Any, layer: Layer | None) -> YamlFile:
    available = sorted(p.stem for p in (CONFIG_DIR / "profiles").glob("*.yaml"))
    if not isinstance(name, str) or name not in available:
        close = difflib.get_close_matches(str(name), available, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        message = f"unknown profile '{name}'{hint}; available: {', '.join(available)}"
        if layer is not None:
            raise layer.error(message, "profile")
        raise DocMTInputError(message, key="profile")
    return YamlFile.load(CONFIG_DIR / "profiles" / f"{name}.yaml")


def _merge_error(err: OmegaConfBaseException, layer: Layer, arch: str) -> DocMTInputError:
    key = getattr(err, "full_key", None) or layer.key
    parent = getattr(err, "parent_node", None)
    leaf = getattr(err, "key", None)
    if isinstance(err, ConfigKeyError) and isinstance(parent, DictConfig) and leaf is not None:
        valid = [str(k) for k in parent.keys()]
        close = difflib.get_close_matches(str(leaf), valid, n=3)
        if close:
            hint = "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
        else:
            hint = "valid keys here: " + ", ".join(valid)
        if key and key.startswith("model."):
            hint += f" (model.* keys are those of model.arch '{arch}')"
        return layer.error(f"unknown key; {hint}", key)
    expected = _expected_type(err)
    if expected is not None and key:
        value = OmegaConf.select(layer.values, key, default=None, throw_on_missing=False)
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value)
        return layer.error(f"expected {expected}, got {value!r}", key)
    return layer.error(str(err).splitlines()[0], key)


def _expected_type(err: OmegaConfBaseException) -> str | None:
    """The declared type of the field an invalid value was given to, e.g. 'list[float]'."""
    owner, leaf = getattr(err, "object_type", None), getattr(err, "key", None)
    if not (dataclasses.is_dataclass(owner) and isinstance(leaf, str)):
        return None
    hint = typing.get_type_hints(owner).get(leaf)
    if hint is None:
        return None
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def _resolve(cfg: DictConfig) -> None:
    try:
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as err:
        raise DocMTInputError(f"cannot resolve interpolation: {str(err).splitlines()[0]}",
                              key=getattr(err, "full_key", None) or None) from None


def _apply_pretrained_encoder(cfg: DictConfig, layers: Sequence[Layer]) -> None:
    """Resolve `model.pretrained_encoder` (module docstring; readings F11-F12 of docs/papers/ma2020.md)."""
    name = cfg.model.pretrained_encoder if "pretrained_encoder" in cfg.model else None
    if name is None:
        return
    cfg.model.merge_with(_encoder_settings(layers, name, ENCODER_KEY))
    source = cfg.vocab.src_pretrained
    if source is not None and source != name:
        raise _error_at(layers, "vocab.src_pretrained", f"names '{source}', but model.pretrained_encoder is "
                        f"'{name}': the source vocabulary is the encoder's")
    cfg.vocab.src_pretrained = name
    for dotted in ("vocab.joint", "model.share_embeddings"):
        found = _last_set(layers, dotted)
        if found is not None and found[0] is True:
            raise found[1].error("must be false with model.pretrained_encoder: the source side is the "
                                 "checkpoint's WordPiece vocabulary, the target side has its own", dotted)
        OmegaConf.update(cfg, dotted, False)


def _encoder_settings(layers: Sequence[Layer], name: str, key: str) -> dict[str, Any]:
    """`encoder_settings` of checkpoint `name`, set at `key`; an error says where the name came from
    (the file and line, or the override, that set `key`)."""
    try:
        return encoder_settings(name, key)
    except DocMTInputError as err:
        setter = _last_set(layers, key)
        if setter is None or err.path is not None:
            raise
        raise setter[1].error(str(err).removeprefix(f"key '{err.key}': "), err.key) from None


def _apply_context_encoders(cfg: DictConfig, layers: Sequence[Layer]) -> None:
    """Resolve `model.context_encoders` (the frozen encoders of `model.arch=pas`, `models/pas.py`):
    each checkpoint's sizes and layout from its config.json (found offline, else one error naming the
    key), and each stack block's stream tokenised by its encoder's WordPiece: an empty
    `context.streams.<s>.tokenizer` becomes `hf:<checkpoint>`, another one is an error."""
    encoders = cfg.model.get("context_encoders")
    if not encoders:
        return
    for name, encoder in encoders.items():
        settings = _encoder_settings(layers, encoder.checkpoint, f"model.context_encoders.{name}.checkpoint")
        encoder.merge_with({"width": settings["d_model"], "heads": settings["heads"], "ffn_dim": settings["ffn_dim"],
                            "layers": settings["enc_layers"], "layout": settings["pretrained_layout"]})
    for index, block in enumerate(cfg.model.get("stack") or []):
        if block.stream not in cfg.context.streams:
            raise DocMTInputError(f"'{block.stream}' is not one of context.streams "
                                  f"({', '.join(cfg.context.streams) or 'none'})", key=f"model.stack.{index}.stream")
        if block.encoder not in encoders:
            continue  # the model names the missing encoder (`models/pas.stream_encoders`)
        wanted = f"hf:{encoders[block.encoder].checkpoint}"
        stream = cfg.context.streams[block.stream]
        if not stream.tokenizer:
            stream.tokenizer = wanted
        elif stream.tokenizer != wanted:
            raise DocMTInputError(f"is '{stream.tokenizer}', but the stream is read by encoder '{block.encoder}', "
                                  f"whose tokenizer is '{wanted}'", key=f"context.streams.{block.stream}.tokenizer")


def _validate(cfg: DictConfig) -> None:
    """Cross-key checks the structured schema cannot express."""
    stages = cfg.train.stages
    for name in cfg.train.schedule:
        if name not in stages:
            close = difflib.get_close_matches(str(name), list(stages), n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"defined: {', '.join(stages)}"
            raise DocMTInputError(f"stage '{name}' is not defined in train.stages; {hint}",
                                  key="train.schedule")
    _check_schedule(cfg.train.optim.schedule, "train.optim.schedule")
    _check_optimizer(cfg.train.optim.optimizer, "train.optim.optimizer")
    for name, stage in stages.items():
        for section, owner, config_class in (("data", "data", DataConfig),
                                             ("optim", "train.optim", OptimConfig)):
            known = [f.name for f in dataclasses.fields(config_class)]
            for key in stage[section]:
                if key not in known:
                    close = difflib.get_close_matches(str(key), known, n=3)
                    hint = f"; did you mean {' or '.join(close)}?" if close else ""
                    raise DocMTInputError(f"not a {owner}.* key{hint}",
                                          key=f"train.stages.{name}.{section}.{key}")
        if "schedule" in stage.optim:
            _check_schedule(stage.optim.schedule, f"train.stages.{name}.optim.schedule")
        if "optimizer" in stage.optim:
            _check_optimizer(stage.optim.optimizer, f"train.stages.{name}.optim.optimizer")
        if stage.lr is not None and "lr" in stage.optim:
            raise DocMTInputError(f"the stage's lr is set twice; keep train.stages.{name}.lr or "
                                  f"train.stages.{name}.optim.lr", key=f"train.stages.{name}.optim.lr")
        if stage.arch is not None and find_arch(stage.arch) is None:
            raise DocMTInputError(unknown_arch_message(stage.arch), key=f"train.stages.{name}.arch")


def _check_trainer_keys(cfg: DictConfig, layers: Sequence[Layer]) -> None:
    """Every `trainer.*` key is an argument of `lightning.pytorch.Trainer` (`trainer_arguments`), so
    that a misspelt one fails here, before anything trains, rather than when the Trainer is built."""
    known = sorted(trainer_arguments())
    for key in cfg.trainer:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean '{close[0]}'?" if close else "see lightning.pytorch.Trainer's arguments"
            raise _error_at(layers, f"trainer.{key}", f"not an argument of lightning.pytorch.Trainer; {hint}")


def _apply_step_cap(cfg: DictConfig) -> None:
    """Bound every step count of the run by `train.step_cap` (schema.TrainConfig), whichever layer set it."""
    cap = cfg.train.step_cap
    if cap is None:
        return
    if cap < 1:
        raise DocMTInputError(f"must be a positive number of steps or null, got {cap}", key="train.step_cap")
    if not 0 < cfg.train.max_steps <= cap:  # <= 0: no step limit, which is above any cap
        cfg.train.max_steps = cap
    for node, key in _step_counts(cfg):
        value = node.get(key)
        if isinstance(value, int) and value > cap:
            node[key] = cap


def _step_counts(cfg: DictConfig) -> Iterator[tuple[DictConfig, str]]:
    """(node, key) of every step count besides train.max_steps: the validation interval and warm-up of
    the run and of each stage, each stage's max_steps (<= 0: train.max_steps) and unfreezing milestones."""
    yield cfg.train, "val_every_steps"
    yield cfg.train.optim, "warmup_steps"
    for stage in cfg.train.stages.values():
        yield stage, "max_steps"
        yield stage, "val_every_steps"
        yield stage.optim, "warmup_steps"
        for milestone in stage.unfreeze:
            yield milestone, "at_step"


def _check_optimizer(name: Any, key: str) -> None:
    if name not in OPTIMIZERS:
        raise DocMTInputError(f"must be one of {', '.join(OPTIMIZERS)}, got {name!r}", key=key)


def _check_schedule(name: Any, key: str) -> None:
    if name not in SCHEDULES:
        close = difflib.get_close_matches(str(name), SCHEDULES, n=1)
        hint = f"did you mean {close[0]}?" if close else f"expected one of {', '.join(SCHEDULES)}"
        raise DocMTInputError(f"unknown lr schedule '{name}'; {hint}", key=key)
