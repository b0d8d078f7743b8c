"""The bad-input matrix: every command that reads user input, against every fault that applies to it.

The rule (docs/usage.md, "Bad input"): a fault in what the user gave (a file, a corpus, a config key,
a checkpoint) ends the command with exit status 2 and exactly one line on stderr, which names the file
(and line, where there is one) or the config key; and nothing is half-written: no output file, no run
directory, no cache entry. Each `Case` builds its input and says which culprit the line must name; the
test runs `docmt` in-process and checks the rule, and at the end of the module the outcomes are printed
as a Markdown table (`pytest -s tests/cli/test_fault_matrix.py`).

The cases that need a checkpoint or a run directory share one tiny fitted run (a few steps on
`synthetic:tiny`). A table whose one row is broken is no bad-input case: it records the row's failure,
finishes the other rows and exits with status 1 (the last test).
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import torch
import yaml

from lightning_docmt.data.synthetic import write_contrastive_suite
from tests.helpers.cli_run import CORPUS, FIT_SETTINGS, Outcome, docmt, read_json, run_dir_of, write_config
from tests.helpers.corpus_fixtures import random_documents, write_jsonl

COMMANDS = ("fit", "test", "translate", "contrastive", "table", "average", "stats", "prepare")
FAULTS = ("missing file", "misaligned corpus", "unreadable corpus", "malformed XML", "malformed JSONL",
          "unknown corpus prefix", "unknown config key", "wrong type", "empty test set",
          "malformed suite line", "checkpoint of another architecture", "older checkpoint format")
STEPS = "4"  # the shared run's training steps (and its one validation)
OTHER_ARCH = "zhang_doc"  # the architecture of the checkpoint that is not the run's
LINE_SHOWN = 220  # characters of a stderr line in the printed matrix


@dataclass(frozen=True)
class FittedRun:
    config: Path
    run_dir: Path
    checkpoint: Path


class Inputs:
    """What a case builds its command from: its own folder, and (when the case asks for it) the
    shared fitted run and checkpoints derived from it."""

    def __init__(self, folder: Path, request: pytest.FixtureRequest):
        self.dir = folder
        self._request = request

    @property
    def run(self) -> FittedRun:
        return self._request.getfixturevalue("fitted")

    def checkpoint(self, kind: str) -> Path:
        """A checkpoint next to the run's: `other_arch` (a model of OTHER_ARCH, its config and
        weights, the run's vocabularies), `bare_state` (`torch.save(model.state_dict())`, no Lightning
        wrapping), `no_config` (a Lightning checkpoint whose hyper-parameters lack the config)."""
        return self._request.getfixturevalue("derived_checkpoints")[kind]


Build = Callable[[Inputs], tuple[list[Any], str]]


@dataclass(frozen=True)
class Case:
    command: str
    fault: str
    detail: str
    build: Build  # -> (argv after `docmt`, the culprit the error line names)
    needs_run: bool = False
    also: str = ""  # a further part of the line (a did-you-mean hint, the key)

    @property
    def id(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", f"{self.command} {self.fault} {self.detail}".lower()).strip("-")


# ------------------------------------------------------------------------- the faulty inputs


def misaligned_text(d: Path) -> tuple[str, str]:
    """(spec, culprit) of a `text:` corpus whose target file ends a line early."""
    src, tgt, ids = d / "src.txt", d / "tgt.txt", d / "ids.txt"
    src.write_text("a b\nc d\ne f\n")
    tgt.write_text("A B\nC D\n")
    ids.write_text("d1\nd1\nd2\n")
    return f"text:{src},{tgt},{ids}", f"{tgt}:3"


def undecodable_jsonl(d: Path) -> tuple[str, str]:
    path = d / "latin1.jsonl"
    good = json.dumps({"doc_id": "a", "src": ["x"], "tgt": ["y"]})
    path.write_bytes(good.encode() + b"\n" + '{"doc_id": "b", "src": ["caf\xe9"], "tgt": ["y"]}\n'.encode("latin-1"))
    return f"jsonl:{path}", f"{path}:2"


def malformed_jsonl(d: Path) -> tuple[str, str]:
    path = d / "bad.jsonl"
    path.write_text(json.dumps({"doc_id": "a", "src": ["x"], "tgt": ["y"]}) + '\n{"doc_id": "b", "src": [\n')
    return f"jsonl:{path}", f"{path}:2"


def malformed_xml(d: Path) -> tuple[str, str]:
    """An IWSLT pair whose source `<seg>` on line 4 is never closed."""
    src, tgt = d / "ted.en.xml", d / "ted.fr.xml"
    src.write_text('<mteval>\n<doc docid="1">\n<seg id="1"> one </seg>\n<seg id="2"> two\n'
                   '<seg id="3"> three </seg>\n</doc>\n</mteval>\n')
    tgt.write_text('<mteval>\n<doc docid="1">\n<seg id="1"> un </seg>\n<seg id="2"> deux </seg>\n'
                   '<seg id="3"> trois </seg>\n</doc>\n</mteval>\n')
    return f"iwslt:{src},{tgt}", f"{src}:4"


def without_test_split(d: Path) -> tuple[str, str]:
    """A corpus of train and valid documents only."""
    path = d / "no_test.jsonl"
    return write_jsonl(path, random_documents(6, splits=("train", "train", "valid"))), "data.corpus"


def config_with(d: Path, body: str, name: str = "run.yaml") -> tuple[Path, int]:
    """A run config with `body` appended, and the line of `body`'s last line."""
    config = write_config(d / name, FIT_SETTINGS + body)
    return config, len(config.read_text().splitlines())


