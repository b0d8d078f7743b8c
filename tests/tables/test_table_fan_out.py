"""A table run by several processes at once gives the archive that one process gives.

A tiny table of two rows that share their first stage (`sent`), in three working directories at
once, each with its own stage cache (the table's paths are relative, so every run's config is the
same):

- `fanned/`: the commands `docmt table --dry-run --results DIR` prints, all started at once; a
  later `docmt table --results DIR` there collects their runs without training;
- `twice/`: `docmt table` started twice at once;
- `once/`: `docmt table` in one process.

What may differ between the archives: wall times and speeds (`time/run_s`, `speed/*` in
`metrics.json`), each run's `log.txt` (times, the waiting lines) and `run.json` (which run trained
a shared stage and which reused it, `reused`), and which run's folder holds a shared stage's
training files. Everything else is compared: metrics, hypotheses, configs, the stages' weights, the
report.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
import torch

from tests.helpers.cli_run import CORPUS, docmt
from tests.helpers.run_env import DOCMT, subprocess_env

pytestmark = [pytest.mark.fit, pytest.mark.subprocess]

TABLE = f"""\
id: fan
title: A table fanned out over processes
metrics: [test/bleu, test/chrf]
base: [data.corpus={CORPUS}, data.cache_dir=cache, eval.valid_bleu=false, context.prev_sentences=1,
       "train.stages={{sent: {{arch: transformer}}}}"]
seeds: [1]
rows:
  - {{name: sent, overrides: [model.arch=transformer, "train.schedule=[sent]"]}}
  - {{name: doc, overrides: [model.arch=concat, "train.stages.doc={{arch: concat, init_from: sent}}",
                            "train.schedule=[sent,doc]"]}}
"""
RESULTS = "fanned out"  # a results folder whose name must be quoted in the commands
TABLE_ARGS = ["table", "fan.yaml", "--profile", "tiny", "--results", RESULTS]
TIMING = ("time/run_s", "speed/")  # metrics.json: wall-clock figures
PER_RUN = ("log.txt", "run.json")  # what each process writes of its own (module docstring)


def run_at_once(commands: dict[Path, list[list[str]]]) -> None:
    """Start every command (argv after `docmt`) in its folder at once; all must succeed."""
    started = []
    for folder, argvs in commands.items():
        for i, argv in enumerate(argvs):
            with open(folder / f"process{i}.out", "w") as out:
                started.append((folder / f"process{i}.out", subprocess.Popen(
                    [str(DOCMT), *argv], cwd=folder, env=subprocess_env(), stdout=out, stderr=subprocess.STDOUT)))
    for out, process in started:
        assert process.wait(timeout=600) == 0, out.read_text()[-3000:]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """The three working directories of the module docstring, their runs done; `commands`: what
    the dry run printed (the fanned-out commands)."""
    root = tmp_path_factory.mktemp("fan_out")
    folders = {name: root / name for name in ("fanned", "twice", "once")}
    for folder in folders.values():
        folder.mkdir()
        (folder / "fan.yaml").write_text(TABLE)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folders["fanned"])
        dry = docmt(*TABLE_ARGS, "--dry-run")
    assert dry.code == 0, dry.err
    fanned = [shlex.split(line) for line in dry.out.strip().splitlines()]
    assert all(argv[:2] == ["docmt", "fit"] for argv in fanned)
    run_at_once({folders["fanned"]: [argv[1:] for argv in fanned],
                 folders["twice"]: [TABLE_ARGS, TABLE_ARGS], folders["once"]: [TABLE_ARGS]})
    (root / "commands.txt").write_text(dry.out)
    return folders


def archive(folder: Path) -> dict[str, object]:
    """What must be the same whoever ran the table (module docstring): per run, its files but those
    of PER_RUN, metrics without TIMING; the report, figures included; the weights of every stage in
    the cache."""
    results = folder / RESULTS / "fan"
    found: dict[str, object] = {}
    for path in sorted(results.rglob("*")):
        name = str(path.relative_to(results))
        if path.parent.parent.parent != results or not path.is_file() or path.name in PER_RUN:
            continue  # only the files of a run's own folder: <row>/seed<S>/<file>
        if path.name == "metrics.json":
            found[name] = {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith(TIMING)}
        else:
            found[name] = path.read_bytes()
    for path in results.iterdir():  # the report: table.md, table.csv, the figures
        if path.is_file():
            found[path.name] = path.read_bytes()
    for final in sorted((folder / "cache" / "stages").glob("*/final.ckpt")):
        weights = torch.load(final, map_location="cpu", weights_only=True)["state_dict"]
        found[f"stage {final.parent.name}"] = {k: v.tolist() for k, v in weights.items()}
    return found


def test_the_dry_run_commands_carry_where_and_how_each_run_is_written(folders):
    commands = (folders["fanned"].parent / "commands.txt").read_text().splitlines()
    assert commands == [f"docmt fit fan.yaml --row {row} --results '{RESULTS}' --seed 1 --profile tiny"
                        for row in ("sent", "doc")]


def test_docmt_table_collects_the_fanned_out_runs_without_training(folders, monkeypatch):
    from lightning_docmt.training import run

    def no_training(*args, **kwargs):
        raise AssertionError("docmt table trained a run that the fanned-out commands had written")

    monkeypatch.setattr(run, "fit_and_test", no_training)
    monkeypatch.chdir(folders["fanned"])
    collected = docmt(*TABLE_ARGS)
    assert collected.code == 0, collected.out[-3000:]
    report = (folders["fanned"] / RESULTS / "fan" / "table.md").read_text()
    assert "| sent | " in report and "| doc | " in report and "(n=1)" in report and "Not run" not in report


def test_a_table_run_by_processes_at_once_gives_the_archive_of_one_process(folders, monkeypatch):
    monkeypatch.chdir(folders["fanned"])
    assert docmt(*TABLE_ARGS).code == 0  # the fanned-out runs' report (collected, as above)
    once = archive(folders["once"])
    assert len([name for name in once if name.endswith("metrics.json")]) == 2 and "table.png" in once
    assert len([name for name in once if name.startswith("stage ")]) == 2  # sent, shared, and doc
    for other in ("fanned", "twice"):
        theirs = archive(folders[other])
        assert sorted(theirs) == sorted(once), other
        assert [name for name in once if theirs[name] != once[name]] == [], other


def test_a_shared_stage_is_trained_once_whichever_process_wanted_it_first(folders):
    for name in ("fanned", "twice"):
        printed = "".join(p.read_text() for p in folders[name].glob("process*.out"))
        assert printed.count("[docmt] stage 'sent' done:") == 1, name
        assert printed.count("[docmt] stage 'doc' done:") == 1, name
