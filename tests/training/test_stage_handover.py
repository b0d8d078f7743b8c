"""What a stage hands to the next: its final checkpoint and that checkpoint's step; which
continuations of a schedule are refused (trap K9); the lr each stage trained at (`done.json`).

A stage's final checkpoint is its best on validation, which need not be its last update; a next
stage with `continue_schedule` must continue the learning-rate schedule from the step of the
weights it starts from (reading Z9 in docs/papers/zhang2018.md), and a chain of continuing stages
continues one schedule. The test makes the handed-on checkpoint report an earlier step than the
stage's last, as a best checkpoint from an earlier validation would, and checks what stages 2 and
3 are built with.
"""

from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import pytest
import torch

from lightning_docmt.callbacks.lr_record import LearningRateRecord
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.training import run as train
from lightning_docmt.training import stages
from tests.helpers.run_env import single_process_run_env
from tests.helpers.stage_fits import tiny_config

STEPS, BEST_STEP = 6, 3
TWO_STAGES = ["model.arch=zhang_doc", "context.prev_sentences=1", f"train.max_steps={STEPS}",
              f"train.val_every_steps={STEPS}",
              "train.stages.s1={arch: transformer}",
              "train.stages.s2={arch: zhang_doc, init_from: s1, continue_schedule: true, max_steps: 2}",
              "train.schedule=[s1,s2]"]
CHAIN = [*TWO_STAGES, "train.stages.s3={arch: zhang_doc, init_from: s2, continue_schedule: true, max_steps: 2}",
         "train.schedule=[s1,s2,s3]"]


@pytest.mark.fit
def test_each_stage_of_a_chain_continues_from_where_its_parents_checkpoint_stands_on_the_schedule(
        tmp_path, monkeypatch):
    read = train.read_checkpoint

    def best_from_an_earlier_validation(path, **options):
        checkpoint = read(path, **options)
        if "s1" in str(path):  # stage s1's best
            checkpoint["global_step"] = BEST_STEP
        return checkpoint

    offsets = []
    build = train.build_module

    def recording(scfg, datamodule, step_offset=0, lr_override=None):
        offsets.append(step_offset)
        return build(scfg, datamodule, step_offset, lr_override)

    monkeypatch.setattr(train, "read_checkpoint", best_from_an_earlier_validation)
    monkeypatch.setattr(train, "build_module", recording)
    with single_process_run_env():
        run_dir = train.fit_run(tiny_config(tmp_path, *CHAIN))
    stages = json.loads((run_dir / "run.json").read_text())["stages"]
    assert stages["s1"]["global_step"] == BEST_STEP  # not STEPS, the stage's last update
    # s1 from scratch; s2 continues at its checkpoint's step; s3 after s2's 2 updates on top of that,
    # not at s2's own step count (which would run the schedule back to its start)
    assert offsets[:3] == [0, BEST_STEP, BEST_STEP + 2]
    done = {name: json.loads((tmp_path / "cache" / "stages" / stages[name]["key"] / "done.json").read_text())
            for name in ("s1", "s2")}
    assert (done["s1"]["global_step"], done["s1"]["trained_steps"], done["s1"]["schedule_step"]) == (BEST_STEP, STEPS,
                                                                                                     BEST_STEP)
    assert (done["s2"]["global_step"], done["s2"]["schedule_step"]) == (2, BEST_STEP + 2)


def test_a_stage_that_trains_new_parameters_may_not_continue_a_linear_decay_from_near_zero(tmp_path):
    """Trap K9: 2 updates after 6 of a linear decay with 2 warm-up updates start at 1/6 of the
    peak; the stage's theta_d would train on the tail alone. The error gives the numbers."""
    cfg = tiny_config(tmp_path, *TWO_STAGES, "train.optim.schedule=linear_warmup_linear_decay",
                      "train.optim.warmup_steps=2")
    with pytest.raises(DocMTInputError, match=r"train\.stages\.s2\.continue_schedule") as err:
        stages.check_stages(cfg)
    assert "0.17 of the peak" in str(err.value) and "summed lr" in str(err.value)
    stages.check_stages(tiny_config(tmp_path, *TWO_STAGES))  # the inverse sqrt never reaches 0
    no_new = tiny_config(tmp_path, *TWO_STAGES, "train.optim.schedule=linear_warmup_linear_decay",
                         "train.optim.warmup_steps=2", "train.stages.s2.arch=transformer")
    stages.check_stages(no_new)  # further training of the same parameters may run on the tail


def test_a_chain_of_continuations_is_checked_where_it_stands_on_the_schedule(tmp_path, capsys):
    """s3 continues s2, which continued s1's 6 updates for 2: s3 starts at update 9 of the schedule,
    and the printed numbers say so."""
    stages.check_stages(tiny_config(tmp_path, *CHAIN))
    printed = capsys.readouterr().out
    assert "stage 's3': continuing the 'linear_warmup_inverse_sqrt' schedule of stage 's2' from its step 8" in printed


def test_a_continuation_on_another_schedule_is_refused(tmp_path):
    """Continuing means the parent's schedule further on: another warm-up or peak lr would make the
    schedule jump where the stages meet."""
    for change in ("train.stages.s2.optim={warmup_steps: 50}", "train.stages.s2.lr=0.5"):
        with pytest.raises(DocMTInputError, match=r"train\.stages\.s2\.continue_schedule.*same schedule further on"):
            stages.check_stages(tiny_config(tmp_path, *TWO_STAGES, change))


