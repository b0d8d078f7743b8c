"""Run orchestration: every stage of one run is one `trainer.fit` (docs/design.md section 7).

`fit_run(cfg)` creates the run directory (with the resolved `config.yaml`), runs the stages listed in
`train.schedule`, then tests the final model and writes `metrics.json`: the test loop's metrics, the
final stage's training throughput and the test decoding speed (`speed.py`), the sentence pairs
the final stage trained on (`data/train_pairs`: a data-size curve's x), with `data.mix.corpus` the
in-domain share of its training batches' target tokens (`data/mix_share`; the stage's `done.json`
records its `mix`: the share asked for, that realised, the pairs of each corpus), and the accuracies on
the contrastive suites of `eval.contrastive` (`evaluation/contrastive_scoring.py`; read before any
training, so that a bad entry fails first).

Each stage's config, key and checks come from `stages.py`. A finished stage's final checkpoint is
stored under `<data.cache_dir>/stages/<key>/`; a later run (another table row, another seed of the
same stage 1) reuses it instead of training again. Runs started at once that share a stage (rows of
a table fanned out over processes) train it once: the first takes the lock
`<data.cache_dir>/stages/<key>.lock`, the others wait for it and reuse what it publishes
(`claims.py`, `locks.py`).

A run is one wandb run (`dashboard.py`): the curves of its stages under their names, then its
stages' records and its scores as the run's summary.

DDP: Lightning's `ddp` strategy re-runs the command for local ranks 1..N-1, so every rank goes
through `fit_run`: all of them train and test, in the run directory rank zero chose, and only
global rank zero writes the run's records (`config.yaml`, `run.json`, `metrics.json`) and takes a
stage's lock; the other ranks train or reuse the stage as rank zero decides.
"""

from __future__ import annotations

import csv
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from omegaconf import DictConfig, OmegaConf

from lightning_docmt.atomic_files import write_text_atomically
from lightning_docmt.callbacks.checkpoint_averaging import CheckpointAveraging
from lightning_docmt.callbacks.lr_record import LearningRateRecord
from lightning_docmt.callbacks.nonfinite_guard import NonFiniteGuard
from lightning_docmt.callbacks.staged_unfreezing import matches
from lightning_docmt.checkpoints import (
    VOCAB_KEY,
    check_state,
    load_state,
    pack_vocabularies,
    read_checkpoint,
    save_atomically,
)
from lightning_docmt.claims import PUBLISHED, claimed
from lightning_docmt.config import composition as config_lib
from lightning_docmt.config.registry import build_model, get_arch
from lightning_docmt.data.datamodule import DocumentWindowDataModule
from lightning_docmt.data.languages import bleu_tokenizer
from lightning_docmt.data.prepare import TESTED_SPLIT
from lightning_docmt.data.vocab import Vocabulary
from lightning_docmt.distributed import barrier, is_global_zero, progress
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.evaluation.branch_usage import branch_usage_line, branch_usage_metrics
from lightning_docmt.evaluation.context_usage import context_usage_metrics
from lightning_docmt.evaluation.contrastive_scoring import configured_suites, suite_metrics
from lightning_docmt.inference.device import trainer_settings
from lightning_docmt.inference.loaded_model import MODEL_ATTRIBUTE, LoadedModel, load_checkpoint
from lightning_docmt.inference.reference_context import check_no_reference_target, reads_reference_target
from lightning_docmt.logs import is_verbose
from lightning_docmt.nn.parallel_stack import drop_branches
from lightning_docmt.provenance import environment_record, resolved_device
from lightning_docmt.training.dashboard import record_scores, run_dashboard, stage_keys
from lightning_docmt.training.launch import agree_on_run_dir
from lightning_docmt.training.module import DocMTModule
from lightning_docmt.training.speed import TRAIN_SPEED_KEY, rate, train_speed_metrics
from lightning_docmt.training.stage_start import first_damage, initial_damage
from lightning_docmt.training.stage_summary import context_usage_line, decoded_split_line, stage_summary
from lightning_docmt.training.stages import (
    check_stages,
    pretrained_weights,
    resolved_settings,
    stage_config,
    stage_key,
)
from lightning_docmt.training.trainer import RESUME_NAME, build_trainer, monitor_metric
from lightning_docmt.training.update_size import update_size
from lightning_docmt.wandb_runs import GuardedRun

