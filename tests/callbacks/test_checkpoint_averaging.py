"""Checkpoint averaging (callbacks/checkpoint_averaging.py): the pure average, the window rule of
"Diverse Pretrained Context Encodings" (docs/papers/donato2021.md section 4, trap 21), the
callback inside a tiny fit (`train.average`), and `docmt average`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import lightning.pytorch as pl
import pytest
import torch
from omegaconf import OmegaConf

from lightning_docmt.callbacks.checkpoint_averaging import average_state_dicts, select_window
from lightning_docmt.checkpoints import VOCAB_KEY
from lightning_docmt.data.datamodule import DocumentWindowDataModule
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.inference.loaded_model import load_checkpoint
from lightning_docmt.training import run as train
from lightning_docmt.training import stages
from lightning_docmt.training.module import DocMTModule
from tests.helpers.cli_run import docmt
from tests.helpers.stage_fits import tiny_config, weights

N_AVERAGED = 2
AVERAGING = [f"train.average.checkpoints={N_AVERAGED}", "train.average.rule=best_contiguous",
             "train.max_steps=8", "train.val_every_steps=2"]


# ---------------------------------------------------------------------- average_state_dicts


def test_constant_weights_one_and_three_average_to_two_and_integers_come_from_the_newest():
    old = {"w": torch.ones(2, 3), "b": torch.ones(3, dtype=torch.float16),
           "steps": torch.tensor(7), "mask": torch.tensor([True, False])}
    new = {"w": torch.full((2, 3), 3.0), "b": torch.full((3,), 3.0, dtype=torch.float16),
           "steps": torch.tensor(10), "mask": torch.tensor([False, False])}
    avg = average_state_dicts([old, new])
    assert torch.equal(avg["w"], torch.full((2, 3), 2.0))
    assert avg["b"].dtype == torch.float16 and torch.equal(avg["b"], torch.full((3,), 2.0, dtype=torch.float16))
    assert avg["steps"].dtype == torch.int64 and int(avg["steps"]) == 10  # not 8 (mean) or 17 (sum)
    assert torch.equal(avg["mask"], new["mask"])
    assert list(avg) == list(new)


def test_bf16_weights_are_averaged_without_bf16_accumulation():
    # 256 + 1 rounds back to 256 in bf16 (8 significant bits): a bf16 running sum never moves.
    states = [{"w": torch.full((4,), 256.0, dtype=torch.bfloat16)}]
    states += [{"w": torch.full((4,), 1.0, dtype=torch.bfloat16)} for _ in range(15)]
    avg = average_state_dicts(states)["w"]
    expected = torch.full((4,), (256.0 + 15.0) / 16, dtype=torch.float32).to(torch.bfloat16)
    assert avg.dtype == torch.bfloat16 and torch.equal(avg, expected)
    bf16_sum = states[0]["w"].clone()
    for state in states[1:]:
        bf16_sum += state["w"]
    assert not torch.equal(bf16_sum / 16, expected)  # the trap this test guards against


def test_a_tensor_equal_in_every_state_dict_stays_bit_for_bit_and_the_rest_are_averaged():
    """A frozen encoder must come out of averaging unchanged: ten float32 copies summed and divided by
    ten round most values elsewhere (about 60 % of uniform ones), so equal tensors are copied."""
    frozen = torch.rand(10_000, generator=torch.Generator().manual_seed(0)) * 3
    states = [{"frozen": frozen.clone(), "trained": torch.full((3,), float(i))} for i in range(10)]
    out = average_state_dicts(states)
    assert torch.equal(out["frozen"], frozen)
    assert torch.equal(out["trained"], torch.full((3,), 4.5))
    summed = sum(s["frozen"] for s in states) / 10
    assert not torch.equal(summed, frozen)  # what a plain average would have given


def test_a_single_state_dict_is_its_own_average():
    state = {"w": torch.randn(3, 2), "n": torch.tensor(3)}
    avg = average_state_dicts(iter([state]))
    assert all(torch.equal(avg[k], state[k]) for k in state)


@pytest.mark.parametrize("other,key", [
    ({"w": torch.ones(2)}, "b"),  # missing key
    ({"w": torch.ones(2), "b": torch.ones(1), "extra": torch.ones(1)}, "extra"),
    ({"w": torch.ones(3), "b": torch.ones(1)}, "w"),  # shape
    ({"w": torch.ones(2), "b": torch.ones(1, dtype=torch.int64)}, "b"),  # float vs integer
])
def test_mismatched_state_dicts_are_rejected_naming_the_key(other, key):
    first = {"w": torch.ones(2), "b": torch.ones(1)}
    with pytest.raises(DocMTInputError, match=f"key '{key}'"):
        average_state_dicts([first, other])
    with pytest.raises(DocMTInputError, match="nothing to average"):
        average_state_dicts([])


# ---------------------------------------------------------------------- window rule


def test_best_contiguous_window_on_a_hand_made_score_sequence():
    scores = [1.0, 5.0, 2.0, 8.0, 9.0, 1.0, 7.0]
    # window sums of 3: 8, 15, 19, 18, 17 -> the window starting at index 2
    assert select_window(scores, 3, "best_contiguous") == range(2, 5)
    assert select_window(scores, 3, "last") == range(4, 7)
    assert select_window(scores, 1, "best_contiguous") == range(4, 5)
    assert select_window([2.0, 1.0, 1.0, 2.0], 2, "best_contiguous") == range(2, 4)  # tie: the later
    assert select_window(scores[:2], 3, "best_contiguous") == range(0, 2)  # fewer than n: all


# ---------------------------------------------------------------------- the callback in a fit


class ValidationRecorder(pl.Callback):
    """The weights and the monitored val/loss at every validation of the fit."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking and trainer.state.fn == "fit":
            self.records.append({"step": trainer.global_step, "weights": weights(pl_module),
                                 "loss": float(trainer.callback_metrics["val/loss"])})


