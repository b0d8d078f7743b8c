"""Caches that know the code: the stage key changes with the code and with the resolved precision
and device, every run's metrics record what produced them, and a finished table row computed by
other code is reported when reused."""

from __future__ import annotations

import json
import os

import pytest
import torch

from lightning_docmt import cpu, provenance
from lightning_docmt.config.composition import compose
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.training import stages
from tests.helpers.cli_run import FIT_SETTINGS, docmt, read_json, run_dir_of, write_config


def key_of(cfg) -> str:
    return stages.stage_key(stages.stage_config(cfg, "main"), "main", "")


def test_the_stage_key_changes_with_the_code_and_the_resolved_precision(monkeypatch, tmp_path):
    cfg = compose(None, ["data.corpus=synthetic:tiny", f"data.cache_dir={tmp_path}"], profile="tiny")
    before = key_of(cfg)
    assert key_of(cfg) == before  # stable
    monkeypatch.setattr(stages, "code_fingerprint", lambda: "another-code")
    after_fix = key_of(cfg)
    assert after_fix != before
    monkeypatch.setattr(stages, "resolve_precision", lambda setting, accelerator: "bf16-mixed")
    assert key_of(cfg) not in (before, after_fix)


def test_the_stage_key_leaves_out_the_documents_per_batch_outside_document_order(tmp_path):
    base = ["data.corpus=synthetic:tiny", f"data.cache_dir={tmp_path}"]
    keys = {order: {key_of(compose(None, [*base, f"data.document_order={order}",
                                          f"data.max_documents={n}"], profile="tiny"))
                    for n in (8, 16)}
            for order in ("false", "true")}
    assert len(keys["false"]) == 1 and len(keys["true"]) == 2


def test_the_fingerprint_covers_every_source_file(monkeypatch, tmp_path):
    package, extra = tmp_path / "lightning_docmt", tmp_path / "callbacks"
    for root in (package, extra):
        (root / "sub").mkdir(parents=True)
        (root / "sub" / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(provenance, "SOURCE_ROOTS", (package, extra))
    monkeypatch.setenv(provenance.FINGERPRINT_VARIABLE, "")
    fingerprint = provenance.code_fingerprint.__wrapped__
    first = fingerprint()
    (extra / "sub" / "a.py").write_text("x = 2\n")  # a fix in a callback
    second = fingerprint()
    (package / "sub" / "b.py").write_text("")  # a new module
    assert len({first, second, fingerprint()}) == 3
    assert len(provenance.code_fingerprint()) == 16


def test_a_rank_whose_code_differs_from_rank_zeros_stops(monkeypatch, tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(provenance, "SOURCE_ROOTS", (tmp_path,))
    monkeypatch.setenv(provenance.FINGERPRINT_VARIABLE, "")
    fingerprint = provenance.code_fingerprint.__wrapped__
    zeros = fingerprint()
    assert os.environ[provenance.FINGERPRINT_VARIABLE] == zeros  # left for the others
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert fingerprint() == zeros  # another rank with the same code
    (tmp_path / "a.py").write_text("x = 2\n")  # edited after rank zero started
    with pytest.raises(DocMTInputError, match="changed after rank zero started"):
        fingerprint()


@pytest.mark.fit
def test_metrics_record_the_code_versions_and_resolved_settings(workdir):
    config = write_config(workdir / "provenance.yaml", FIT_SETTINGS.replace("20", "4"))
    metrics = read_json(run_dir_of(docmt("fit", config, "--profile", "tiny")) / "metrics.json")
    env = {k.removeprefix(provenance.ENV_PREFIX): v for k, v in metrics.items()
           if k.startswith(provenance.ENV_PREFIX)}
    assert env["code"] == provenance.code_fingerprint() and env["torch"] == torch.__version__
    assert env["precision"] == "32-true" and env["device"] == "cpu"
    assert env["threads"] == float(torch.get_num_threads())
    assert env["cpu"] == cpu.cpu_name() != "unknown"  # this machine's /proc/cpuinfo names its CPU
    assert env["git"] == provenance.git_state() != ""


@pytest.mark.fit
def test_a_finished_row_of_other_code_is_reported_when_reused(workdir, capsys):
    table = workdir / "prov_table.yaml"
    table.write_text(f"id: prov\ntitle: provenance\nmetrics: [test/bleu]\n"
                     f"base: [data.corpus=synthetic:tiny, data.cache_dir={workdir / 'prov_cache'}, "
                     "train.max_steps=4, train.val_every_steps=4]\n"
                     "rows:\n  - {name: sent, overrides: [model.arch=transformer]}\n")
    results = workdir / "prov_results"
    assert docmt("table", table, "--profile", "tiny", "--results", results).code == 0
    metrics_file = results / "prov" / "sent" / "seed1" / "metrics.json"
    again = docmt("table", table, "--profile", "tiny", "--results", results)
    assert again.code == 0 and "computed by other code" not in again.out
    metrics = json.loads(metrics_file.read_text())
    metrics["env/code"] = "0123456789abcdef"
    metrics_file.write_text(json.dumps(metrics))
    stale = docmt("table", table, "--profile", "tiny", "--results", results)
    assert stale.code == 0 and len([line for line in stale.out.splitlines() if "other code" in line]) == 1
    assert "prov: 1 finished run(s) computed by other code are reused as recorded (fingerprint 0123456789abcdef (1)" \
        in stale.out