STAGE_MARKER = "stage.json"  # {"key": stage key, start NLLs} in a stage's run directory: what may resume there
TRAIN_PAIRS = "data/train_pairs"  # metrics.json: the sentence pairs of the last stage's training split
MIX_SHARE = "data/mix_share"  # metrics.json: the in-domain share of the last stage's training target tokens (data.mix)
RUN_DIR_VARIABLE = "DOCMT_RUN_DIR"  # rank zero's run directory, inherited by the ranks it launches


@dataclass
class StageResult:
    name: str
    key: str
    checkpoint: Path
    global_step: int  # the optimizer updates of this stage behind `checkpoint`
    schedule_step: int  # where the lr schedule stands at `checkpoint`: global_step plus the step it continued from
    reused: bool


def pretrained_lr_group(module: DocMTModule, names: list[str], scfg: DictConfig, name: str) -> None:
    """NOT IN PAPER, reading F15 (docs/papers/ma2020.md): with `model.pretrained_lr_scale` != 1,
    the trainable parameters that the pretrained encoder filled (`names`) become an optimizer group
    of their own (`DocMTModule.own_lr_group`) at the stage's lr times the scale, on the stage's
    schedule; the rest keeps the stage's lr. The setting was checked by `check_stages`."""
    scale = float(scfg.model.get("pretrained_lr_scale", 1.0))
    if scale == 1.0:
        return
    params = dict(module.model.named_parameters())
    trainable = [params[n] for n in names if n in params and matches(n, scfg.train.stages[name].trainable)]
    if trainable:
        module.own_lr_group = (trainable, module.stage_lr * scale)


def build_module(scfg: DictConfig, datamodule: DocumentWindowDataModule, step_offset: int = 0,
                 lr_override: float | None = None) -> DocMTModule:
    return DocMTModule(OmegaConf.to_container(scfg, resolve=True),
                       len(datamodule.src_vocab), len(datamodule.tgt_vocab),
                       step_offset=step_offset, lr_override=lr_override)


def load_weights(module: DocMTModule, checkpoint: Path, *, init_from: str | None = None,
                 vocabularies: tuple[Vocabulary, Vocabulary] | None = None) -> list[str]:
    """Load a checkpoint's weights strictly (`checkpoints.load_state`); returns the missing keys.

    `init_from`: the key of a stage initialised from `checkpoint`, whose new parameters may be
    missing from it (nothing may be unexpected or of another shape). Otherwise every key must match.
    `vocabularies`: the (source, target) vocabularies the run built from its data; a checkpoint
    that carries others is refused (its embeddings would read other tokens at the same ids, e.g. a
    shipped model under a vocabulary built by another tokenizer version).
    """
    state = _checked_weights(checkpoint, init_from, vocabularies)
    return load_state(module, state, checkpoint, allow_missing=init_from is not None, key=init_from)


def _checked_weights(checkpoint: Path, init_from: str | None, vocabularies: tuple[Vocabulary, Vocabulary] | None,
                     mmap: bool = False) -> dict[str, torch.Tensor]:
    """The state dict of `checkpoint` once its vocabularies are checked (`load_weights`)."""
    state = read_checkpoint(checkpoint, mmap=mmap)
    if vocabularies is not None and VOCAB_KEY in state and state[VOCAB_KEY] != pack_vocabularies(*vocabularies):
        raise DocMTInputError("its vocabularies are not the ones this run built from its data", path=checkpoint,
                              key=init_from)
    return state["state_dict"]


def check_run_inputs(cfg: DictConfig, needed: tuple[str, ...] = ()) -> None:
    """What a run reads besides its config, checked before its run directory exists, so that bad input
    is one error line that leaves nothing behind and trains no stage in vain (issue 37): the data of
    every stage is prepared (a missing or malformed corpus fails here, not as a stage starts; `needed`:
    splits that must hold documents, `build_caches`), and every `init_from` checkpoint file is checked
    against the stage's model built on the meta device, as the stage will load it (a file that is no
    Lightning checkpoint, or one of another architecture, size or vocabulary, fails here rather than
    after the stages before it have trained), as is every pretrained encoder a stage reads
    (`stages.pretrained_weights`: one that is not pretrained yet names the command that makes it)."""
    schedule = list(cfg.train.schedule)
    for index, name in enumerate(schedule):
        scfg = stage_config(cfg, name)
        pretrained_weights(scfg)
        datamodule = DocumentWindowDataModule(scfg.data, scfg.vocab, scfg.context)
        datamodule.prepare_data(needed=needed if index == len(schedule) - 1 else ())
        init_from = scfg.train.stages[name].init_from
        if init_from is None or init_from in schedule[:index]:  # else a file (`check_stages`)
            continue
        vocabularies = (datamodule.src_vocab, datamodule.tgt_vocab)
        with torch.device("meta"):
            model = build_model(scfg.model, len(vocabularies[0]), len(vocabularies[1]))
        key = f"train.stages.{name}.init_from"
        state = _checked_weights(Path(init_from), key, vocabularies, mmap=True)
        own = torch.nn.ModuleDict({MODEL_ATTRIBUTE: model}).state_dict()
        check_state(own, state, init_from, allow_missing=True, key=key)