@pytest.fixture(scope="module")
def averaged_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("averaging")
    cfg = tiny_config(root, *AVERAGING)
    recorder = ValidationRecorder()
    build_trainer = train.build_trainer

    def recording(*args: Any, **kwargs: Any):
        trainer, checkpointer = build_trainer(*args, **kwargs)
        if not kwargs.get("for_test"):
            trainer.callbacks.append(recorder)
        return trainer, checkpointer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(train, "build_trainer", recording)
        mp.setenv(train.RUN_DIR_VARIABLE, "")
        run_dir = train.fit_run(cfg)
    torch.set_num_threads(threads)
    yield {"root": root, "cfg": cfg, "run_dir": run_dir, "records": recorder.records}


def state_of(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=False)["state_dict"]


@pytest.mark.fit
def test_the_stage_checkpoint_is_the_average_of_the_best_contiguous_window(averaged_run):
    records = averaged_run["records"]
    assert [r["step"] for r in records] == [2, 4, 6, 8]
    window = select_window([-r["loss"] for r in records], N_AVERAGED, "best_contiguous")
    chosen = [records[i]["weights"] for i in window]
    final = json.loads((averaged_run["run_dir"] / "run.json").read_text())["checkpoint"]
    state = state_of(Path(final))
    assert state.keys() == chosen[0].keys()
    for k, v in state.items():
        assert torch.equal(v, (chosen[0][k] + chosen[1][k]) / 2), k
    summary = json.loads((averaged_run["run_dir"] / "main" / "averaging" / "average.json").read_text())
    assert summary["steps"] == [records[i]["step"] for i in window]
    assert summary["scores"] == pytest.approx([records[i]["loss"] for i in window])


