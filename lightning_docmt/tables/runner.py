"""Run a table file row by row and seed by seed: `docmt table TABLE.yaml` (docs/design.md sections 9-10).

Each run lives in `results/<table id>/<row>/seed<S>/`:

    config.yaml    the resolved run config (`config.save_config`)
    log.txt        what the run printed (stdout, stderr, logging records but wandb's, which are in its
                   wandb run's debug.log), plus a failure's traceback
    metrics.json   what `run_row` returned, plus the run's wall seconds (`time/run_s`: a stage reused
                   from the stage cache costs next to nothing, and a run resumed after an
                   interruption counts only its last attempt); its presence marks the run
                   finished, so a re-run skips it
    error.json     why the last attempt failed (removed when the run is retried)

and the table in `results/<table id>/table.{md,csv,png}` (`changes.csv` too for a table with
`changes:`, tables/change_results.py). Checkpoints stay in each stage's folder
(`<row>/seed<S>/<stage>/checkpoints/`) and in the stage cache. A failing run is recorded and the
others continue. Every selected row is composed before anything runs: a row whose config does not
compose (a bad key or value in its overrides) is announced then, left out and recorded as failed
(seed None: no seed was chosen for it), and the other rows run; when no selected row composes, or in
a dry run, the first such error is the command's (one line, exit status 2). A finished run whose saved
config differs from the one composed now is an error before anything runs (re-running with another
profile must not silently reuse old numbers).

The archive `experiments/measured/` (ARCHIVE_DIRNAME) is such a results directory, committed without
its checkpoints: the runs behind every number that experiments/README.md quotes. `docmt table
TABLE.yaml --seeds 1,2,3 --results experiments/measured` rebuilds a table from it (mean, sd and
significance from the archived hypotheses, no training) and trains only the seeds it lacks, so a
table can be filled over several machines or sessions.

The training itself is injected: `run_row(cfg, run_dir) -> {metric: value}`, so this module knows
nothing of models. `dry_run` instead returns one `docmt fit` command per run, for cluster schedulers:
each carries `--results`, `--seed`, `--profile`, `--device` and the overrides, so the runs they write
are the ones that `docmt table` with the same options collects.

Several processes may run a table at once (the same `docmt table` command started N times, or the
dry run's commands): each run is done by one of them, the one holding `<row>/seed<S>.lock`
(`claims.py`); another leaves it for later, runs the others, then waits for it and reports what its
holder wrote. Rows that share a stage train it once (`training/run.py`). Every process writes the
same report at its end, from the same finished runs.

DDP: Lightning's `ddp` strategy re-launches the command (`docmt table ...`) once per extra device,
so every rank walks the same table and joins each `trainer.fit`; only global rank zero writes
files (configs, logs, metrics, the report) and logs to wandb.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import shlex
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence, TextIO

from omegaconf import DictConfig, OmegaConf

from lightning_docmt.atomic_files import write_text_atomically
from lightning_docmt.claims import BUSY, PUBLISHED, claimed
from lightning_docmt.config.composition import CONFIG_FILENAME, RESOLVED_KEY, save_config, schema_defaults
from lightning_docmt.config.schema import inert_keys
from lightning_docmt.distributed import in_process_group, is_global_zero, progress
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.inference.device import planned_processes, with_device
from lightning_docmt.provenance import ENV_PREFIX, code_fingerprint
from lightning_docmt.tables.change_results import markdown_lines, measure_changes, write_changes_csv
from lightning_docmt.tables.curve import curve_points, write_curve_csv, write_curve_png
from lightning_docmt.tables.dashboard import log_table_to_wandb
from lightning_docmt.tables.figures import write_table_figures
from lightning_docmt.tables.report import write_csv, write_markdown
from lightning_docmt.tables.row_significance import RowSignificance, row_significance
from lightning_docmt.tables.spec import Table, TableRow, compose_row, load_table
from lightning_docmt.tables.summaries import (
    DONE,
    FAILED,
    FINISHED,
    INCOMPLETE,
    RowSummary,
    RunRecord,
    summarize,
)

RunRow = Callable[[DictConfig, Path], Mapping[str, Any]]

METRICS_FILE, ERROR_FILE, LOG_FILE = "metrics.json", "error.json", "log.txt"
HEADLINE_METRICS = ("test/bleu", "test/chrf", "valid/bleu", "valid/chrf", "val/bleu")  # in a row's last line
RUN_TIME_METRIC = "time/run_s"  # wall seconds of the last attempt: reused stages cost ~0
ARCHIVE_DIRNAME = "measured"  # experiments/measured/: archived runs, not experiment files
# Keys that do not change a run's numbers: a finished run composed with other values here is reused.
REUSE_IGNORED_KEYS = ("logging", "trainer", "data.num_workers", "data.cache_dir")
# Loggers kept out of a run's log.txt: they write files of their own (wandb: every record, DEBUG
# included, into each wandb run's debug.log).
OWN_FILE_LOGGERS = ("wandb",)


@dataclass
class PlannedRun:
    row: TableRow
    seed: int
    cfg: DictConfig
    run_dir: Path


@dataclass(frozen=True)
class TableResults:
    """What the report shows: per row, its runs on disk summarised, and the rows other than the
    baseline tested against it seed by seed (empty without a `baseline:`)."""

    summaries: list[RowSummary]
    tested: dict[str, RowSignificance]


@dataclass
class TableOutcome:
    """`records`: the runs of this call (empty for a dry run); `commands`: the dry run's commands;
    `outputs`: the written report files by kind (`md`, `csv`, `png`); `results`: what they show
    (None for a dry run and on other DDP ranks)."""

    table: Table
    records: list[RunRecord] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    outputs: dict[str, Path] = field(default_factory=dict)
    results: TableResults | None = None


def run_dir_for(results_dir: str | Path, table_id: str, row: str, seed: int) -> Path:
    return Path(results_dir) / table_id / row / f"seed{seed}"


def run_table(table_path: str | Path, rows: str | Sequence[str] = "all",
              seeds: Sequence[int] | None = None, profile: str | None = None,
              cli_overrides: Sequence[str] = (), run_row: RunRow | None = None,
              results_dir: str | Path = "results", dry_run: bool = False,
              preface: str = "", device: str | None = None, write_report: bool = True) -> TableOutcome:
    """Run the selected rows for each seed, skip finished runs, then write the table report
    (unless `write_report` is false: a caller that runs the table in parts reports once, at the end).

    Seeds: `seeds`, else the table's `seeds:`, else each row's own `train.seed`. `device`: every
    row trains on that one device (`docmt table --device`, `inference/device.with_device`). The report covers
    every row of the table with the runs found on disk for those seeds (all seeds found, when none
    are given), so tables filled by several calls (`--rows a`, then `--rows b`) come out whole.
    `preface`: a sentence on how this run of the table differs from the table (`docmt demo`'s
    budget), written into its report.
    """
    table = load_table(table_path)
    seed_list = list(seeds) if seeds else (list(table.seeds) if table.seeds else None)
    overrides = with_device(cli_overrides, device)
    plan: list[PlannedRun] = []
    broken: dict[str, DocMTInputError] = {}  # rows whose config does not compose: left out
    for row in table.select(rows):
        try:
            for seed in seed_list or [None]:
                cfg = compose_row(table, row.name, profile, overrides, seed=seed)
                plan.append(PlannedRun(row=row, seed=cfg.train.seed, cfg=cfg, run_dir=run_dir_for(
                    results_dir, table.id, row.name, cfg.train.seed)))
        except DocMTInputError as err:  # a config error does not depend on the seed
            plan = [planned for planned in plan if planned.row.name != row.name]
            broken[row.name] = err
    if broken and (dry_run or not plan):
        raise next(iter(broken.values()))
    if is_global_zero():
        for name, err in broken.items():
            progress(f"{table.id}: row '{name}' is left out, its config does not compose: {err}")
    failed = [RunRecord(row=name, seed=None, run_dir=Path(results_dir) / table.id / name, status=FAILED,
                        error=f"{type(err).__name__}: {err}") for name, err in broken.items()]
    if dry_run:
        return TableOutcome(table=table, commands=fit_commands(table, plan, profile, cli_overrides,
                                                               with_seed=seed_list is not None,
                                                               device=device, results_dir=results_dir))
    if run_row is None:
        raise ValueError("run_table needs a run_row function unless dry_run is set")
    note = other_code_note([check_reusable(planned.cfg, planned.run_dir) for planned in plan])
    if note and is_global_zero():
        progress(f"{table.id}: {note}")
    order = {row.name: i for i, row in enumerate(table.rows)}
    records = sorted(execute_plan(plan, run_row) + failed, key=lambda r: order[r.row])  # table order
    if not write_report or not is_global_zero():
        return TableOutcome(table=table, records=records)
    out_dir = Path(results_dir) / table.id
    out_dir.mkdir(parents=True, exist_ok=True)
    results = table_results(table, results_dir, seed_list, failed)
    summaries = results.summaries
    context = f"Profile: {profile or _common_profile(plan) or 'none'}. {_case_setting(plan)}"
    if preface:
        context = f"{preface} {context}"
    if table.evaluate == "valid":
        context += (" Selection table: every score is on the valid split (greedy unless "
                    "eval.valid_beam says otherwise); the test split was never decoded.")
    if table.evaluate == "valid_report":
        context += (" Every score is on the valid split, decoded as a test split is (beam search, "
                    "decode.*); the test split was never read.")
    marks = {row: (t.mark, t.p_values) for row, t in results.tested.items()}
    changes = measure_changes(table, summaries)  # tested here, for this report only (grids do not show them)
    outputs = {"md": write_markdown(table, summaries, out_dir / "table.md", context=context,
                                    significance=marks, changes=markdown_lines(table, changes)),
               "csv": write_csv(table, summaries, out_dir / "table.csv", significance=marks),
               **write_table_figures(table, summaries, {row: mark for row, (mark, _) in marks.items()},
                                     out_dir)}
    if table.changes:
        outputs["changes_csv"] = write_changes_csv(table, changes, out_dir / "changes.csv")
    if table.curve is not None:
        finished = {s.row.name: [r.metrics for r in s.records if r.succeeded] for s in summaries}
        points = curve_points(table.curve, finished)
        outputs["curve_csv"] = write_curve_csv(points, out_dir / "curve.csv")
        outputs["curve_png"] = write_curve_png(table.curve, points, table.title, out_dir / "curve.png")
    if any(planned.cfg.logging.wandb for planned in plan):
        log_table_to_wandb(table, summaries, outputs, results.tested, project=plan[0].cfg.logging.project,
                           out_dir=out_dir)
    return TableOutcome(table=table, records=records, outputs=outputs, results=results)


def table_results(table: Table, results_dir: str | Path, seeds: Sequence[int] | None,
                  broken: Sequence[RunRecord] = ()) -> TableResults:
    """Summaries and significance tests of the table's runs on disk (`seeds` only, or every seed
    found when None); the paired bootstrap makes this the costly part of a report. `broken`: the
    records of rows whose config does not compose (`run_table`), shown instead of their runs on disk
    (those are not runs of the row as the table file now has it)."""
    left_out = {r.row for r in broken}
    on_disk = [r for r in collect_records(table, results_dir, seeds) if r.row not in left_out]
    summaries = summarize(table, [*on_disk, *broken])
    tested = row_significance(summaries, table.baseline) if table.baseline else {}
    return TableResults(summaries=summaries, tested=tested)


def fit_commands(table: Table, plan: Sequence[PlannedRun], profile: str | None,
                 cli_overrides: Sequence[str], *, with_seed: bool, device: str | None = None,
                 results_dir: str | Path = "results") -> list[str]:
    """One shell-quoted `docmt fit TABLE --row NAME --results DIR [--seed S] [--profile P]
    [--device D] [k=v ...]` per run: every option that decides where the run is written and what it
    trains, so that the runs these commands write are the runs `docmt table` with the same options
    finds (the paths as given, relative to the directory the commands run in)."""
    commands = []
    for planned in plan:
        argv = ["docmt", "fit", str(table.path), "--row", planned.row.name, "--results", str(results_dir)]
        argv += ["--seed", str(planned.seed)] if with_seed else []
        argv += ["--profile", profile] if profile else []
        argv += ["--device", device] if device else []
        commands.append(shlex.join([*argv, *cli_overrides]))
    return commands


def execute_plan(plan: Sequence[PlannedRun], run_row: RunRow) -> list[RunRecord]:
    """The record of every planned run, in plan order, each run done by one process of those that
    run the table at once: a run that another process holds is left for later and waited for once
    the others are done (when this process may leave it: `may_defer`); if that process failed it,
    it is recorded as failed, not run again."""
    records: dict[int, RunRecord] = {}
    later = []
    for i, planned in enumerate(plan):
        record = execute_run(planned.cfg, planned.run_dir, run_row, row=planned.row.name,
                             seed=planned.seed, wait=not may_defer(planned.cfg))
        if record is None:
            later.append(i)
        else:
            records[i] = record
    for i in later:
        planned = plan[i]
        records[i] = execute_run(planned.cfg, planned.run_dir, run_row, row=planned.row.name,
                                 seed=planned.seed, held_elsewhere=True)
    return [records[i] for i in range(len(plan))]


def may_defer(cfg: DictConfig) -> bool:
    """Whether this process may leave a run that another process holds for later: a process that
    trains alone, or a DDP rank whose process group is open (rank zero's decisions reach the other
    ranks). Not a DDP rank zero before it: the ranks that Lightning starts in its first
    `trainer.fit` walk the table from its start and would not skip the run (`claims.py`)."""
    return in_process_group() or planned_processes(cfg.trainer) == 1


def execute_run(cfg: DictConfig, run_dir: Path, run_row: RunRow, *, row: str, seed: int,
                wait: bool = True, held_elsewhere: bool = False) -> RunRecord | None:
    """Run one (row, seed) unless finished; record metrics or the failure; never raise on failure.

    Several processes may want the run at once (a table or a fan-out launched more than once): one
    runs it (`claims.claimed` on `<run dir>.lock`) and the others wait for its outcome, or return
    None at once without `wait`. `held_elsewhere`: another process held the run earlier in this
    table run, so a failure recorded since is its outcome (that process removed any older one when
    it began) and is not retried."""
    outcome = (METRICS_FILE, ERROR_FILE) if held_elsewhere else (METRICS_FILE,)
    with claimed(run_dir.with_name(run_dir.name + ".lock"),
                 lambda: any((run_dir / name).is_file() for name in outcome),
                 f"row {row}, seed {seed} of {cfg.logging.group}", wait=wait) as claim:
        if claim == BUSY:
            return None
        if claim == PUBLISHED:
            return _record_on_disk(row, seed, run_dir)
        return _run(cfg, run_dir, run_row, row=row, seed=seed)


def _run(cfg: DictConfig, run_dir: Path, run_row: RunRow, *, row: str, seed: int) -> RunRecord:
    run_dir.mkdir(parents=True, exist_ok=True)
    if not is_global_zero():  # another rank of a DDP run: train, leave the records to rank zero
        return RunRecord(row=row, seed=seed, run_dir=run_dir, status=DONE,
                         metrics=_checked_metrics(run_row(cfg, run_dir)))
    (run_dir / ERROR_FILE).unlink(missing_ok=True)
    save_config(cfg, run_dir)
    log_path = run_dir / LOG_FILE
    started = time.monotonic()
    with _captured_output(log_path):
        print(f"[{cfg.logging.group}] row {row}, seed {seed}: {run_dir}", flush=True)
        try:
            metrics = _checked_metrics(run_row(cfg, run_dir))
        except Exception as err:  # a failing row must not stop the table
            traceback.print_exc()
            error = f"{type(err).__name__}: {err}"
            _write_json(run_dir / ERROR_FILE, {"error": error, "log": str(log_path),
                                               "traceback": traceback.format_exc()})
            return RunRecord(row=row, seed=seed, run_dir=run_dir, status=FAILED, error=error,
                             log_path=log_path)
        metrics[RUN_TIME_METRIC] = round(time.monotonic() - started, 1)
        scores = ", ".join(f"{key} {value:.2f}" for key, value in metrics.items()
                           if key.endswith(HEADLINE_METRICS) and isinstance(value, float))
        print(f"[{cfg.logging.group}] row {row}, seed {seed} finished in {metrics[RUN_TIME_METRIC]:.1f} s"
              f"{': ' + scores if scores else ''} (every metric: {run_dir / METRICS_FILE})", flush=True)
    _write_json(run_dir / METRICS_FILE, metrics)
    return RunRecord(row=row, seed=seed, run_dir=run_dir, status=DONE, metrics=metrics,
                     log_path=log_path)


def collect_records(table: Table, results_dir: str | Path,
                    seeds: Sequence[int] | None) -> list[RunRecord]:
    """The runs on disk of every row: `seeds` only, or every `seed<S>` folder when None."""
    records = []
    for row in table.rows:
        row_dir = Path(results_dir) / table.id / row.name
        found = sorted(int(p.name[4:]) for p in row_dir.glob("seed*") if p.name[4:].isdigit())
        for seed in (found if seeds is None else [s for s in seeds if s in found]):
            run_dir = run_dir_for(results_dir, table.id, row.name, seed)
            records.append(_record_on_disk(row.name, seed, run_dir))
    return records


def _record_on_disk(row: str, seed: int, run_dir: Path) -> RunRecord:
    log_path = run_dir / LOG_FILE
    if (run_dir / METRICS_FILE).is_file():
        return RunRecord(row=row, seed=seed, run_dir=run_dir, status=FINISHED,
                         metrics=_read_json(run_dir / METRICS_FILE), log_path=log_path)
    if (run_dir / ERROR_FILE).is_file():
        error = _read_json(run_dir / ERROR_FILE).get("error", "unknown error")
        return RunRecord(row=row, seed=seed, run_dir=run_dir, status=FAILED, error=error,
                         log_path=log_path)
    return RunRecord(row=row, seed=seed, run_dir=run_dir, status=INCOMPLETE, log_path=log_path)


def check_reusable(cfg: DictConfig, run_dir: Path) -> str | None:
    """A finished run in `run_dir` is reused only if its saved config matches `cfg` (outside
    REUSE_IGNORED_KEYS and the keys inert in both, `schema.inert_keys`); returns the fingerprint of
    the code that computed it when that is other code (the caller says so, `other_code_note`), else
    None. A key that the saved config
    lacks is an option added to the code since the run: the run was made as if at the option's
    default in code, so the key differs only where `cfg` sets it to something else (else every
    new option would orphan the archive of measured runs, or a table that turns a new option on
    would silently reuse the runs made without it). Called by `docmt table` for every planned run
    before any runs, and by `docmt fit TABLE --row` (whose command-line overrides may change the
    row's config)."""
    saved_path = run_dir / CONFIG_FILENAME
    if not ((run_dir / METRICS_FILE).is_file() and saved_path.is_file()):
        return None
    recorded = _read_json(run_dir / METRICS_FILE).get(f"{ENV_PREFIX}code")
    saved = OmegaConf.to_container(OmegaConf.load(saved_path), resolve=True)
    saved.pop(RESOLVED_KEY, None)
    now = _flatten(OmegaConf.to_container(cfg, resolve=True))
    before = _flatten(saved)
    defaults = _flatten(OmegaConf.to_container(schema_defaults(cfg.model.arch), resolve=True))
    for key in now.keys() - before.keys():  # options added since the run: it had their defaults
        if key in defaults:
            before[key] = defaults[key]
    ignored = (*REUSE_IGNORED_KEYS, *(inert_keys(cfg) & inert_keys(saved)))
    differ = sorted(key for key in before if now.get(key, "<absent>") != before[key]
                    and not key.startswith(tuple(f"{k}." for k in ignored)) and key not in ignored)
    if differ:
        shown = ", ".join(f"{k} ({before[k]!r} -> {now.get(k, '<absent>')!r})"
                          for k in differ[:4]) + (" ..." if len(differ) > 4 else "")
        raise DocMTInputError(f"holds a finished run of another config: {shown}; delete the folder "
                              "to run it again, or choose another results directory",
                              path=run_dir)
    return recorded if recorded != code_fingerprint() else None


def other_code_note(fingerprints: Sequence[str | None]) -> str | None:
    """One line on the finished runs reused although other code computed them (an archive filled
    over several versions is the normal case): how many, by which code; None when there are none."""
    counts = Counter(f for f in fingerprints if f is not None)
    if not counts:
        return None
    made = ", ".join(f"{fingerprint} ({n})" for fingerprint, n in sorted(counts.items()))
    return (f"{sum(counts.values())} finished run(s) computed by other code are reused as recorded "
            f"(fingerprint {made}; now {code_fingerprint()}); the report lists the code of every run, "
            "and deleting a run's folder recomputes it")


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: node}