def resumable_checkpoint(stage_dir: Path, key: str) -> Path | None:
    """The newest checkpoint an interrupted stage left in `stage_dir` (the periodic `resume.ckpt` or
    the validation `last.ckpt`, whichever is further on, and at the same step the one written last:
    a validation at that step comes after the periodic save), if that stage had key `key`; else None."""
    marker = stage_dir / STAGE_MARKER
    if not marker.is_file() or json.loads(marker.read_text()).get("key") != key:
        return None  # nothing there, or a stage of another config or code version
    found = [p for p in (stage_dir / "checkpoints" / f"{RESUME_NAME}.ckpt", stage_dir / "checkpoints" / "last.ckpt")
             if p.is_file()]
    return max(found, key=lambda p: (int(read_checkpoint(p).get("global_step", 0)), p.stat().st_mtime_ns),
               default=None)


def run_stage(cfg: DictConfig, name: str, run_dir: Path, previous: dict[str, StageResult],
              resume: bool = False, dashboard: GuardedRun | None = None) -> StageResult:
    """Train one stage into `<run_dir>/<name>/`, or reuse it from the stage cache: there, or once
    another process that was training it has published it (`claims.claimed`: one process trains a
    stage at a time, the others wait for it).

    `resume`: continue from the newest checkpoint an interrupted run of this very stage (same key)
    left in its directory, with the sampler position, optimizer, schedule, frozen set and averaging
    window it had; Lightning restores them from the checkpoint. `dashboard`: the run's wandb run,
    which the stage's Trainer logs to (`dashboard.py`).
    """
    scfg = stage_config(cfg, name)
    stage = scfg.train.stages[name]
    init = previous.get(stage.init_from) if stage.init_from in previous else None  # else a file (check_stages)
    parent_key = init.key if init else (stage.init_from or "")
    key = stage_key(scfg, name, parent_key)
    store = Path(scfg.data.cache_dir) / "stages" / key
    done = store / "done.json"
    # one process trains a stage that several want at once; the others wait for it (claims.py)
    with claimed(store.with_name(f"{key}.lock"), done.is_file, f"stage '{name}'") as claim:
        if claim == PUBLISHED:
            info = json.loads(done.read_text())
            progress(f"stage '{name}': reusing {store} (trained before with the same config)")
            return StageResult(name, key, store / "final.ckpt", info["global_step"], info["schedule_step"],
                               reused=True)
        return train_stage(scfg, name, key, store, run_dir / name, init, resume, dashboard)


