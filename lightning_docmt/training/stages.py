"""What each stage of a run is, before anything trains (docs/design.md section 7): the config a
stage sees (`stage_config`), the key that names its weights (`stage_key`), its lr (`stage_lr`), and
the checks that refuse a stage the model or the schedule cannot train (`check_stages`).

Stage reuse: a stage is keyed by a hash of everything that determines its weights (data, vocabulary,
context, the stage's architecture and sizes, optimisation, seed, the stage's own settings, the code,
the precision and device it resolves to, and the key of the stage it starts from). Its final
checkpoint is stored under `<data.cache_dir>/stages/<key>/` (`training/run.py`); a later run
(another table row, another seed of the same stage 1) reuses it instead of training again.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from lightning_docmt.callbacks.checkpoint_averaging import check_average_config
from lightning_docmt.callbacks.staged_unfreezing import StagedUnfreezing, matches
from lightning_docmt.config import composition as config_lib
from lightning_docmt.config.pretrained_files import pretrained_dir, weights_digest
from lightning_docmt.config.registry import get_arch, model_config
from lightning_docmt.config.schema import ContextConfig, inert_keys
from lightning_docmt.data.splits import mixed_corpus
from lightning_docmt.distributed import progress
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.provenance import code_fingerprint, resolved_device
from lightning_docmt.schedules import CONTINUATION_FLOOR, NEEDS_TOTAL, continuation_summary
from lightning_docmt.training.optimizer_phases import check_training_hooks
from lightning_docmt.training.trainer import resolve_precision, stage_steps
from lightning_docmt.training.update_size import update_size

STAGE_FORMAT_VERSION = 1  # bump when a stage's checkpoint changes meaning for the same key


def stage_config(cfg: DictConfig, name: str) -> DictConfig:
    """The run config as seen by one stage: the stage's `data`, `optim` and `model` overrides,
    its `val_every_steps` and `arch` applied (`data` and `model` deep-merged, e.g.
    `{rl: {selection_cost: 0.02}}` keeps the other `rl` keys, `{mix: {share: 0.5}}` the corpus).

    A stage with another architecture (stage 1 of Zhang's two-step is a `transformer`) keeps the
    run's shared sizes and drops the options its own config class does not have. A model that
    reads no context (`Seq2SeqModel.reads_context_with` its settings: a `transformer`, an RNN with
    `context: none`) gets the default (empty) context, so that its stage key, and hence its
    checkpoint, is shared by every row that trains the same sentence-level model. Of the named
    streams (`context.streams`) it keeps those the stage's model reads (`streams_read`): a stream
    read by no block would lengthen every batch's rows, hence shrink its token budget, and change
    the stage's key, so that a Transformer stage or a stack of fewer blocks would not be shared
    between rows that configure more streams.
    """
    stage = cfg.train.stages[name]
    arch = stage.arch or cfg.model.arch
    entry = get_arch(arch)
    fields = {f.name for f in dataclasses.fields(entry.config_class)}
    if stage.val_every_steps is not None and stage.val_every_steps < 1:
        raise DocMTInputError(f"must be a positive number of updates, got {stage.val_every_steps}",
                              key=f"train.stages.{name}.val_every_steps")
    unknown = sorted(set(stage.model) - fields)
    if unknown:
        raise DocMTInputError(f"model.arch '{arch}' has no option '{unknown[0]}'",
                              key=f"train.stages.{name}.model.{unknown[0]}")
    # The run's config, already validated against its schema, with the stage's overrides merged into
    # the sections they change: a merge of the whole config into a fresh schema costs several times
    # more (tests/training/test_stage_config.py checks both give the same config).
    scfg = copy.deepcopy(cfg)
    OmegaConf.resolve(scfg)  # interpolations read the run's values, not the stage's
    scfg.data.merge_with(stage.data)
    scfg.train.optim.merge_with(stage.optim)
    if stage.val_every_steps is not None:
        scfg.train.val_every_steps = stage.val_every_steps
    if arch != cfg.model.arch:  # another config class: the run's shared options it has
        model = config_lib.schema_defaults(arch).model
        model.merge_with({k: v for k, v in OmegaConf.to_container(scfg.model).items() if k in fields})
        scfg.model = model
    scfg.model.merge_with(stage.model)
    scfg.model.arch = arch
    model_settings = OmegaConf.to_container(scfg.model)
    if not entry.model_class.reads_context_with(model_settings):
        scfg.context = OmegaConf.structured(ContextConfig())
    read = entry.model_class.streams_read(model_settings)
    for stream in [n for n in scfg.context.streams if n not in read]:
        del scfg.context.streams[stream]
    return scfg


def stage_lr(scfg: DictConfig, name: str) -> float:
    """The stage's lr in the units of `train.optim.lr` (`train.stages.<name>.lr` overrides it): the
    peak of a warm-up schedule, the multiplier of the inverse square root."""
    own = scfg.train.stages[name].lr
    return float(own if own is not None else scfg.train.optim.lr)


def check_pretrained_lr_scale(scfg: DictConfig, name: str, phases: list) -> None:
    """`model.pretrained_lr_scale` (reading F15) other than 1 needs a pretrained encoder, a positive
    value, and one optimizer whose groups stay fixed: no unfreezing milestones, no optimizer phases."""
    scale = float(scfg.model.get("pretrained_lr_scale", 1.0))
    if scale == 1.0:
        return
    key = "model.pretrained_lr_scale"
    if scale <= 0:
        raise DocMTInputError(f"must be positive, got {scale}", key=key)
    if scfg.model.get("pretrained_encoder") is None:
        raise DocMTInputError(f"has no effect without model.pretrained_encoder (stage '{name}')", key=key)
    if scfg.train.stages[name].unfreeze:
        raise DocMTInputError(f"unfreezing milestones do not combine with {key}",
                              key=f"train.stages.{name}.unfreeze")
    if phases:
        raise DocMTInputError(f"the optimizer phases of model.arch '{scfg.model.arch}' do not combine "
                              "with a learning rate of the pretrained tensors' own", key=key)


def stage_key(scfg: DictConfig, name: str, parent_key: str) -> str:
    """Hash of everything that determines a stage's weights: the config, the code (`provenance`:
    a fix to the code never reuses a stage trained before it), the contents of a pretrained
    encoder's weights (a retrained checkpoint of the same size is another stage) and the precision
    and device the stage resolves to here (`auto` means bf16 on one machine and float32 on another). Left out:
    worker counts, paths, the keys inert in this config (`schema.inert_keys`), and what is scored
    after testing (the contrastive suites, where they are, the context-usage passes, the split the
    report reads)."""
    plain = OmegaConf.to_container(scfg, resolve=True)
    for key in inert_keys(plain):
        section, option = key.split(".", 1)
        del plain[section][option]
    data = {k: v for k, v in plain["data"].items() if k not in ("num_workers", "cache_dir", "report_split")}
    if data["train_fraction"] == 1.0:  # the whole split: how a fraction would be drawn is moot
        data = {k: v for k, v in data.items() if k not in ("train_fraction_draw", "train_fraction_seed")}
    evaluation = {k: v for k, v in plain["eval"].items()
                  if k not in ("contrastive", "suites_dir", "context_usage", "random_context_decodes",
                               "branch_usage")}  # after testing
    limits = {k: plain["train"][k] for k in ("max_steps", "max_epochs", "max_time_minutes", "accumulate",
                                               "tokens_per_update", "val_every_steps", "precision",
                                               "average", "nonfinite_stop_after")}
    payload = {"version": STAGE_FORMAT_VERSION, "data": data, "vocab": plain["vocab"],
               "context": plain["context"], "model": plain["model"], "eval": evaluation,
               "optim": plain["train"]["optim"], "seed": plain["train"]["seed"],
               "stage": plain["train"]["stages"][name], "limits": limits,
               "trainer": plain["trainer"], "parent": parent_key, "code": code_fingerprint(),
               "resolved": resolved_settings(scfg), "pretrained_weights": pretrained_weights(scfg)}
    return config_lib.config_hash(payload)


def pretrained_weights(scfg: DictConfig) -> str | dict[str, str]:
    """`weights_digest` of the stage's pretrained encoder (`model.pretrained_encoder`), "" without one;
    with frozen context encoders (`model.context_encoders`, `models/pas.py`) a mapping that adds the
    digest of each one the stack reads and loads from a checkpoint."""
    name = scfg.model.get("pretrained_encoder")
    own = weights_digest(pretrained_dir(name)) if name else ""
    encoders = scfg.model.get("context_encoders") or {}
    if not encoders:
        return own
    read = {block["encoder"] for block in scfg.model.get("stack") or []}  # an encoder no block reads is not loaded
    loaded = {f"context_encoders.{n}": pretrained_dir(e.checkpoint, f"model.context_encoders.{n}.checkpoint")
              for n, e in encoders.items() if n in read and not e.random_weights}
    return {"encoder": own, **{n: weights_digest(directory) for n, directory in loaded.items()}}


def resolved_settings(cfg: DictConfig) -> dict[str, str]:
    """The precision and device a run of `cfg` gets on this machine."""
    accelerator = str(cfg.trainer.get("accelerator", "auto"))
    return {"precision": resolve_precision(cfg.train.precision, accelerator),
            "device": resolved_device(accelerator)}


def check_stages(cfg: DictConfig) -> None:
    """Fail on a bad freezing policy (a trainable or milestone glob that matches nothing, a
    milestone without lr), averaging setting, `data.mix` (`splits.mixed_corpus`), or a setting the
    model's training hooks cannot work with (`optimizer_phases.check_training_hooks`) before any
    stage trains or anything is written.

    The names come from each model class's `parameter_names` (by default the model built on the
    meta device with placeholder vocabulary sizes; a model wrapping a pretrained encoder answers
    without loading it).
    """
    check_average_config(cfg.train.average.checkpoints, cfg.train.average.rule)
    # name: (its config, its parameter names, the schedule's step at its end)
    stages: dict[str, tuple[DictConfig, list[str], int | None]] = {}
    for name in cfg.train.schedule:
        scfg = stage_config(cfg, name)
        if scfg.data.max_documents < 1:
            raise DocMTInputError(f"data.max_documents must be at least 1, got "
                                  f"{scfg.data.max_documents}", key="data.max_documents")
        mixed_corpus(scfg.data)  # a bad data.mix fails here, before the run directory exists
        policy = StagedUnfreezing.from_stage(name, scfg.train.stages[name])
        model_class, typed = get_arch(scfg.model.arch).model_class, model_config(scfg.model)
        names = model_class.parameter_names(typed)
        policy.check(names)
        phases = model_class.optimizer_phases(typed)
        check_training_hooks(model_class, phases, scfg, name, names)
        check_pretrained_lr_scale(scfg, name, phases)
        update_size(scfg, world_size=1)  # conflicting settings; the world size is checked at build
        init_from = scfg.train.stages[name].init_from
        # here, before the run directory exists, not when the stage would start (issue 37: nothing
        # half-written on bad input; a table records the row as failed and runs the others)
        if init_from is not None and init_from not in stages and not Path(init_from).is_file():
            raise DocMTInputError(f"init_from '{init_from}' is neither an earlier stage nor a checkpoint file",
                                  key=f"train.stages.{name}.init_from")
        parent = stages.get(init_from)
        check_continuation(scfg, name, names, parent)
        stages[name] = (scfg, names, schedule_end(scfg, name, parent))


def schedule_end(scfg: DictConfig, name: str, parent: tuple[DictConfig, list[str], int | None] | None) -> int | None:
    """The lr schedule's step at the end of stage `name`: its `max_steps`, after its parent's end if it
    continues the parent's schedule; None when a length is bounded by epochs or time (not known yet)."""
    steps = stage_steps(scfg, name)
    offset = parent[2] if parent is not None and scfg.train.stages[name].continue_schedule else 0
    return None if steps <= 0 or offset is None else offset + steps