def suite_with_line_2(d: Path, edit: Callable[[dict], str]) -> Path:
    """The synthetic suite's first two examples, the second one replaced by `edit(example)`."""
    full = d / "full_suite.jsonl"
    write_contrastive_suite("tiny", full)
    first, second = full.read_text(encoding="utf-8").splitlines()[:2]
    suite = d / "suite.jsonl"
    suite.write_text(f"{first}\n{edit(json.loads(second))}\n", encoding="utf-8")
    return suite


def copied_run(d: Path, run: FittedRun, edit: Callable[[str], str]) -> Path:
    """A copy of the run's folder (config.yaml, run.json) whose config text is `edit`ed."""
    copy = d / "run_copy"
    copy.mkdir()
    shutil.copy(run.run_dir / "run.json", copy / "run.json")
    (copy / "config.yaml").write_text(edit((run.run_dir / "config.yaml").read_text()))
    return copy


def text_input(d: Path) -> Path:
    path = d / "doc.txt"
    path.write_text("the cat .\n")
    return path


def translate(ckpt: Path | str, source: Path | str, d: Path) -> list[Any]:
    return ["translate", "--ckpt", ckpt, "--input", source, "--output", d / "out.txt"]


def contrastive(ckpt: Path | str, suite: Path | str) -> list[Any]:
    return ["contrastive", "--ckpt", ckpt, "--suite", suite]


def table_file(d: Path, rows: list[dict], **extra: Any) -> Path:
    path = d / "table.yaml"
    spec = {"id": "faults", "title": "bad input", "metrics": ["test/bleu"],
            "base": [f"data.corpus={CORPUS}", f"data.cache_dir={d / 'cache'}", "profile=tiny"],
            "rows": rows, **extra}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def stage_from(ckpt: Path | str) -> list[str]:
    """Overrides: one stage, initialised from `ckpt`."""
    return ["train.schedule=[more]",
            f"train.stages.more={{arch: transformer, max_steps: 2, val_every_steps: 2, init_from: {ckpt}}}"]


# ------------------------------------------------------------------------- the cases


def _corpus_case(command: str, fault: str, detail: str, make: Callable[[Path], tuple[str, str]],
                 also: str = "") -> Case:
    """A corpus fault for `stats SPEC`, or for `prepare`/`fit` of a config whose data.corpus is SPEC."""

    def build(i: Inputs) -> tuple[list[Any], str]:
        spec, culprit = make(i.dir)
        if command == "stats":
            return ["stats", spec], culprit
        return [command, config_with(i.dir, "")[0], "--profile", "tiny", f"data.corpus={spec}"], culprit

    return Case(command, fault, detail, build, also=also)