def train_stage(scfg: DictConfig, name: str, key: str, store: Path, stage_dir: Path,
                init: StageResult | None, resume: bool, dashboard: GuardedRun | None = None) -> StageResult:
    """Train stage `name` of config `scfg` into `stage_dir` (starting from `init`, an earlier stage
    of the run, or from the checkpoint its `init_from` names), then publish it to the stage cache
    `store`: `final.ckpt`, then `done.json` (the mark of a published stage), both written atomically."""
    stage = scfg.train.stages[name]
    done = store / "done.json"
    start: dict[str, float] = {}
    pl.seed_everything(scfg.train.seed, workers=True, verbose=is_verbose())
    datamodule = DocumentWindowDataModule(scfg.data, scfg.vocab, scfg.context, seed=scfg.train.seed)
    datamodule.prepare_data()
    datamodule.setup("fit")
    init_ckpt = init.checkpoint if init else (Path(stage.init_from) if stage.init_from else None)
    # a chain of continuing stages continues one schedule: each starts where its parent's checkpoint stands on it
    step_offset = init.schedule_step if (init and stage.continue_schedule) else 0
    module = build_module(scfg, datamodule, step_offset=step_offset, lr_override=stage.lr)
    # Pretrained checkpoints first (nn/pretrained.py), so that an init_from checkpoint's tensors win
    # and the parameters it lacks (e.g. Zhang's theta_d in step 2) keep the pretrained start.
    pretrained = module.model.load_pretrained(datamodule.src_vocab)
    if pretrained:
        progress(f"stage '{name}': {len(pretrained)} tensors from the pretrained encoder "
                 f"'{scfg.model.get('pretrained_encoder')}'")
        pretrained_lr_group(module, pretrained, scfg, name)
    checkpoint = resumable_checkpoint(stage_dir, key) if resume else None
    if init_ckpt is not None:
        missing = load_weights(module, init_ckpt, init_from=f"train.stages.{name}.init_from",
                               vocabularies=(datamodule.src_vocab, datamodule.tgt_vocab))
        progress(f"stage '{name}': initialised from {init_ckpt} ({len(missing)} new tensors)")
        if checkpoint is not None:  # measured when the interrupted run began: the same numbers
            start = {k: v for k, v in json.loads((stage_dir / STAGE_MARKER).read_text()).items() if k != "key"}
        elif missing and is_global_zero():  # the new tensors' disturbance, before any update
            start = initial_damage(module, scfg, datamodule, init_ckpt, resolved_settings(scfg)["precision"])
            if start:
                progress(f"stage '{name}': valid NLL {start['parent_nll']:.4f} before the new tensors, "
                         f"{start['initial_nll']:.4f} with them")

    if checkpoint is not None:
        progress(f"stage '{name}': resuming from {checkpoint}")
    trainer, checkpointer = build_trainer(scfg, name, stage_dir, dashboard=dashboard)  # freezing: StagedUnfreezing
    if trainer.is_global_zero:
        stage_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomically(stage_dir / STAGE_MARKER, json.dumps({"key": key, **start}) + "\n")
    started = time.time()
    trainer.fit(module, datamodule=datamodule, ckpt_path=checkpoint, weights_only=True)
    best, best_score = checkpointer.best_model_path or checkpointer.last_model_path, checkpointer.best_model_score
    averaging = next((c for c in trainer.callbacks if isinstance(c, CheckpointAveraging)), None)
    lr_record = next(c for c in trainer.callbacks if isinstance(c, LearningRateRecord))
    guard = next(c for c in trainer.callbacks if isinstance(c, NonFiniteGuard))
    if averaging is not None and averaging.snapshots:  # the averaged model is the stage's
        result = averaging.average_and_validate(trainer, module)
        best, best_score = averaging.checkpoint_path, result["validation"].get(monitor_metric(scfg)[0])
    if trainer.is_global_zero:
        size = update_size(scfg, trainer.world_size)
        store.mkdir(parents=True, exist_ok=True)
        final = read_checkpoint(best)
        save_atomically(final, store / "final.ckpt")
        # The stage's step is that of the checkpoint it hands on (the best one, not the last), so
        # that a next stage with `continue_schedule` continues the schedule where its weights were.
        info = {"global_step": final["global_step"], "schedule_step": step_offset + final["global_step"],
                "trained_steps": trainer.global_step,
                "best": str(best), "stage": name, "seconds": round(time.time() - started, 1),
                "best_score": _scalar(best_score),
                "validation": validation_curve(stage_dir, monitor_metric(scfg)[0]),
                "update": size.record(), "lr": lr_record.records, "nonfinite_skipped": guard.skipped,
                **datamodule.training_pairs(), **start}
        write_text_atomically(done, json.dumps(info, indent=1) + "\n")  # the mark of a published stage
        speed = final.get(TRAIN_SPEED_KEY)
        progress(stage_summary(info, monitor_metric(scfg)[0],
                               rate(speed["target_tokens"], speed["seconds"]) if speed else None))
    if averaging is not None:  # published: no resume reads this stage's checkpoints any more
        averaging.delete_pruned(trainer)
    trainer.strategy.barrier()
    info = json.loads(done.read_text())  # every rank: what rank zero recorded
    return StageResult(name, key, store / "final.ckpt", info["global_step"], info["schedule_step"], reused=False)


def stage_record(result: StageResult) -> dict:
    """The stage's `done.json`, beside its checkpoint in the stage cache."""
    return json.loads((result.checkpoint.parent / "done.json").read_text())


def stage_records(results: dict[str, StageResult], schedule: list[str]) -> list[dict]:
    """The `done.json` of every stage, in schedule order."""
    return [stage_record(results[name]) for name in schedule]


