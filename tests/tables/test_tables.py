"""Table files and the table runner, with a fake training function (no model is trained)."""

from __future__ import annotations

import csv
import json
import logging
import shlex
import statistics
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from lightning_docmt import claims
from lightning_docmt.config.composition import compose
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.evaluation.context_usage import METRIC_MEANINGS
from lightning_docmt.locks import OwnerLock
from lightning_docmt.tables.dashboard import log_table_to_wandb
from lightning_docmt.tables.report import context_columns_legend, run_provenance
from lightning_docmt.tables.runner import run_table
from lightning_docmt.tables.spec import compose_file, compose_row, load_table
from lightning_docmt.tables.summaries import DONE, FAILED, FINISHED, RunRecord, summarize
from tests.helpers.cli_run import docmt
from tests.helpers.stand_in_archs import CTX

TABLE = {
    "id": "unit.t1",
    "title": "Unit table",
    "metrics": ["test/bleu", "test/chrf"],
    "base": [f"model.arch={CTX}", "profile=tiny"],
    "seeds": [1, 2],
    "notes": "table note",
    "rows": [
        {"name": "small", "overrides": ["model.context_layers=1"], "paper": {"test/bleu": 10.0}},
        {"name": "large", "overrides": ["model.context_layers=3"],
         "paper": {"test/bleu": 20.0, "test/chrf": 40.0}, "notes": "row note"},
        {"name": "broken", "overrides": ["model.context_layers=2"]},
    ],
}
CONTEXT_LAYERS = {"small": 1, "large": 3}


def expected_metrics(row: str, seed: int) -> dict[str, float]:
    layers = CONTEXT_LAYERS[row]
    return {"test/bleu": 10.0 * layers + seed, "test/chrf": 30.0 + layers * seed / 4}


class FakeTraining:
    """Deterministic metrics from the config; the `broken` row raises after printing."""

    def __init__(self):
        self.calls: Counter[tuple[str, int]] = Counter()

    def __call__(self, cfg, run_dir: Path) -> dict:
        row, seed = cfg.logging.name, cfg.train.seed
        self.calls[(row, seed)] += 1
        assert run_dir.is_dir()
        print(f"training {row} seed {seed}")
        logging.getLogger("fake.trainer").warning("a logging record from %s", row)
        if row == "broken":
            raise RuntimeError("boom")
        assert cfg.model.context_layers == CONTEXT_LAYERS[row]
        return {**expected_metrics(row, seed), "test/bleu_signature": "nrefs:1|tok:13a"}


@pytest.fixture
def table_file(tmp_path, stand_in_archs) -> Path:
    path = tmp_path / "unit_t1.yaml"
    path.write_text(yaml.safe_dump(TABLE, sort_keys=False))
    return path


def test_runs_every_row_and_seed_and_a_failure_does_not_stop_the_others(table_file, tmp_path):
    fake = FakeTraining()
    outcome = run_table(table_file, run_row=fake, results_dir=tmp_path / "results")
    assert fake.calls == {(row, seed): 1 for row in ("small", "large", "broken") for seed in (1, 2)}
    status = {(r.row, r.seed): r.status for r in outcome.records}
    assert status[("broken", 1)] == status[("broken", 2)] == "failed"
    assert {status[(row, s)] for row in ("small", "large") for s in (1, 2)} == {"done"}
    for seed in (1, 2):
        run_dir = tmp_path / "results" / "unit.t1" / "small" / f"seed{seed}"
        metrics = json.loads((run_dir / "metrics.json").read_text())
        saved = compose(run_dir / "config.yaml", [])  # the run can be repeated from its folder
        assert (saved.logging.name, saved.train.seed) == ("small", seed)
        assert {k: metrics[k] for k in ("test/bleu", "test/chrf")} == expected_metrics("small", seed)
        assert 0 <= metrics["time/run_s"] < 60  # the run's wall time, recorded beside its scores
        last_line = (run_dir / "log.txt").read_text().strip().splitlines()[-1]
        assert last_line.endswith(f": test/bleu {10.0 + seed:.2f}, test/chrf {30.0 + seed / 4:.2f} "
                                  f"(every metric: {run_dir / 'metrics.json'})")
        broken_dir = tmp_path / "results" / "unit.t1" / "broken" / f"seed{seed}"
        assert not (broken_dir / "metrics.json").exists()
        error = json.loads((broken_dir / "error.json").read_text())
        assert error["error"] == "RuntimeError: boom" and error["log"] == str(broken_dir / "log.txt")
        log_text = (broken_dir / "log.txt").read_text()
        assert f"training broken seed {seed}" in log_text
        assert "a logging record from broken" in log_text
        assert "Traceback" in log_text and "RuntimeError: boom" in log_text
    failed = [r for r in outcome.records if r.status == "failed"]
    assert all(r.log_path and r.log_path.is_file() and r.error == "RuntimeError: boom"
               for r in failed)