def _missing_corpus(d: Path) -> tuple[str, str]:
    return f"jsonl:{d / 'absent.jsonl'}", str(d / "absent.jsonl")


def _unknown_prefix(d: Path) -> tuple[str, str]:
    return "jsnol:corpus.jsonl", "jsnol:corpus.jsonl"


CORPUS_FAULTS = {  # fault: (detail, input[, a further part of the line])
    "missing file": ("corpus file", _missing_corpus),
    "misaligned corpus": ("text: target ends early", misaligned_text),
    "unreadable corpus": ("not UTF-8", undecodable_jsonl),
    "malformed XML": ("iwslt: unclosed seg", malformed_xml),
    "malformed JSONL": ("jsonl: truncated line", malformed_jsonl),
    "unknown corpus prefix": ("misspelt prefix", _unknown_prefix, "did you mean jsonl?"),
}
CORPUS_CASES = {"stats": list(CORPUS_FAULTS),
                "prepare": ["misaligned corpus", "malformed XML", "unknown corpus prefix"],
                "fit": ["missing file", "malformed JSONL"]}


def _config_file_case(command: str, fault: str, body: str, also: str) -> Case:
    """`prepare`/`fit` of a run config whose last line (`body`'s) is the fault."""

    def build(i: Inputs) -> tuple[list[Any], str]:
        config, line = config_with(i.dir, body)
        return [command, config, "--profile", "tiny"], f"{config}:{line}"

    return Case(command, fault, "in the file", build, also=also)


def _missing(command: str, detail: str, name: str, argv: Callable[[Inputs, Path], list[Any]], *,
             needs_run: bool = True) -> Case:
    """`argv(inputs, path)` names `path`, a file `name` that does not exist."""

    def build(i: Inputs) -> tuple[list[Any], str]:
        return argv(i, i.dir / name), str(i.dir / name)

    return Case(command, "missing file", detail, build, needs_run=needs_run)


def _with_checkpoint(command: str, fault: str, kind: str, detail: str, also: str = "") -> Case:
    """A command reading the derived checkpoint `kind` (`Inputs.checkpoint`) where the run's goes."""

    def build(i: Inputs) -> tuple[list[Any], str]:
        ckpt, run = i.checkpoint(kind), i.run
        argv = {"fit": lambda: ["fit", run.config, "--profile", "tiny", *stage_from(ckpt)],
                "test": lambda: ["test", run.run_dir, "--ckpt", ckpt],
                "translate": lambda: translate(ckpt, text_input(i.dir), i.dir),
                "contrastive": lambda: contrastive(ckpt, i.dir / "never_read.jsonl"),
                "average": lambda: ["average", run.checkpoint, ckpt, "--out", i.dir / "avg.ckpt"]}[command]()
        return argv, str(ckpt)

    return Case(command, fault, detail, build, needs_run=True, also=also)


def _fit_override(i: Inputs) -> tuple[list[Any], str]:
    return ["fit", config_with(i.dir, "")[0], "model.d_modle=8"], "key 'model.d_modle'"


def _fit_wrong_type(i: Inputs) -> tuple[list[Any], str]:
    return ["fit", config_with(i.dir, "")[0], "train.max_steps=many"], "key 'train.max_steps'"


def _fit_without_test_split(i: Inputs) -> tuple[list[Any], str]:
    spec, culprit = without_test_split(i.dir)
    return ["fit", config_with(i.dir, "")[0], "--profile", "tiny", f"data.corpus={spec}"], culprit


def _prepare_without_test_split(i: Inputs) -> tuple[list[Any], str]:
    spec, culprit = without_test_split(i.dir)
    return ["prepare", config_with(i.dir, "")[0], f"data.corpus={spec}"], culprit


def _fit_missing_init(i: Inputs) -> tuple[list[Any], str]:
    return (["fit", config_with(i.dir, "")[0], "--profile", "tiny", *stage_from(i.dir / "absent.ckpt")],
            "key 'train.stages.more.init_from'")


def _test_config_wrong_type(i: Inputs) -> tuple[list[Any], str]:
    run = copied_run(i.dir, i.run, lambda text: text.replace("  d_model: ", "  d_model: wide #", 1))
    return ["test", run], f"{run / 'config.yaml'}:"


