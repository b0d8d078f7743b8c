"""The sub-commands behind `docmt`: one function per command, `args` -> exit status.

The command table that maps names to these functions is `lightning_docmt.cli.COMMANDS`."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from lightning_docmt.atomic_files import write_text_atomically
from lightning_docmt.cli.output import print_json, print_mapping
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.resources import shipped_dir


def _overrides(args: argparse.Namespace) -> list[str]:
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        raise DocMTInputError(f"expected key=value overrides, got '{bad[0]}'")
    return list(args.overrides)


def _require_device(name: str | None) -> None:
    """`--device name` must be on this machine, where the run trains (None: the run's `trainer.*`)."""
    from lightning_docmt.inference.device import inference_device

    if name is not None:
        inference_device(name)


def _run_config(args: argparse.Namespace, *, here: bool):
    """The config of `docmt fit CONFIG [--row R] [--seed S] [--profile P] [--device D] [k=v ...]`,
    which `docmt config` prints from the same arguments. `here`: the run trains on this machine."""
    from lightning_docmt.inference.device import with_device
    from lightning_docmt.tables.spec import compose_file

    if here:
        _require_device(args.device)
    return compose_file(Path(args.config), with_device(_overrides(args), args.device), row=args.row,
                        profile=args.profile, seed=args.seed)


def stats_command(args: argparse.Namespace) -> int:
    from lightning_docmt.data.corpora import read_corpus
    from lightning_docmt.data.stats import corpus_stats

    print_mapping(corpus_stats(read_corpus(args.spec)), as_json=args.json)
    return 0


def prepare_command(args: argparse.Namespace) -> int:
    from lightning_docmt.data.prepare import TESTED_SPLIT, prepare
    from lightning_docmt.tables.spec import compose_file

    cfg = compose_file(Path(args.config), _overrides(args), row=args.row, profile=args.profile)
    print_json(prepare(cfg, needed=(TESTED_SPLIT,)))  # the data of a run, which ends in its test
    return 0


def fit_command(args: argparse.Namespace) -> int:
    """A plain run config, a run's config.yaml, or one row of a table file.

    A table row is written where `docmt table` looks for it (`results/<table>/<row>/seed<S>/`), so
    rows launched one by one (e.g. from `docmt table --dry-run` on a cluster) fill the same table.
    """
    from lightning_docmt.distributed import is_global_zero, progress
    from lightning_docmt.tables import runner as tables
    from lightning_docmt.tables.spec import load_table
    from lightning_docmt.training.run import fit_run

    if args.resume is not None:
        return _resume_fit(args)
    if args.config is None:
        raise DocMTInputError("docmt fit needs a config file (or --resume RUN_DIR)")
    cfg = _run_config(args, here=True)
    if args.row is None:
        run_dir = fit_run(cfg)
        if is_global_zero():  # the other DDP ranks run the same command
            print(run_dir)
        return 0
    table = load_table(Path(args.config))
    run_dir = tables.run_dir_for(args.results, table.id, args.row, cfg.train.seed)
    note = tables.other_code_note([tables.check_reusable(cfg, run_dir)])  # the overrides may make it another
    if note and is_global_zero():  # config than the finished run's
        progress(f"{run_dir}: {note}")
    record = tables.execute_run(cfg, run_dir, _row_runner(table), row=args.row, seed=cfg.train.seed)
    if record.error:
        raise DocMTInputError(f"row '{args.row}' failed: {record.error} (log: {record.log_path})")
    if is_global_zero():
        print(run_dir)
    return 0


def _resume_fit(args: argparse.Namespace) -> int:
    """`docmt fit --resume RUN_DIR`: the run's own `config.yaml`, nothing else, so that the resumed
    stages have the keys of the interrupted ones (finished stages come from the stage cache, the
    interrupted one continues from its newest checkpoint)."""
    from lightning_docmt.config import composition as config_lib
    from lightning_docmt.distributed import is_global_zero
    from lightning_docmt.training.run import fit_run

    extra = [a for a in (args.config, args.row, args.seed, args.profile, args.device) if a is not None] + args.overrides
    if extra:
        raise DocMTInputError(f"--resume takes only the run directory (its config.yaml is the run's "
                              f"config), got also '{extra[0]}'")
    run_dir = Path(args.resume)
    if not (run_dir / "config.yaml").is_file():
        raise DocMTInputError("not a run directory (no config.yaml)", path=run_dir)
    cfg = config_lib.compose(run_dir / "config.yaml", [])
    fit_run(cfg, run_dir, resume=True)
    if is_global_zero():
        print(run_dir)
    return 0


def config_command(args: argparse.Namespace) -> int:
    """Print the resolved config that `docmt fit` with the same arguments trains with, as the run's
    `config.yaml` would hold it (so `docmt fit` of the printed file trains the same run); train nothing."""
    from lightning_docmt.config.composition import resolved_config_text

    print(resolved_config_text(_run_config(args, here=False)), end="")
    return 0


def test_command(args: argparse.Namespace) -> int:
    from lightning_docmt.config import composition as config_lib
    from lightning_docmt.distributed import is_global_zero
    from lightning_docmt.inference.device import inference_device
    from lightning_docmt.training.run import test_checkpoint
    from lightning_docmt.training.stages import stage_config

    run = Path(args.run)
    run_dir = run.parent if run.is_file() else run
    cfg = config_lib.compose(run_dir / "config.yaml", [])
    record_file = run_dir / "run.json"
    record = json.loads(record_file.read_text()) if record_file.is_file() else {}
    if args.ckpt:
        ckpt = Path(args.ckpt)
    elif "checkpoint" in record:
        ckpt = Path(record["checkpoint"])
    else:
        raise DocMTInputError("no run.json (unfinished run?): pass --ckpt", path=run_dir)
    if not ckpt.is_file():
        raise DocMTInputError("no such checkpoint", path=ckpt)
    # the config of the stage that trained it (its architecture, its streams: `stage_config`), as
    # the fit tested it; a checkpoint the run does not record is tested as its final stage
    trained_by = [name for name, stage in record.get("stages", {}).items()
                  if Path(stage["checkpoint"]).resolve() == ckpt.resolve()]
    cfg = stage_config(cfg, trained_by[-1] if trained_by else cfg.train.schedule[-1])
    device = inference_device(args.device) if args.device is not None else None
    # with --json, standard output holds the JSON object alone: what the test passes say goes to stderr
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        scores = test_checkpoint(cfg, ckpt, run_dir, device=device)
    if is_global_zero():  # the run's other DDP ranks run the same command
        print_mapping(scores, as_json=args.json)
    return 0


def average_command(args: argparse.Namespace) -> int:
    """Average the `state_dict` of checkpoints; the rest comes from the newest (highest global_step)."""
    from lightning_docmt.callbacks.checkpoint_averaging import average_checkpoints

    summary = average_checkpoints([Path(c) for c in args.checkpoints], Path(args.out))
    print(f"averaged {len(summary['averaged'])} checkpoints -> {summary['out']} "
          f"(the rest from {summary['newest']})")
    return 0


def export_command(args: argparse.Namespace) -> int:
    """Write a checkpoint to ship (checkpoints.export_weights); print what was written."""
    from lightning_docmt.checkpoints import export_weights

    summary = export_weights(Path(args.checkpoint), Path(args.out), args.dtype)
    print(f"exported {summary['tensors']} tensors ({summary['dtype']}) -> {summary['out']} "
          f"({summary['bytes'] / 2**20:.1f} MiB)")
    return 0


def pretrain_command(args: argparse.Namespace) -> int:
    """Pretrain (or resume, or find) the encoder of a pretraining file; print its directory."""
    from lightning_docmt.config.pretraining import load_pretrain_config
    from lightning_docmt.pretraining.run import pretrain

    print(pretrain(load_pretrain_config(args.config)))
    return 0


def archive_command(args: argparse.Namespace) -> int:
    """Archive a table's finished runs (tables/archive.py) and print what was archived and left out;
    or, given a pretraining file, its pretrained encoder (pretraining/archive.py)."""
    from lightning_docmt.config.pretraining import is_pretraining_file, load_pretrain_config
    from lightning_docmt.config.yaml_file import YamlFile
    from lightning_docmt.tables.archive import archive_table

    if is_pretraining_file(YamlFile.load(args.table)):
        from lightning_docmt.pretraining.archive import archive_encoder

        print(f"archived encoder {archive_encoder(load_pretrain_config(args.table), Path(args.to), args.table)}")
        return 0

    outcome = archive_table(Path(args.table), Path(args.results), Path(args.to), rows=args.rows,
                            seeds=args.seeds)
    for run in outcome.archived:
        print(f"archived {run}")
    for run in outcome.unfinished:
        print(f"not finished, left out: {run}")
    if not outcome.archived:
        raise DocMTInputError(f"no finished run of the selected rows and seeds under "
                              f"{Path(args.results) / outcome.table_id}", path=args.table)
    if outcome.report is not None:
        print(f"report: {outcome.report.outputs['md']}")
    for grid in outcome.grids:
        print(f"grid report: {grid}")
    return 0


def _row_runner(table):
    """What trains and scores one row: train + test, or train + valid for a selection table."""
    from lightning_docmt.training.run import run_metrics, run_validation_metrics

    return run_validation_metrics if table.evaluate == "valid" else run_metrics


def table_command(args: argparse.Namespace) -> int:
    """A table file, or a grid file (`parts:`, tables/grid.py) whose part tables run in turn."""
    from lightning_docmt.config.yaml_file import YamlFile
    from lightning_docmt.tables import runner as tables
    from lightning_docmt.tables.grid import run_grid
    from lightning_docmt.tables.spec import is_grid_file, load_table

    seeds = args.seeds  # parser.seed_list
    if not args.dry_run:  # a dry run plans runs for other machines
        _require_device(args.device)
    common = dict(rows=args.rows, seeds=seeds, profile=args.profile, cli_overrides=_overrides(args),
                  device=args.device, results_dir=Path(args.results), dry_run=args.dry_run)
    if is_grid_file(YamlFile.load(args.table)):
        outcome = run_grid(Path(args.table), parts=args.parts or "all", row_runner=_row_runner,
                           **common)
        records = [r for part in outcome.parts for r in part.records]
    elif args.parts:
        raise DocMTInputError("--parts applies to grid files only (this file has no 'parts:')",
                              path=args.table)
    else:
        outcome = tables.run_table(Path(args.table), run_row=_row_runner(load_table(args.table)),
                                   **common)
        records = outcome.records
    if args.dry_run:
        print("\n".join(outcome.commands))
        return 0
    if outcome.outputs:
        print(Path(outcome.outputs["md"]).read_text())
        print("results: " + ", ".join(str(p) for p in outcome.outputs.values()))
    failed = [r for r in records if r.error]
    for r in failed:  # seed None, no log: a row whose config does not compose (tables/runner.py)
        seed, log = f" seed {r.seed}" if r.seed is not None else "", f" (log: {r.log_path})" if r.log_path else ""
        print(f"row {r.row}{seed} FAILED: {r.error}{log}")
    return 1 if failed else 0


def translate_command(args: argparse.Namespace) -> int:
    """Translate a file as a stream (`inference/translate.translate_file`); the rules that changed
    the input (over-long sentences cut, control characters) are one line each on stderr."""
    import sys

    from lightning_docmt.inference.device import inference_device
    from lightning_docmt.inference.loaded_model import load_checkpoint
    from lightning_docmt.inference.translate import translate_file

    model = load_checkpoint(args.ckpt, inference_device(args.device))
    beam = args.beam if args.beam is not None else model.cfg.decode.beam
    lenpen = args.lenpen if args.lenpen is not None else model.cfg.decode.len_penalty
    if beam < 1:
        raise DocMTInputError(f"--beam must be >= 1, got {beam}")
    explain = (lambda line: print(json.dumps(line, ensure_ascii=False))) if args.explain else None
    summary = translate_file(model, Path(args.input), Path(args.output), beam=beam, len_penalty=lenpen,
                             explain=explain)  # --explain: one JSON line per sentence on stdout
    for line in summary.report_lines():
        print(line, file=sys.stderr)
    print(f"translated {summary.sentences} sentences in {summary.documents} documents -> {args.output}")
    return 0


def contrastive_command(args: argparse.Namespace) -> int:
    """Accuracy of a checkpoint on a suite file or a published suite by name, beside the suite's
    chance and majority rates and the accuracy with every example reading another's context (and
    per distance to the antecedent, and the merged repeated candidates, where there are any)."""
    from lightning_docmt.data.contrastive_suites import read_suite
    from lightning_docmt.data.languages import data_languages
    from lightning_docmt.evaluation.contrastive_scoring import controlled_result, report_lines
    from lightning_docmt.evaluation.named_suites import load_named_suite, named_suite
    from lightning_docmt.inference.device import inference_device
    from lightning_docmt.inference.loaded_model import load_checkpoint

    model = load_checkpoint(args.ckpt, inference_device(args.device))
    if named_suite(args.suite) is not None:
        _, examples = load_named_suite(args.suite, args.suites_dir, data_languages(model.cfg.data),
                                       key="--suite")
    else:
        examples = read_suite(args.suite)
    result = controlled_result(model, examples)
    if args.json:
        print_json(result)
    else:
        print("\n".join(report_lines(result)))
    return 0


BENCHMARKS = shipped_dir("benchmarks")
# `docmt bench --only NAME`: the benchmark scripts of `benchmarks/` (each prints its figures and ratios).
BENCHMARK_NAMES = ("data_scale", "training_step", "zhang_efficiency", "peers", "context_overhead",
                   "translate_memory")


# `docmt bench --smoke`: every benchmark at tiny sizes (seconds), to check the benchmarks run, not to measure.
SMOKE_ARGUMENTS = {
    "data_scale": ["--sentences", "2000"],
    "training_step": ["--profile", "tiny", "--corpus", "synthetic:tiny", "--repeats", "1",
                      "--train-batches", "2", "--decode-sentences", "4", "--threads", "1"],
    "zhang_efficiency": ["--profile", "tiny", "--corpus", "synthetic:tiny", "--repeats", "1",
                         "--train-batches", "2", "--decode-sentences", "4", "--threads", "1"],
    "peers": ["--profile", "tiny", "--sizes", "profile", "--corpus", "synthetic:tiny", "--repeats", "1",
              "--train-batches", "2", "--decode-sentences", "4", "--length", "8", "--threads", "1"],
    "context_overhead": ["--profile", "tiny", "--corpus", "synthetic:tiny", "--repeats", "1",
                         "--train-batches", "2", "--decode-sentences", "4", "--length", "8", "--threads", "1"],
    "translate_memory": ["--archs", "transformer", "--sentences", "20,40", "--threads", "1"],
}


def _benchmark_argv(name: str, args: argparse.Namespace, json_path: Path | None) -> list[str]:
    import sys

    argv = [sys.executable, str(BENCHMARKS / f"{name}.py")]
    if args.smoke:
        argv += SMOKE_ARGUMENTS[name]
    elif name == "data_scale":
        argv += ["--sentences", str(args.sentences)]
    if json_path is not None:
        argv += ["--json", str(json_path)]
    return argv


def bench_command(args: argparse.Namespace) -> int:
    """Run the selected benchmarks (`--only a,b`; default: all) one after another.

    `--json PATH` gets the report of a single benchmark as it is, or `{name: report}` for several.
    """
    import subprocess
    import tempfile

    names = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else list(BENCHMARK_NAMES)
    unknown = [n for n in names if n not in BENCHMARK_NAMES]
    if unknown or not names:
        raise DocMTInputError(f"--only: unknown benchmark '{unknown[0] if unknown else args.only}'; "
                              f"available: {', '.join(BENCHMARK_NAMES)}")
    if args.json and len(names) == 1:
        return subprocess.call(_benchmark_argv(names[0], args, Path(args.json)))
    status, reports = 0, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            json_path = Path(tmp) / f"{name}.json" if args.json else None
            code = subprocess.call(_benchmark_argv(name, args, json_path))
            status = status or code
            if json_path is not None and json_path.is_file():
                reports[name] = json.loads(json_path.read_text())
    if args.json:
        write_text_atomically(Path(args.json), json.dumps(reports, indent=1) + "\n")
    return status