@pytest.mark.fit
def test_the_averaged_checkpoint_loads_and_its_recorded_validation_is_its_own(averaged_run):
    averaging = averaged_run["run_dir"] / "main" / "averaging"
    loaded = load_checkpoint(averaging / "averaged.ckpt")  # hyper-parameters + vocabularies inside
    summary = json.loads((averaging / "average.json").read_text())
    cfg = stages.stage_config(averaged_run["cfg"], "main")
    datamodule = DocumentWindowDataModule(cfg.data, cfg.vocab, cfg.context)
    trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False)
    module = DocMTModule(OmegaConf.to_container(loaded.cfg, resolve=True), len(loaded.src_vocab),
                         len(loaded.tgt_vocab))
    module.model.load_state_dict(loaded.model.state_dict())
    [metrics] = trainer.validate(module, datamodule=datamodule, verbose=False)
    assert metrics["val/loss"] == pytest.approx(summary["validation"]["val/loss"], rel=1e-6)
    records = averaged_run["records"]
    assert all(metrics["val/loss"] != pytest.approx(r["loss"], rel=1e-9) for r in records)
    done = json.loads((Path(averaged_run["cfg"].data.cache_dir) / "stages"
                       / json.loads((averaged_run["run_dir"] / "run.json").read_text())["stages"]["main"]["key"]
                       / "done.json").read_text())
    assert done["best"] == str(averaging / "averaged.ckpt")
    assert done["best_score"] == pytest.approx(summary["validation"]["val/loss"])


@pytest.mark.fit
def test_only_snapshots_that_can_still_be_chosen_stay_on_disk(averaged_run):
    records = averaged_run["records"]
    window = select_window([-r["loss"] for r in records], N_AVERAGED, "best_contiguous")
    keep = {records[i]["step"] for i in window} | {records[-1]["step"]}  # + the last n-1
    on_disk = sorted((averaged_run["run_dir"] / "main" / "averaging").glob("step*.pt"))
    assert [int(p.stem.removeprefix("step")) for p in on_disk] == sorted(keep)


# ---------------------------------------------------------------------- docmt average


@pytest.mark.fit
def test_docmt_average_averages_weights_and_keeps_the_rest_of_the_newest(averaged_run, tmp_path):
    source = torch.load(averaged_run["run_dir"] / "main" / "averaging" / "averaged.ckpt",
                        map_location="cpu", weights_only=False)
    variants = []
    for step, scale in ((30, 3.0), (10, 1.0)):  # the newer one is given first
        checkpoint = dict(source, global_step=step, marker=f"step{step}")
        checkpoint["state_dict"] = {k: v * scale if v.is_floating_point() else v + step
                                    for k, v in source["state_dict"].items()}
        torch.save(checkpoint, tmp_path / f"s{step}.ckpt")
        variants.append(checkpoint)
    out = tmp_path / "avg" / "avg.ckpt"
    outcome = docmt("average", tmp_path / "s30.ckpt", tmp_path / "s10.ckpt", "--out", out)
    assert outcome.code == 0, outcome.err
    averaged = torch.load(out, map_location="cpu", weights_only=False)
    assert averaged["marker"] == "step30" and averaged["global_step"] == 30
    assert averaged[VOCAB_KEY] == source[VOCAB_KEY]
    for k, v in source["state_dict"].items():
        assert torch.equal(averaged["state_dict"][k], v * 2 if v.is_floating_point() else v + 30), k
    assert load_checkpoint(out).cfg == load_checkpoint(tmp_path / "s30.ckpt").cfg
    assert str(out) in outcome.out and not list(out.parent.glob("*.tmp"))


@pytest.mark.fit
def test_docmt_average_rejects_bad_inputs_with_exit_2(averaged_run, tmp_path):
    good = averaged_run["run_dir"] / "main" / "averaging" / "averaged.ckpt"
    checkpoint = torch.load(good, map_location="cpu", weights_only=False)
    key = next(k for k, v in checkpoint["state_dict"].items() if v.dim() == 2)
    checkpoint["state_dict"][key] = checkpoint["state_dict"][key][:, :1]
    torch.save(checkpoint, tmp_path / "narrow.ckpt")
    (tmp_path / "text.ckpt").write_text("not a checkpoint\n")
    cases = [(tmp_path / "missing.ckpt", "missing.ckpt"), (tmp_path / "text.ckpt", "text.ckpt"),
             (tmp_path / "narrow.ckpt", key)]
    out = tmp_path / "out.ckpt"
    for bad, culprit in cases:
        outcome = docmt("average", good, bad, "--out", out)
        assert outcome.code == 2 and len(outcome.err.splitlines()) == 1 and culprit in outcome.err, outcome.err
        assert not out.exists() and not list(tmp_path.glob("*.tmp"))