def _checked_metrics(metrics: Any) -> dict[str, Any]:
    """Numbers become floats; strings (e.g. sacreBLEU signatures) are kept; anything else is wrong."""
    if not isinstance(metrics, Mapping):
        raise TypeError(f"run_row must return a mapping of metric names to values, got "
                        f"{type(metrics).__name__}")
    checked: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            checked[str(key)] = float(value)
        elif isinstance(value, str):
            checked[str(key)] = value
        else:
            raise TypeError(f"metric '{key}' must be a number or a string, got {value!r}")
    return checked


def _common_profile(plan: Sequence[PlannedRun]) -> str | None:
    profiles = {planned.cfg.profile for planned in plan}
    return profiles.pop() if len(profiles) == 1 else None


def _case_setting(plan: Sequence[PlannedRun]) -> str:
    """One sentence on the case setting of the table's scores (`eval.lowercase`, shared by BLEU,
    chrF, d-BLEU and METEOR)."""
    cases = {bool(planned.cfg.eval.lowercase) for planned in plan}
    if len(cases) != 1:
        return "Rows differ in case setting (eval.lowercase): their scores do not compare."
    return ("BLEU, chrF, d-BLEU and METEOR are " +
            ("case-insensitive." if cases.pop() else "case-sensitive (cased)."))