def _test_without_test_split(i: Inputs) -> tuple[list[Any], str]:
    spec, culprit = without_test_split(i.dir)
    run = copied_run(i.dir, i.run, lambda text: text.replace(f"corpus: {CORPUS}", f"corpus: {spec}", 1))
    return ["test", run], culprit


def _translate_malformed_jsonl(i: Inputs) -> tuple[list[Any], str]:
    spec, culprit = malformed_jsonl(i.dir)
    return translate(i.run.checkpoint, spec.removeprefix("jsonl:"), i.dir), culprit


def _translate_blank_input(i: Inputs) -> tuple[list[Any], str]:
    blank = i.dir / "blank.txt"
    blank.write_text("\n\n")
    return translate(i.run.checkpoint, blank, i.dir), str(blank)


def _suite_case(detail: str, edit: Callable[[dict], str], also: str) -> Case:
    def build(i: Inputs) -> tuple[list[Any], str]:
        suite = suite_with_line_2(i.dir, edit)
        return contrastive(i.run.checkpoint, suite), f"{suite}:2"

    return Case("contrastive", "malformed suite line", detail, build, needs_run=True, also=also)


def _empty_suite(i: Inputs) -> tuple[list[Any], str]:
    empty = i.dir / "empty.jsonl"
    empty.write_text("\n")
    return contrastive(i.run.checkpoint, empty), str(empty)


def _table_case(fault: str, detail: str, rows: list[dict], argv: list[str], culprit: str, also: str = "",
                **extra: Any) -> Case:
    """`docmt table` of a table file (`table_file`) with `rows`; `culprit` '{table}' is the file."""

    def build(i: Inputs) -> tuple[list[Any], str]:
        table = table_file(i.dir, rows, **extra)
        return ["table", table, "--results", i.dir / "results", *argv], culprit.format(table=table)

    return Case("table", fault, detail, build, also=also)


CASES: list[Case] = [
    *[_corpus_case(command, fault, *CORPUS_FAULTS[fault]) for command, faults in CORPUS_CASES.items()
      for fault in faults],
    _missing("prepare", "config file", "absent.yaml", lambda i, p: ["prepare", p], needs_run=False),
    _config_file_case("prepare", "unknown config key", "vocab:\n  sise: 100\n", "did you mean 'size'"),
    _config_file_case("prepare", "wrong type", "model:\n  d_model: wide\n", "key 'model.d_model'"),
    Case("prepare", "empty test set", "no test documents", _prepare_without_test_split),
    _missing("fit", "config file", "absent.yaml", lambda i, p: ["fit", p], needs_run=False),
    _config_file_case("fit", "unknown config key", "  max_stepz: 3\n", "did you mean 'max_steps'"),
    Case("fit", "unknown config key", "command line", _fit_override, also="did you mean 'd_model'"),
    Case("fit", "wrong type", "command line", _fit_wrong_type, also="expected int"),
    Case("fit", "empty test set", "no test documents", _fit_without_test_split),
    Case("fit", "missing file", "init_from checkpoint", _fit_missing_init),
    _with_checkpoint("fit", "checkpoint of another architecture", "other_arch", "init_from", "unexpected keys"),
    _with_checkpoint("fit", "older checkpoint format", "bare_state", "init_from a bare state dict", "no state_dict"),
    _missing("test", "run directory", "absent_run", lambda i, p: ["test", p], needs_run=False),
    _missing("test", "--ckpt", "absent.ckpt", lambda i, p: ["test", i.run.run_dir, "--ckpt", p]),
    _with_checkpoint("test", "checkpoint of another architecture", "other_arch", "--ckpt", "unexpected keys"),
    _with_checkpoint("test", "older checkpoint format", "bare_state", "--ckpt a bare state dict", "no state_dict"),
    Case("test", "wrong type", "in the run's config.yaml", _test_config_wrong_type, needs_run=True,
         also="key 'model.d_model'"),
    Case("test", "empty test set", "the run's corpus has none", _test_without_test_split, needs_run=True),
    _missing("translate", "--ckpt", "absent.ckpt", lambda i, p: translate(p, text_input(i.dir), i.dir),
             needs_run=False),
    _missing("translate", "--input", "absent.txt", lambda i, p: translate(i.run.checkpoint, p, i.dir)),
    Case("translate", "malformed JSONL", "--input", _translate_malformed_jsonl, needs_run=True),
    Case("translate", "empty test set", "an input without sentences", _translate_blank_input, needs_run=True,
         also="no sentences"),
    _with_checkpoint("translate", "older checkpoint format", "no_config", "hyper-parameters without the config",
                     "'config'"),
    _suite_case("invalid JSON", lambda ex: json.dumps(ex)[:-5], "invalid JSON"),
    _suite_case("one candidate", lambda ex: json.dumps({**ex, "candidates": ex["candidates"][:1]}), "'candidates'"),
    Case("contrastive", "empty test set", "a suite without examples", _empty_suite, needs_run=True,
         also="no examples"),
    _with_checkpoint("contrastive", "older checkpoint format", "no_config", "hyper-parameters without the config",
                     "'config'"),
    _missing("average", "a checkpoint", "absent.ckpt",
             lambda i, p: ["average", i.run.checkpoint, p, "--out", i.dir / "avg.ckpt"]),
    _with_checkpoint("average", "checkpoint of another architecture", "other_arch", "two architectures"),
    _missing("table", "table file", "absent.yaml", lambda i, p: ["table", p], needs_run=False),
    _table_case("unknown config key", "a table key", [{"name": "a", "overrides": []}], [], "{table}",
                also="did you mean 'title'", titel="x"),
    _table_case("unknown config key", "the only row's override", [{"name": "a", "overrides": ["model.d_modle=8"]}],
                [], "{table}:", also="did you mean 'd_model'"),
    _table_case("wrong type", "a command-line override", [{"name": "a", "overrides": []}], ["train.max_steps=many"],
                "key 'train.max_steps'"),
]