def test_rerun_skips_finished_runs_and_retries_failed_ones(table_file, tmp_path):
    fake = FakeTraining()
    run_table(table_file, run_row=fake, results_dir=tmp_path / "results")
    fake.calls.clear()
    outcome = run_table(table_file, run_row=fake, results_dir=tmp_path / "results")
    assert fake.calls == {("broken", 1): 1, ("broken", 2): 1}
    skipped = {(r.row, r.seed): r.metrics for r in outcome.records if r.status == "finished"}
    assert skipped[("large", 2)]["test/bleu"] == expected_metrics("large", 2)["test/bleu"]
    assert len(skipped) == 4


def test_table_markdown_and_csv_hold_mean_std_per_seed_values_and_paper_numbers(table_file, tmp_path):
    outcome = run_table(table_file, run_row=FakeTraining(), results_dir=tmp_path / "results")
    out = tmp_path / "results" / "unit.t1"
    assert outcome.outputs == {"md": out / "table.md", "csv": out / "table.csv",
                               "png": out / "table.png", "curves_png": out / "curves.png"}
    rows = {(r["row"], r["metric"]): r for r in csv.DictReader((out / "table.csv").open())}
    markdown = (out / "table.md").read_text()
    for row in ("small", "large"):
        for metric in TABLE["metrics"]:
            values = [expected_metrics(row, seed)[metric] for seed in (1, 2)]
            mean, std = statistics.mean(values), statistics.stdev(values)
            paper = next(r for r in TABLE["rows"] if r["name"] == row)["paper"].get(metric)
            line = rows[(row, metric)]
            assert int(line["n"]) == 2 and line["status"] == "ok"
            assert float(line["mean"]) == pytest.approx(mean)
            assert float(line["std"]) == pytest.approx(std)
            assert line["values"] == f"1:{values[0]!r};2:{values[1]!r}"
            assert line["delta_base"] == line["paper_delta_base"] == ""  # no baseline row
            assert line["paper"] == ("" if paper is None else repr(paper))
            row_line = next(text for text in markdown.splitlines() if text.startswith(f"| {row} |"))
            assert f"{mean:.2f} ± {std:.2f} (n=2) | {'n/a' if paper is None else f'{paper:.2f}'} |" in row_line
    assert "Δ" not in markdown.split("\n\n")[1]  # no baseline: no change column, nor ours - paper
    broken = [text for text in markdown.splitlines() if text.startswith("| broken |")]
    assert broken and broken[0].endswith("| failed |")
    assert rows[("broken", "test/bleu")]["n"] == "0" and rows[("broken", "test/bleu")]["mean"] == ""
    broken_log = out / "broken" / "seed1" / "log.txt"
    assert f"- `broken` seed 1: RuntimeError: boom (log: `{broken_log}`)" in markdown
    assert "| small | 11.00 | 12.00 |\n" in markdown  # test/bleu per seed; no baseline, no p-values
    assert "nrefs:1|tok:13a" in markdown and "table note" in markdown and "row note" in markdown
    assert "Profile: tiny. BLEU, chrF, d-BLEU and METEOR are case-sensitive (cased)." in markdown
    for png in ("table.png", "curves.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_context_columns_are_explained_under_the_table_and_only_when_shown(table_file, tmp_path):
    """`random_ctx/cxmi` reads easily as "the CXMI of random context": every context column says
    what it measures under the table (evaluation/context_usage.py METRIC_MEANINGS)."""
    shown = ["cxmi", "random_ctx/cxmi", "random_ctx/bleu_delta"]
    rows = [{"name": r["name"], "overrides": r["overrides"]} for r in TABLE["rows"][:2]]
    spec = {**TABLE, "id": "unit.ctx", "metrics": ["test/bleu", *shown], "rows": rows}
    context_file = tmp_path / "unit_ctx.yaml"
    context_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    for path in (table_file, context_file):
        run_table(path, run_row=FakeTraining(), results_dir=tmp_path / "results")
    plain = (tmp_path / "results" / "unit.t1" / "table.md").read_text()
    with_context = (tmp_path / "results" / "unit.ctx" / "table.md").read_text()
    assert "Context columns" not in plain
    legend = with_context.split("Context columns (on the test split):\n\n", 1)[1].split("\n\n", 1)[0]
    assert legend.splitlines() == [f"- `{m}`: {METRIC_MEANINGS[m]}" for m in shown]
    assert "another collection" in METRIC_MEANINGS["random_ctx/cxmi"]


def test_a_table_reporting_on_valid_explains_its_valid_context_columns():
    """`evaluate: valid_report` tables name their columns `valid/cxmi`, ...: explained as the bare
    names are, on the valid split; scores are not context columns."""
    legend = context_columns_legend(["valid/bleu", "valid/cxmi", "valid/random_ctx/bleu_delta", "initial_damage"])
    assert legend[:3] == ["", "Context columns (on the valid split):", ""]
    assert legend[3:] == [f"- `valid/cxmi`: {METRIC_MEANINGS['cxmi']}",
                          f"- `valid/random_ctx/bleu_delta`: {METRIC_MEANINGS['random_ctx/bleu_delta']}",
                          f"- `initial_damage`: {METRIC_MEANINGS['initial_damage']}"]
    assert context_columns_legend(["valid/bleu", "valid/chrf"]) == []


def test_run_provenance_groups_runs_by_precision_device_torch_and_code(tmp_path):
    env = {"env/precision": "bf16-mixed", "env/device": "cpu", "env/torch": "2.13.0+cpu",
           "env/code": "abc", "env/threads": 1.0}
    records = [RunRecord("a", 1, tmp_path, DONE, {"test/bleu": 1.0, **env}),
               RunRecord("b", 1, tmp_path, DONE, {"test/bleu": 2.0, **env}),
               RunRecord("a", 2, tmp_path, DONE, {**env, "env/precision": "32-true"}),
               RunRecord("c", 1, tmp_path, DONE, {"test/bleu": 3.0}),  # recorded nothing: left out
               RunRecord("c", 2, tmp_path, DONE, {**env, "env/cpu": "AMD EPYC 7B13"})]  # its CPU too
    assert run_provenance(records) == [
        "- precision 32-true, device cpu, torch 2.13.0+cpu, code abc: 1 run (a/seed2)",
        "- precision bf16-mixed, device cpu, torch 2.13.0+cpu, code abc: 2 runs (a/seed1, b/seed1)",
        "- precision bf16-mixed, device cpu, torch 2.13.0+cpu, code abc, cpu AMD EPYC 7B13: 1 run (c/seed2)"]
    assert run_provenance(records[3:4]) == []


def test_rows_run_separately_fill_one_table(table_file, tmp_path):
    fake = FakeTraining()
    run_table(table_file, rows="small", seeds=[1], run_row=fake, results_dir=tmp_path / "r")
    outcome = run_table(table_file, rows=["large"], seeds=[1], run_row=fake,
                        results_dir=tmp_path / "r")
    assert fake.calls == {("small", 1): 1, ("large", 1): 1}
    markdown = outcome.outputs["md"].read_text()
    small = expected_metrics("small", 1)["test/bleu"]
    assert f"| small | {small:.2f} (n=1) |" in markdown
    assert "| broken |" not in markdown and "Not run: `broken`." in markdown  # named once, not a row of n/a


def test_dry_run_prints_one_fit_command_per_run_and_runs_nothing(table_file, tmp_path):
    """Each command carries every option that decides where its run is written and what it trains."""
    outcome = run_table(table_file, rows="small,large", seeds=[3], profile="tiny",
                        cli_overrides=["data.corpus=jsonl:my corpus.jsonl"], device="cpu",
                        results_dir=tmp_path / "my results", dry_run=True)
    assert outcome.commands == [
        f"docmt fit {table_file} --row {row} --results '{tmp_path / 'my results'}' --seed 3 --profile tiny "
        "--device cpu 'data.corpus=jsonl:my corpus.jsonl'" for row in ("small", "large")]
    assert shlex.split(outcome.commands[0])[-1] == "data.corpus=jsonl:my corpus.jsonl"
    assert not (tmp_path / "my results").exists() and outcome.records == []


def test_dry_run_without_seeds_leaves_the_seed_to_the_config(table_file, tmp_path):
    spec = dict(TABLE)
    del spec["seeds"]
    table_file.write_text(yaml.safe_dump(spec))
    outcome = run_table(table_file, rows="small", dry_run=True)
    assert outcome.commands == [f"docmt fit {table_file} --row small --results results"]


def test_a_finished_run_of_another_config_is_an_error_before_anything_runs(table_file, tmp_path):
    fake = FakeTraining()
    run_table(table_file, rows="small", seeds=[1], run_row=fake, results_dir=tmp_path / "r")
    fake.calls.clear()
    with pytest.raises(DocMTInputError) as err:
        run_table(table_file, rows="small,large", seeds=[1], cli_overrides=["model.d_model=48"],
                  run_row=fake, results_dir=tmp_path / "r")
    assert "model.d_model" in str(err.value) and str(tmp_path / "r" / "unit.t1" / "small") in \
        str(err.value)
    assert not fake.calls
    # Logging and trainer settings do not change the numbers: the finished run is reused.
    run_table(table_file, rows="small", seeds=[1], run_row=fake, results_dir=tmp_path / "r",
              cli_overrides=["logging.project=other", "trainer.enable_progress_bar=true"])
    assert not fake.calls


def test_an_option_added_since_a_finished_run_does_not_orphan_it_but_a_removed_one_does(table_file,
                                                                                      tmp_path):
    """A key the saved config lacks (an option the code gained after the run) is not a difference
    while the table leaves it at its default in code; set to anything else, it is (the run was made
    without it); a key the code no longer composes is a difference too."""
    fake = FakeTraining()
    run_table(table_file, rows="small", seeds=[1], run_row=fake, results_dir=tmp_path / "r")
    saved = tmp_path / "r" / "unit.t1" / "small" / "seed1" / "config.yaml"
    config = yaml.safe_load(saved.read_text())
    d_model = config["model"]["d_model"]
    assert config["train"]["optim"]["label_smoothing"] == 0.1 and d_model != 512  # the defaults in code
    del config["train"]["optim"]["label_smoothing"], config["model"]["d_model"]
    saved.write_text(yaml.safe_dump(config))
    fake.calls.clear()
    with pytest.raises(DocMTInputError, match=rf"model.d_model \(512 -> {d_model}\)"):
        run_table(table_file, rows="small", seeds=[1], run_row=fake, results_dir=tmp_path / "r")
    config["model"]["d_model"] = d_model  # only label_smoothing missing, at its default
    saved.write_text(yaml.safe_dump(config))
    run_table(table_file, rows="small", seeds=[1], run_row=fake, results_dir=tmp_path / "r")
    assert not fake.calls
    config["model"]["an_option_since_removed"] = 3
    saved.write_text(yaml.safe_dump(config))
    with pytest.raises(DocMTInputError, match=r"model.an_option_since_removed \(3 -> '<absent>'\)"):
        run_table(table_file, rows="small", seeds=[1], run_row=fake, results_dir=tmp_path / "r")
    assert not fake.calls


def test_the_number_of_documents_per_batch_matters_only_in_document_order(table_file, tmp_path):
    """`data.max_documents` is inert in a run without document-order batches (`inert_keys`): a
    finished run is reused whatever it is set to. A document-order run with another value is
    another config."""
    fake = FakeTraining()
    run_table(table_file, rows="small", seeds=[1], run_row=fake, results_dir=tmp_path / "r")
    fake.calls.clear()
    run_table(table_file, rows="small", seeds=[1], run_row=fake, results_dir=tmp_path / "r",
              cli_overrides=["data.max_documents=7"])
    assert not fake.calls
    ordered = ["data.document_order=true"]
    run_table(table_file, rows="small", seeds=[1], run_row=fake, results_dir=tmp_path / "o",
              cli_overrides=ordered)
    with pytest.raises(DocMTInputError, match=r"data.max_documents \(128 -> 7\)"):
        run_table(table_file, rows="small", seeds=[1], run_row=fake, results_dir=tmp_path / "o",
                  cli_overrides=[*ordered, "data.max_documents=7"])


def test_fit_of_a_row_with_overrides_never_returns_the_finished_run_of_another_config(table_file,
                                                                                       tmp_path):
    """`docmt fit TABLE --row R key=value` writes where `docmt table` looks; a finished run there
    whose config differs (here another corpus) is an error, not that run's numbers."""
    fake = FakeTraining()
    run_table(table_file, rows="small", seeds=[1], run_row=fake, results_dir=tmp_path / "r")
    run_dir = tmp_path / "r" / "unit.t1" / "small" / "seed1"
    same = docmt("fit", table_file, "--row", "small", "--seed", "1", "--results", tmp_path / "r")
    assert same.code == 0 and same.out.strip().splitlines()[-1] == str(run_dir)  # reused as is
    other = docmt("fit", table_file, "--row", "small", "--seed", "1", "--results", tmp_path / "r",
                  "data.corpus=synthetic:small")
    assert other.code == 2 and "holds a finished run of another config: data.corpus" in other.err
    assert len(other.err.strip().splitlines()) == 1


def test_a_row_whose_config_does_not_compose_fails_alone_and_the_others_run(table_file, tmp_path):
    spec = dict(TABLE)
    spec["rows"] = [*TABLE["rows"], {"name": "typo", "overrides": ["model.context_layer=2"]}]
    table_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    fake = FakeTraining()
    outcome = run_table(table_file, run_row=fake, results_dir=tmp_path / "r")
    assert set(fake.calls) == {(row, seed) for row in ("small", "large", "broken") for seed in (1, 2)}
    typo = [r for r in outcome.records if r.row == "typo"]
    assert [(r.status, r.seed, r.log_path) for r in typo] == [("failed", None, None)]
    assert typo[0].error.startswith(f"DocMTInputError: {table_file}:")
    assert "row 'typo'" in typo[0].error and "'context_layers'" in typo[0].error
    assert not (tmp_path / "r" / "unit.t1" / "typo").exists()
    report = outcome.outputs["md"].read_text()
    assert "| typo |" in report and f"- `typo` (every seed): {typo[0].error}" in report
    for alone in ({"rows": "typo"}, {"dry_run": True}):  # nothing would run: the error is the command's
        with pytest.raises(DocMTInputError, match="row 'typo'"):
            run_table(table_file, run_row=fake, results_dir=tmp_path / "r2", **alone)
    assert not (tmp_path / "r2").exists()


def test_compose_row_sets_logging_seed_and_precedence(table_file):
    table = load_table(table_file)
    cfg = compose_row(table, "large", None, ["model.d_model=48"], seed=5)
    assert (cfg.logging.group, cfg.logging.name) == ("unit.t1", "large")
    assert list(cfg.logging.tags) == ["unit", "unit.t1", CTX]
    assert cfg.train.seed == 5 and cfg.model.d_model == 48 and cfg.model.context_layers == 3
    assert cfg.profile == "tiny"  # from the table base
    assert compose_row(table, "large", "cpu").profile == "cpu"  # --profile beats the table base
    assert compose_row(table, "large", None, ["model.context_layers=7"]).model.context_layers == 7
    assert compose_file(table_file, row="small", seed=2).train.seed == 2
    with pytest.raises(DocMTInputError, match="did you mean large"):
        compose_row(table, "lrage")
    with pytest.raises(DocMTInputError, match="needs --row"):
        compose_file(table_file)


@pytest.mark.parametrize("edit, expected", [
    (lambda t: t.update(colums=[]), "unknown table key 'colums'"),
    (lambda t: t.pop("metrics"), "missing table key 'metrics'"),
    (lambda t: t.update(id="bad id"), "'id'"),
    (lambda t: t.update(seeds=[1, 1]), "'seeds'"),
    (lambda t: t["rows"][1].update(paper={"test/bleuu": 1.0}),
     "row 'large': paper number for 'test/bleuu'"),
    (lambda t: t["rows"][1].update(paper={"test/bleu": "high"}), "row 'large': paper value"),
    (lambda t: t["rows"][1].update(overrides=["model.context_layers"]), "row 'large' override"),
    (lambda t: t["rows"][1].update(name="small"), "row 'small': duplicate row name"),
    (lambda t: t["rows"][1].update(overides=[]), "row 'large': unknown key 'overides'"),
])
def test_bad_table_files_name_file_line_and_row(table_file, edit, expected):
    spec = json.loads(json.dumps(TABLE))
    edit(spec)
    table_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(DocMTInputError) as err:
        load_table(table_file)
    assert str(err.value).startswith(str(table_file)) and expected in str(err.value)


def test_wandb_failure_never_stops_the_table(table_file, tmp_path, monkeypatch, caplog):
    import wandb

    def broken_init(**kwargs):
        raise RuntimeError("no wandb today")

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setattr(wandb, "init", broken_init)
    outcome = run_table(table_file, rows="small", seeds=[1], run_row=FakeTraining(),
                        cli_overrides=["logging.wandb=true"], results_dir=tmp_path / "r")
    assert outcome.outputs["md"].is_file()
    assert "wandb init failed (RuntimeError: no wandb today)" in caplog.text


@pytest.mark.subprocess
def test_wandb_offline_logs_the_table_run(table_file, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    outcome = run_table(table_file, rows="small", seeds=[1], run_row=FakeTraining(),
                        results_dir=tmp_path / "r")
    table = load_table(table_file)
    summaries = summarize(table, outcome.records)
    out = tmp_path / "r" / "unit.t1"
    assert log_table_to_wandb(table, summaries, outcome.outputs, outcome.results.tested, project="p", out_dir=out)
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert not log_table_to_wandb(table, summaries, {}, {}, project="p", out_dir=out)


def test_other_ddp_ranks_train_but_write_nothing(table_file, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    fake = FakeTraining()
    outcome = run_table(table_file, rows="small", seeds=[1, 2], run_row=fake,
                        results_dir=tmp_path / "r")
    assert fake.calls == {("small", 1): 1, ("small", 2): 1}
    assert [r.metrics["test/bleu"] for r in outcome.records] == \
        [expected_metrics("small", s)["test/bleu"] for s in (1, 2)]
    assert not [p for p in (tmp_path / "r").rglob("*") if p.is_file()] and not outcome.outputs


# ------------------------------------------------------ runs that other processes of the table hold

class OtherProcess:
    """Another process running the table, holding run (small, seed 1). Once `go` is set (or after
    `fallback_s`, so that a runner that never lets it go fails rather than hangs) and `after_s` more
    seconds, it ends that run `outcome`-wise and releases it: from a thread, while this process is
    busy or waiting."""

    def __init__(self, results: Path, outcome: str, *, after_s: float = 0.3, fallback_s: float = 30.0):
        self.run_dir = results / "unit.t1" / "small" / "seed1"
        self.lock = OwnerLock(self.run_dir.with_name("seed1.lock"))
        assert self.lock.try_acquire()
        self.outcome, self.go = outcome, threading.Event()
        self.thread = threading.Thread(target=self._finish, args=(after_s, fallback_s))
        self.thread.start()

    def _finish(self, after_s: float, fallback_s: float) -> None:
        self.go.wait(fallback_s)
        time.sleep(after_s)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.outcome == "finished":
            (self.run_dir / "metrics.json").write_text(json.dumps({"test/bleu": 99.0}))
        elif self.outcome == "failed":
            (self.run_dir / "error.json").write_text(json.dumps({"error": "RuntimeError: elsewhere"}))
        self.lock.release()


class TrainingInTurn(FakeTraining):
    """FakeTraining that records the order of its runs and, on its first, lets `other` (if any) go."""

    def __init__(self, other: OtherProcess | None = None):
        super().__init__()
        self.other, self.order = other, []

    def __call__(self, cfg, run_dir: Path) -> dict:
        if self.other is not None:
            self.other.go.set()
        self.order.append(cfg.logging.name)
        return super().__call__(cfg, run_dir)


@pytest.mark.parametrize("outcome, order, status", [
    ("finished", ["large"], FINISHED),  # its metrics are read, not recomputed
    ("failed", ["large"], FAILED),  # its failure is the run's: not retried
    ("gone", ["large", "small"], DONE),  # it stopped without an outcome (killed): run here
])
def test_a_run_another_process_holds_is_left_for_last_waited_for_and_its_outcome_kept(
        table_file, tmp_path, monkeypatch, capsys, outcome, order, status):
    monkeypatch.setattr(claims, "POLL_S", 0.02)
    other = OtherProcess(tmp_path / "r", outcome)
    training = TrainingInTurn(other)
    result = run_table(table_file, rows="small,large", seeds=[1], run_row=training, results_dir=tmp_path / "r")
    other.thread.join()
    assert training.order == order
    assert [(r.row, r.status) for r in result.records] == [("small", status), ("large", DONE)]
    assert "[docmt] row small, seed 1 of unit.t1: waiting for pid" in capsys.readouterr().out
    assert not list((tmp_path / "r" / "unit.t1").rglob("*.lock"))


def test_a_table_trained_on_several_devices_waits_for_a_held_run_in_turn(table_file, tmp_path, monkeypatch):
    """Lightning starts the other DDP ranks in rank zero's first fit, and they walk the table from
    its start: rank zero may not leave a run for later before then."""
    monkeypatch.setattr(claims, "POLL_S", 0.02)
    other = OtherProcess(tmp_path / "r", "gone", after_s=2.0)
    other.go.set()
    training = TrainingInTurn()
    run_table(table_file, rows="small,large", seeds=[1], run_row=training, results_dir=tmp_path / "r",
              cli_overrides=["trainer.devices=2"])
    other.thread.join()
    assert training.order == ["small", "large"]