def validation_curve(stage_dir: Path, metric: str) -> list[list[float]]:
    """`[[updates, value], ...]`: every validation score `metric` of a stage and the number of
    updates done when it was taken, from the stage's CSV log (Lightning logs a validation at the
    0-based index of the last update, hence the + 1). Kept in the stage's `done.json`, so that a
    reused stage still has its curve."""
    path = stage_dir / "metrics.csv"
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [[int(row["step"]) + 1, float(row[metric])] for row in csv.DictReader(f) if row.get(metric)]


def _scalar(x: Any) -> float | None:
    return None if x is None else float(x)


def make_run_dir(cfg: DictConfig) -> Path:
    """`<runs_dir>/<group>/<name>-seed<S>-<time>` (suffixed when taken), one for all local ranks.

    The ranks that Lightning's `ddp` strategy starts later, with rank zero's environment, take the
    directory rank zero recorded in `RUN_DIR_VARIABLE` instead of stamping one of their own.
    """
    inherited = os.environ.get(RUN_DIR_VARIABLE)
    if inherited and not is_global_zero():
        return Path(inherited)
    base = Path(cfg.logging.runs_dir)
    group = cfg.logging.group or "runs"
    name = cfg.logging.name or cfg.model.arch
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = base / group / f"{name}-seed{cfg.train.seed}-{stamp}"
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = base / group / f"{name}-seed{cfg.train.seed}-{stamp}-{suffix}"
    os.environ[RUN_DIR_VARIABLE] = str(run_dir)
    return run_dir


def fit_run(cfg: DictConfig, run_dir: Path | None = None, resume: bool = False) -> Path:
    """Check the stages, train every stage of `train.schedule`, then test the final model.
    Returns the run dir. `resume`: continue the interrupted stage of an earlier fit into `run_dir`
    (`run_stage`); finished stages come from the stage cache."""
    return fit_and_test(cfg, run_dir, resume)[0]


def run_metrics(cfg: DictConfig, run_dir: Path) -> dict[str, float]:
    """The table runner's `run_row`: train and test one row into `run_dir` (continuing what an
    interrupted run of the same row left there), return its metrics."""
    return fit_and_test(cfg, run_dir, resume=True)[1]


def train_stages(cfg: DictConfig, run_dir: Path, resume: bool, dashboard: GuardedRun) -> dict[str, StageResult]:
    """Save the run's config (global rank zero) and train every stage of `train.schedule` in order,
    each stage's summary going to the run's wandb run as it ends (`dashboard.stage_keys`)."""
    if is_global_zero():
        config_lib.save_config(cfg, run_dir)
    results: dict[str, StageResult] = {}
    for name in cfg.train.schedule:
        result = results[name] = run_stage(cfg, name, run_dir, results, resume=resume, dashboard=dashboard)
        dashboard.summarize(stage_keys(name, key=result.key, reused=result.reused, done=stage_record(result)))
    return results


def run_validation_metrics(cfg: DictConfig, run_dir: Path) -> dict[str, float]:
    """The table runner's `run_row` for a selection table (`evaluate: valid`): train every stage
    into `run_dir` and return the final stage's validation scores, never touching the test split:
    `val/bleu` (or `val/loss`: the monitored metric) of the checkpoint the stage hands on, and
    `<metric>@<step>` for every validation of the stage (neither when it never validated); with
    `eval.contrastive: [corpus]`, that checkpoint's accuracies on the valid split's suite as
    `val/contrastive/...` (`evaluation/contrastive_scoring.py`); with `eval.context_usage`, its CXMI and
    random-context CXMI on valid (`val/cxmi`, `val/random_ctx/cxmi`; `evaluation/context_usage.py`)."""
    check_stages(cfg)
    suites = configured_suites(cfg, "valid")  # before training: a test suite here is an error
    check_run_inputs(cfg)
    run_dir = agree_on_run_dir(cfg, run_dir, make_run_dir)
    with run_dashboard(cfg, run_dir, resolved_settings(cfg)["precision"]) as dashboard:
        results = train_stages(cfg, run_dir, resume=True, dashboard=dashboard)
        scores = validation_scores(cfg, results, suites)
        dashboard.summarize(scores)
    return scores