# ------------------------------------------------------------------------- fixtures and the tests


@pytest.fixture(scope="module")
def fitted(workdir: Path) -> FittedRun:
    """The one tiny fitted run of the module (a `transformer`, STEPS steps)."""
    config = write_config(workdir / "run.yaml", FIT_SETTINGS.replace("20", STEPS))
    run_dir = run_dir_of(docmt("fit", config, "--profile", "tiny"))
    return FittedRun(config, run_dir, Path(read_json(run_dir / "run.json")["checkpoint"]))


@pytest.fixture(scope="module")
def derived_checkpoints(fitted: FittedRun, workdir: Path) -> dict[str, Path]:
    """Checkpoints made from the run's (`Inputs.checkpoint`)."""
    from omegaconf import OmegaConf

    from lightning_docmt.config.composition import compose
    from lightning_docmt.config.registry import build_model

    folder = workdir / "derived"
    folder.mkdir()
    original = torch.load(fitted.checkpoint, weights_only=True)
    hparams = original["hyper_parameters"]
    other_model = compose(None, [f"model.arch={OTHER_ARCH}", "context.prev_sentences=1"], profile="tiny").model
    model = build_model(other_model, hparams["src_vocab_size"], hparams["tgt_vocab_size"])
    config = {**hparams["config"], "model": OmegaConf.to_container(other_model)}
    other = {**original, "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
             "hyper_parameters": {**hparams, "config": config}, "global_step": original["global_step"] + 1}
    made = {"other_arch": other,
            "bare_state": {k.removeprefix("model."): v for k, v in original["state_dict"].items()},
            "no_config": {**original, "hyper_parameters": {k: v for k, v in hparams.items() if k != "config"}}}
    paths = {}
    for kind, checkpoint in made.items():
        paths[kind] = folder / f"{kind}.ckpt"
        torch.save(checkpoint, paths[kind])
    return paths


