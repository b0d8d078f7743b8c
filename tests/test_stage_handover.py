"""What a stage hands to the next: its final checkpoint and that checkpoint's step.

A stage's final checkpoint is its best on validation, which need not be its last update; a next
stage with `continue_schedule` must continue the learning-rate schedule from the step of the
weights it starts from (reading Z9 in docs/papers/zhang2018.md). The test makes the handed-on
checkpoint report an earlier step than the stage's last, as a best checkpoint from an earlier
validation would, and checks what stage 2 is built with.
"""

from __future__ import annotations

import json

from lightning_docmt.training import run as train
from tests.run_env import single_process_run_env
from tests.stage_fits import tiny_config

STEPS, BEST_STEP = 6, 3
TWO_STAGES = ["model.arch=zhang_doc", "context.prev_sentences=1", f"train.max_steps={STEPS}",
              f"train.val_every_steps={STEPS}",
              "train.stages.s1={arch: transformer}",
              "train.stages.s2={arch: zhang_doc, init_from: s1, continue_schedule: true, max_steps: 2}",
              "train.schedule=[s1,s2]"]


def test_the_next_stage_continues_from_the_step_of_the_checkpoint_it_starts_from(tmp_path, monkeypatch):
    read = train.read_checkpoint

    def best_from_an_earlier_validation(path):
        checkpoint = read(path)
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
        run_dir = train.fit_run(tiny_config(tmp_path, *TWO_STAGES))
    stages = json.loads((run_dir / "run.json").read_text())["stages"]
    assert stages["s1"]["global_step"] == BEST_STEP  # not STEPS, the stage's last update
    assert offsets[:2] == [0, BEST_STEP]  # s1 from scratch; s2 continues at the checkpoint's step
    done = json.loads((tmp_path / "cache" / "stages" / stages["s1"]["key"] / "done.json").read_text())
    assert (done["global_step"], done["trained_steps"]) == (BEST_STEP, STEPS)
