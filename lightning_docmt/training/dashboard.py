"""The wandb run of one training run (docs/design.md section 10): one per `fit_and_test` or
`run_validation_metrics` (a table's (row, seed), a `docmt fit`), spanning its stages, finished when
the run ends (exit code 1 when it stopped on an error). Only global rank zero opens one; every
call is guarded (`wandb_runs.py`).

- Name `<row>/seed<S>` (`logging.name`, else the arch), group `logging.group` (a table's id), tags
  `logging.tags` plus `profile:<P>`, `precision:<resolved>` and `code:<fingerprint>`; config: the
  resolved run config, set once (a stage's Trainer adds none: `StageWandbLogger`).
- Curves: each stage's Lightning metrics under the stage's name (`sent/train/loss`,
  `doc/val/bleu`, `doc/lr-Adam`), against `trainer/global_step`, the stage's own updates
  (Lightning's 0-based index).
- Summary: per stage `<stage>/reused`, `<stage>/key`, `<stage>/global_step` and
  `<stage>/best_score` (`stage_keys`; a stage reused from the stage cache has no curves in this
  run: they are in the run that trained it, whose summary has the same `<stage>/key` with
  `<stage>/reused` false), then every key of the run's `metrics.json` (test or validation
  scores, context-usage and contrastive metrics, the `env/` provenance) and the signatures of its
  test scores (`test/bleu_signature`, `test/chrf_signature`, ...: `record_scores`).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Iterator, Mapping

from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig, OmegaConf

from lightning_docmt.distributed import is_global_zero
from lightning_docmt.provenance import code_fingerprint
from lightning_docmt.wandb_runs import GuardedRun, start_run

STEP_METRIC = "trainer/global_step"  # the step Lightning's WandbLogger logs with every metric


def run_name(cfg: DictConfig) -> str:
    """`<row>/seed<S>`: the row (`logging.name`, else the arch) and the seed."""
    return f"{cfg.logging.name or cfg.model.arch}/seed{cfg.train.seed}"


def run_tags(cfg: DictConfig, precision: str) -> list[str]:
    """`logging.tags` (a table's paper, id and arch) and the profile, resolved precision and code."""
    return list(dict.fromkeys([*cfg.logging.tags, f"profile:{cfg.profile or 'none'}",
                               f"precision:{precision}", f"code:{code_fingerprint()}"]))


@contextlib.contextmanager
def run_dashboard(cfg: DictConfig, run_dir: Path, precision: str) -> Iterator[GuardedRun]:
    """The run's wandb run while the block trains and tests, finished after it (exit code 1 when
    the block raised); off (nothing is logged) with `logging.wandb: false`, on ranks other than
    global zero, and when wandb is off or failed to start."""
    if not (cfg.logging.wandb and is_global_zero()):
        yield GuardedRun()
        return
    run_dir.mkdir(parents=True, exist_ok=True)  # wandb writes under <run dir>/wandb/
    dashboard = start_run(project=cfg.logging.project, group=cfg.logging.group, name=run_name(cfg),
                          tags=run_tags(cfg, precision), job_type="train", dir=str(run_dir),
                          config=OmegaConf.to_container(cfg, resolve=True))

    def stage_steps_as_x_axis() -> None:
        dashboard.run.define_metric(STEP_METRIC)
        dashboard.run.define_metric("*", step_metric=STEP_METRIC, step_sync=True)

    dashboard.call("define_metric", stage_steps_as_x_axis)
    try:
        yield dashboard
    except BaseException:
        dashboard.finish(exit_code=1)
        raise
    dashboard.finish()


def stage_keys(name: str, *, key: str, reused: bool, done: Mapping[str, Any]) -> dict[str, Any]:
    """A stage's summary keys: whether it was reused from the stage cache, its key there, the
    updates behind the checkpoint it hands on and its best validation score (`done.json`)."""
    return {f"{name}/reused": reused, f"{name}/key": key, f"{name}/global_step": done["global_step"],
            f"{name}/best_score": done.get("best_score")}


def record_scores(dashboard: GuardedRun, scores: Mapping[str, Any], run_dir: Path, split: str) -> None:
    """The run's scores into its summary, with `<split>/<metric>_signature` for each signature of
    its `<split>.signature.json` (sacreBLEU's BLEU and chrF, METEOR's settings; `split`: the one
    the run reports on)."""
    if not dashboard.alive:  # other ranks: the file is rank zero's
        return
    path = run_dir / f"{split}.signature.json"
    signatures = json.loads(path.read_text()) if path.is_file() else {}
    dashboard.summarize({**scores, **{f"{split}/{metric}_signature": s for metric, s in signatures.items()}})


class StageWandbLogger(WandbLogger):
    """A stage's Lightning logger on its run's wandb run: metric keys `<stage>/<key>`, every log
    guarded; the run's config stays the one it opened with."""

    LOGGER_JOIN_CHAR = "/"

    def __init__(self, dashboard: GuardedRun, stage: str):
        super().__init__(experiment=dashboard.run, prefix=stage)
        self.dashboard = dashboard

    def log_hyperparams(self, params: Any) -> None:
        """Nothing: a stage's hyperparameters (its own view of the config) would replace the run's."""

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        log = super().log_metrics
        self.dashboard.call("log", lambda: log(metrics, step))