def check_continuation(scfg: DictConfig, name: str, names: list[str],
                       parent: tuple[DictConfig, list[str], int | None] | None) -> None:
    """A stage with `continue_schedule` trains at what is left of its parent's schedule (trap K9):
    refused when it trains parameters its parent stage lacks and the schedule decays to 0 from
    below `schedules.CONTINUATION_FLOOR` of its peak at the stage's first update; otherwise the
    first and last lr and the summed lr are printed. The parent's schedule step is taken as where
    its `max_steps` end it (the stage hands on its best checkpoint, which is at most that far); in
    a chain of continuing stages that includes the steps its own parent ended at."""
    stage = scfg.train.stages[name]
    if not stage.continue_schedule or parent is None:
        return
    parent_cfg, parent_names, offset = parent
    parent_name = stage.init_from
    optim = scfg.train.optim
    lr = stage_lr(scfg, name)
    mine = (optim.schedule, optim.warmup_steps, lr)
    theirs = (parent_cfg.train.optim.schedule, parent_cfg.train.optim.warmup_steps, stage_lr(parent_cfg, parent_name))
    if mine != theirs:
        raise DocMTInputError(
            f"continues the schedule of stage '{parent_name}' (schedule, warm-up, peak lr {theirs}) with another one "
            f"{mine}: a continuation is the same schedule further on; give the stage a schedule of its own "
            f"(continue_schedule: false) or the parent's settings", key=f"train.stages.{name}.continue_schedule")
    steps = stage_steps(scfg, name)
    if steps <= 0 or not offset:
        return  # bounded by epochs or time: the length is not known before training
    lrs = continuation_summary(schedule=optim.schedule, lr=lr, warmup=optim.warmup_steps,
                               d_model=scfg.model.d_model, step_offset=offset, stage_steps=steps)
    new = [n for n in set(names) - set(parent_names) if matches(n, stage.trainable)]
    numbers = (f"continuing the '{optim.schedule}' schedule of stage '{parent_name}' from its step {offset}, "
               f"its {steps} updates train at lr {lrs['first']:.3g} -> {lrs['last']:.3g} "
               f"({lrs['first'] / lrs['peak']:.2f} of the peak {lrs['peak']:.3g}), summed lr {lrs['sum']:.3g}")
    if new and optim.schedule in NEEDS_TOTAL and lrs["first"] < CONTINUATION_FLOOR * lrs["peak"]:
        raise DocMTInputError(
            f"{numbers}: a stage that trains {len(new)} new parameter tensors may not start a decaying schedule "
            f"below {CONTINUATION_FLOOR} of its peak; give the stage a schedule of its own (continue_schedule: "
            f"false, optim.warmup_steps below max_steps; trap K9)",
            key=f"train.stages.{name}.continue_schedule")
    progress(f"stage '{name}': {numbers}")