@pytest.fixture(scope="module")
def matrix(workdir: Path) -> Iterator[list[tuple[Case, Outcome, str]]]:
    """Collects (case, outcome, test name); prints the matrix as a Markdown table at the module's end."""
    rows: list[tuple[Case, Outcome, str]] = []
    yield rows
    print(f"\n\nBad-input matrix ({len(rows)} cases; $TMP: the module's folder)\n")
    print("| fault | command | exit | stderr line | test |")
    print("|---|---|---|---|---|")
    for case, outcome, name in sorted(rows, key=lambda r: (FAULTS.index(r[0].fault), COMMANDS.index(r[0].command))):
        line = " / ".join(outcome.err.strip().splitlines()).replace(str(workdir), "$TMP")
        line = ((line[:LINE_SHOWN] + " ...") if len(line) > LINE_SHOWN else line).replace("|", "\\|")
        print(f"| {case.fault} | {case.command} | {outcome.code} | `{line}` | {name} |")


def file_tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=[pytest.mark.fit] if c.needs_run else [])
                                  for c in CASES])
def test_bad_input_exits_2_with_one_line_naming_the_culprit(case: Case, workdir: Path, matrix,
                                                            request: pytest.FixtureRequest):
    folder = workdir / "cases" / case.id
    folder.mkdir(parents=True)
    argv, culprit = case.build(Inputs(folder, request))
    before = file_tree(workdir)
    outcome = docmt(*argv)
    matrix.append((case, outcome, request.node.name))
    lines = outcome.err.strip().splitlines()
    assert outcome.code == 2, outcome.err[-3000:]
    assert len(lines) == 1, outcome.err[-3000:]
    assert lines[0].startswith(f"docmt {case.command}: error: ") and culprit in lines[0], lines[0]
    assert case.also in lines[0], lines[0]
    written = sorted(set(file_tree(workdir)) - set(before))
    assert not written, written  # nothing written: no output, run directory or cache entry


def test_every_command_meets_at_least_two_faults():
    assert {c.fault for c in CASES} <= set(FAULTS)
    assert len({c.id for c in CASES}) == len(CASES)
    per_command = Counter(c.command for c in CASES)
    assert set(per_command) == set(COMMANDS)
    assert min(per_command.values()) >= 2, per_command


@pytest.mark.fit
def test_a_table_with_broken_rows_records_their_failures_and_finishes_the_others(fitted: FittedRun, workdir: Path):
    """Row `typo` does not compose (a misspelt key), row `no_init` starts from a checkpoint that is
    not there; row `good` is the shared run's config, whose stage the cache hands over untrained."""
    folder = workdir / "broken_rows"
    folder.mkdir()
    table = folder / "table.yaml"
    table.write_text(yaml.safe_dump({
        "id": "broken_rows", "title": "one good row, two broken ones", "metrics": ["test/bleu"],
        "base": [f"data.corpus={CORPUS}", f"data.cache_dir={workdir / 'cache'}", "profile=tiny",
                 f"train.max_steps={STEPS}", f"train.val_every_steps={STEPS}"],
        "rows": [{"name": "good", "overrides": []},
                 {"name": "typo", "overrides": ["model.d_modle=8"]},
                 {"name": "no_init", "overrides": stage_from(folder / "absent.ckpt")}]}, sort_keys=False))
    results = folder / "results" / "broken_rows"
    outcome = docmt("table", table, "--results", folder / "results")
    assert outcome.code == 1, outcome.err[-3000:]
    assert "reusing" in outcome.out  # the good row trained nothing
    (good,) = results.glob("good/seed*/metrics.json")
    assert "test/bleu" in read_json(good)
    (error,) = results.glob("no_init/seed*/error.json")
    assert "train.stages.more.init_from" in read_json(error)["error"]
    assert not (results / "typo").exists()
    report = (results / "table.md").read_text()
    main_table = report.split("\n\n")[2].splitlines()  # title, explanation, the table
    status = {cells[1].strip(): cells[-2].strip() for cells in (line.split("|") for line in main_table[2:])}
    assert status == {"good": "ok", "typo": "failed", "no_init": "failed"}
    assert "- `typo` (every seed): DocMTInputError: " in report and "- `no_init` seed " in report
    failed = [line for line in outcome.out.splitlines() if " FAILED: " in line]
    assert len(failed) == 2 and failed[0].startswith("row typo FAILED: ") and "did you mean 'd_model'" in failed[0]
    assert failed[1].startswith("row no_init seed ")