class _Tee(io.TextIOBase):
    """Writes to the console stream and to the run's log file."""

    def __init__(self, console: TextIO, log: TextIO):
        self.console, self.log = console, log

    def write(self, text: str) -> int:
        self.console.write(text)
        self.log.write(text)
        return len(text)

    def flush(self) -> None:
        self.console.flush()
        self.log.flush()

    def isatty(self) -> bool:
        return self.console.isatty()


@contextlib.contextmanager
def _captured_output(log_path: Path) -> Iterator[None]:
    """Copy stdout, stderr and logging records into `log_path` while still showing them."""
    with log_path.open("a", encoding="utf-8") as log:
        handler = logging.StreamHandler(log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        # Loggers that do not propagate to the root (e.g. Lightning's own) get the handler too, but
        # those that write files of their own (OWN_FILE_LOGGERS).
        loggers = [logging.getLogger()] + [
            lg for lg in logging.Logger.manager.loggerDict.values()
            if isinstance(lg, logging.Logger) and not lg.propagate and lg.handlers
            and lg.name.split(".")[0] not in OWN_FILE_LOGGERS]
        for lg in loggers:
            lg.addHandler(handler)
        try:
            with contextlib.redirect_stdout(_Tee(sys.stdout, log)), \
                    contextlib.redirect_stderr(_Tee(sys.stderr, log)):
                yield
        finally:
            for lg in loggers:
                lg.removeHandler(handler)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise DocMTInputError(f"cannot read ({err})", path=path) from None
    if not isinstance(data, dict):
        raise DocMTInputError("expected a JSON object", path=path)
    return data


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Atomic: metrics.json appears complete or not at all (its presence means 'finished')."""
    write_text_atomically(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