@pytest.mark.fit
def test_done_json_records_the_lr_each_stage_trained_at(tmp_path):
    """A stage with a schedule of its own: 3 updates of a linear decay after 1 warm-up update
    train at lr, lr / 2 and 0; `done.json` records what the optimizer applied."""
    lr = 2e-3
    cfg = tiny_config(tmp_path, *TWO_STAGES[:-2], "train.stages.s1={arch: transformer}",
                      f"train.stages.s2={{arch: zhang_doc, init_from: s1, max_steps: 3, lr: {lr}, "
                      "optim: {schedule: linear_warmup_linear_decay, warmup_steps: 1}}",
                      "train.schedule=[s1,s2]")
    with single_process_run_env():
        run_dir = train.fit_run(cfg)
    stages = json.loads((run_dir / "run.json").read_text())["stages"]
    done = json.loads((tmp_path / "cache" / "stages" / stages["s2"]["key"] / "done.json").read_text())
    (record,) = done["lr"]
    assert record["updates"] == 3 and record["first"] == pytest.approx(lr) and record["last"] == 0.0
    assert record["sum"] == pytest.approx(1.5 * lr)
    first = json.loads((tmp_path / "cache" / "stages" / stages["s1"]["key"] / "done.json").read_text())
    assert first["lr"][0]["updates"] == STEPS


@pytest.mark.fit
def test_a_stage_that_adds_parameters_records_how_much_they_disturb_its_start(tmp_path):
    """The valid NLL of the stage-1 checkpoint (as its own last validation logged it) and of the
    stage-2 model before its first update, with theta_d fresh: `initial_damage` is the difference."""
    with single_process_run_env():
        run_dir = train.fit_run(tiny_config(tmp_path, *TWO_STAGES[:-2], "train.stages.s1={arch: transformer}",
                                            "train.stages.s2={arch: zhang_doc, init_from: s1, max_steps: 2}",
                                            "train.schedule=[s1,s2]"))
    stages = json.loads((run_dir / "run.json").read_text())["stages"]
    first, second = (json.loads((tmp_path / "cache" / "stages" / stages[n]["key"] / "done.json").read_text())
                     for n in ("s1", "s2"))
    assert "initial_nll" not in first  # it starts from nothing
    logged = [row for row in csv.DictReader(open(run_dir / "s1" / "metrics.csv")) if row.get("val/nll")]
    assert second["parent_nll"] == pytest.approx(float(logged[-1]["val/nll"]), rel=1e-4)
    assert second["initial_nll"] != second["parent_nll"]  # the fresh gates mix in an untrained read
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["initial_damage"] == pytest.approx(second["initial_nll"] - second["parent_nll"])


def test_the_lr_record_survives_a_resume():
    record = LearningRateRecord()
    record.records = [{"first": 1.0, "last": 0.5, "sum": 3.0, "updates": 4}]
    resumed = LearningRateRecord()
    resumed.load_state_dict(record.state_dict())
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.25)
    resumed.on_before_optimizer_step(SimpleNamespace(optimizers=[optimizer]), None, optimizer)
    assert resumed.records == [{"first": 1.0, "last": 0.25, "sum": 3.25, "updates": 5}]


@pytest.mark.fit
def test_a_carried_state_models_start_is_scored_in_document_order(tmp_path):
    """A shared-context RNN starting from the sentence-level RNN (Yamagishi & Komachi's `ctx` stage):
    its start NLL is its validation loop's document-order pass, each sentence reading the state of
    its document's previous sentence; the sentence-level parent is scored sentence by sentence."""
    from lightning_docmt.training.stage_start import document_order_valid_nll

    rnn = ["model.arch=yk_rnn", "model.d_model=16", "data.document_order=true", "model.context=shared",
           "context.side=mix", "train.max_steps=4", "train.val_every_steps=4",
           "train.stages.base={arch: yk_rnn, model: {context: none, context_side: source}}",
           "train.stages.ctx={arch: yk_rnn, init_from: base, max_steps: 2}", "train.schedule=[base,ctx]"]
    calls = []
    with single_process_run_env(), pytest.MonkeyPatch.context() as mp:
        mp.setattr("lightning_docmt.training.stage_start.document_order_valid_nll",
                   lambda *a: calls.append(a) or document_order_valid_nll(*a))
        run_dir = train.fit_run(tiny_config(tmp_path, *rnn))
    stages = json.loads((run_dir / "run.json").read_text())["stages"]
    base, ctx = (json.loads((tmp_path / "cache" / "stages" / stages[n]["key"] / "done.json").read_text())
                 for n in ("base", "ctx"))
    assert len(calls) == 1 and "initial_nll" not in base
    logged = [row for row in csv.DictReader(open(run_dir / "base" / "metrics.csv")) if row.get("val/nll")]
    assert ctx["parent_nll"] == pytest.approx(float(logged[-1]["val/nll"]), rel=1e-4)
    assert ctx["initial_nll"] != ctx["parent_nll"]  # the carried state changes what the decoder reads
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["initial_damage"] == pytest.approx(ctx["initial_nll"] - ctx["parent_nll"])