def validation_scores(cfg: DictConfig, results: dict[str, StageResult],
                      suites: dict[str, list[dict]]) -> dict[str, float]:
    """`run_validation_metrics`' scores of the trained stages `results`."""
    final = results[cfg.train.schedule[-1]]
    info = stage_record(final)
    metric = monitor_metric(stage_config(cfg, final.name))[0]
    scores: dict[str, float] = {}
    if info["best_score"] is not None:  # None: the stage never validated and hands on its last step
        scores[metric] = info["best_score"]
    scores.update({f"{metric}@{step}": value for step, value in info.get("validation", [])})
    scores.update({f"val/{k}": v for k, v in first_damage(stage_records(results, cfg.train.schedule)).items()})
    # teacher-forced only, so not for a model whose context is its own earlier translations
    usage = (cfg.eval.context_usage and not get_arch(cfg.model.arch).model_class.carries_state
             and not reads_reference_target(cfg))
    if (suites or usage) and is_global_zero():
        on_gpu = resolved_device(cfg.trainer.accelerator) != "cpu"
        model = load_checkpoint(final.checkpoint, "cuda" if on_gpu else "cpu")
        scores.update({f"val/{k}": v for k, v in suite_metrics(model, suites).items()})
        if usage:
            datamodule = DocumentWindowDataModule(model.cfg.data, model.cfg.vocab, model.cfg.context)
            datamodule.prepare_data()
            datamodule.setup("validate")
            usage_scores = context_usage_metrics(model, datamodule.split("valid"), datamodule.references("valid"),
                                                 bleu_tokenizer(cfg.eval, cfg.data), decode=False,
                                                 precision=resolved_settings(cfg)["precision"])
            scores.update({f"val/{k}": v for k, v in usage_scores.items()})
    return scores


def fit_and_test(cfg: DictConfig, run_dir: Path | None = None, resume: bool = False
                 ) -> tuple[Path, dict[str, float]]:
    """`fit_run`, returning the run dir and the test metrics on every rank.

    Every rank gets the metrics from its own test loop (the contrastive accuracies only on global
    rank zero, which computes and writes them), so no rank reads a file another rank writes. Under
    DDP the ranks meet at a barrier once rank zero has written the run's records. The run's wandb
    run (`dashboard.py`) spans its stages and gets the metrics as its summary.
    """
    check_no_reference_target(cfg, "test BLEU")  # before any training: the run would end in it
    check_stages(cfg)
    suites = configured_suites(cfg, cfg.data.report_split)
    check_run_inputs(cfg, needed=(TESTED_SPLIT,))
    run_dir = agree_on_run_dir(cfg, run_dir, make_run_dir)
    with run_dashboard(cfg, run_dir, resolved_settings(cfg)["precision"]) as dashboard:
        scores = score_and_record(cfg, train_stages(cfg, run_dir, resume, dashboard), run_dir, suites)
        record_scores(dashboard, scores, run_dir, cfg.data.report_split)
    barrier()
    return run_dir, scores


def score_and_record(cfg: DictConfig, results: dict[str, StageResult], run_dir: Path,
                     suites: dict[str, list[dict]]) -> dict[str, float]:
    """Test the final stage of `results`; global rank zero writes `run.json` (the stages) and
    `metrics.json` (the test metrics, the first stage's initial damage, the final stage's training
    pairs and mix share)."""
    final = results[cfg.train.schedule[-1]]
    scores = test_checkpoint(stage_config(cfg, final.name), final.checkpoint, run_dir, suites)
    records = stage_records(results, cfg.train.schedule)
    scores.update(first_damage(records))
    if "train_pairs" in records[-1]:  # stages trained before it was recorded lack it
        scores[TRAIN_PAIRS] = records[-1]["train_pairs"]
    if "mix" in records[-1]:
        scores[MIX_SHARE] = records[-1]["mix"]["realised_share"]
    record = {"checkpoint": str(final.checkpoint),
              "stages": {n: {"key": r.key, "reused": r.reused, "global_step": r.global_step,
                             "checkpoint": str(r.checkpoint)} for n, r in results.items()}}
    if is_global_zero():
        write_text_atomically(run_dir / "run.json", json.dumps(record, indent=1) + "\n")
        write_text_atomically(run_dir / "metrics.json", json.dumps(scores, indent=1) + "\n")
    return scores


def test_checkpoint(cfg: DictConfig, checkpoint: Path, out_dir: Path,
                    suites: dict[str, list[dict]] | None = None,
                    device: torch.device | None = None) -> dict[str, float | str]:
    """Test-set metrics of a checkpoint (beam search with `decode.*`), the training throughput it
    stores, its contrastive accuracies on `suites` (default: those of `eval.contrastive`; computed
    on global rank zero only, the rank that writes them), with `eval.context_usage` its CXMI and
    random-context control, with `eval.branch_usage` the scores of a parallel attention stack's
    branches alone (`evaluation/branch_usage.py`), and the provenance record of
    `provenance.environment_record` (code, versions, resolved precision, device, threads).

    `device`: test on that one device (`docmt test --device`) instead of with `trainer.*`; the
    caller's `cfg` is left unchanged."""
    check_no_reference_target(cfg, "test BLEU")
    if device is not None:
        cfg = OmegaConf.merge(cfg, {"trainer": trainer_settings(device)})
    suites = configured_suites(cfg, cfg.data.report_split) if suites is None else suites
    datamodule = DocumentWindowDataModule(cfg.data, cfg.vocab, cfg.context)
    datamodule.prepare_data(needed=(TESTED_SPLIT,))  # an empty test split: an error, before anything is built
    datamodule.setup("test")
    module = build_module(cfg, datamodule)
    load_weights(module, checkpoint)
    module.output_dir = out_dir
    trainer, _ = build_trainer(cfg, None, out_dir / "test", for_test=True)
    started = time.time()
    results = trainer.test(module, datamodule=datamodule, verbose=False)
    scores: dict[str, float | str] = {k: float(v) for k, v in results[0].items()} if results else {}
    if is_global_zero():
        progress(decoded_split_line(scores, cfg.data.report_split, time.time() - started))
    scores.update(train_speed_metrics(checkpoint))
    settings = resolved_settings(cfg)
    scores.update(environment_record(**settings))
    own_targets = module.own_translations()  # every rank: a collective under DDP
    targets = [s for s in datamodule.window.streams if s.side == "tgt"]
    if targets:  # reading D8: a target stream that reads the references of the scored split is an oracle
        scores["test/oracle_context"] = float(any(s.reads_references(cfg.data.report_split) for s in targets))
    score_branches = cfg.eval.branch_usage and bool(drop_branches(module.model))  # a parallel attention stack
    if (suites or cfg.eval.context_usage or score_branches) and is_global_zero():
        module.to(trainer.strategy.root_device).eval()  # the test loop left it on the CPU, training
        model = LoadedModel(module.model, cfg, datamodule.src_vocab, datamodule.tgt_vocab)
        scores.update(suite_metrics(model, suites))
        if cfg.eval.context_usage and not type(module.model).carries_state:  # else the test loop's
            started = time.time()
            scores.update(context_usage_metrics(model, datamodule.split("test"), datamodule.references("test"),
                                                bleu_tokenizer(cfg.eval, cfg.data),
                                                decode=cfg.eval.random_context_decodes,
                                                precision=settings["precision"], own_targets=own_targets))
            progress(context_usage_line(scores, time.time() - started))
        if score_branches:
            started = time.time()
            scores.update(branch_usage_metrics(model, datamodule.split("test"), datamodule.references("test"),
                                               bleu_tokenizer(cfg.eval, cfg.data), precision=settings["precision"],
                                               own_targets=own_targets))
            progress(branch_usage_line(scores, time.time() - started))
    return reported_on_valid(scores, out_dir) if cfg.data.report_split == "valid" else scores


REPORTED_SCORES = ("test/", "cxmi", "random_ctx/", "contrastive/", "branch/")
"""What the test loop and the passes after it score on the report's split (the rest: training
speed, environment)."""


def reported_on_valid(scores: dict[str, float | str], out_dir: Path) -> dict[str, float | str]:
    """With `data.report_split: valid` the "test" loop read the valid split (`data/splits.py`): its
    scores are named `valid/...` (`test/bleu` -> `valid/bleu`, `cxmi` -> `valid/cxmi`) and its files
    `valid.*` (`valid.hyp.txt`, ...), so that nothing reads as a test score. Rank zero moves the files."""
    if is_global_zero():
        for kind in ("hyp.txt", "ref.txt", "signature.json"):
            if (out_dir / f"test.{kind}").is_file():
                (out_dir / f"test.{kind}").replace(out_dir / f"valid.{kind}")
    return {(f"valid/{k.removeprefix('test/')}" if k.startswith(REPORTED_SCORES) else k): v
            for k, v in scores.items()}
