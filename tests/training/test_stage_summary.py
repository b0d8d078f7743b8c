"""The lines a run prints at the end of a stage and after its test passes (training/stage_summary.py)."""

from __future__ import annotations

from lightning_docmt.training.stage_summary import context_usage_line, decoded_split_line, stage_summary


def test_a_stage_line_gives_updates_time_best_score_and_each_optimizers_learning_rate():
    info = {"stage": "doc", "trained_steps": 300, "seconds": 252.4, "best_score": 9.32, "global_step": 250,
            "lr": [{"first": 2e-3, "last": 0.0, "sum": 0.3}, {"first": 1e-4, "last": 1e-4, "sum": 0.03}]}
    line = stage_summary(info, "val/bleu", 5412.3)
    assert line == ("stage 'doc' done: 300 updates in 4m12s · best val/bleu 9.3200 after 250 updates · "
                    "lr[0] 2.00e-03 -> 0.00e+00, summed 0.300 · lr[1] 1.00e-04 -> 1.00e-04, summed 0.030 · "
                    "5,412 tok/s")
    assert "best" not in stage_summary({**info, "best_score": None, "lr": []}, "val/bleu", None)


def test_the_test_and_context_usage_lines_show_what_was_measured_and_nothing_else():
    scores = {"test/bleu": 11.5265, "test/chrf": 32.72, "cxmi": 0.027, "random_ctx/cxmi": 0.011,
              "random_ctx/bleu_delta": -0.31, "random_ctx/bleu_floor": 0.01}
    assert decoded_split_line(scores, "test", 125.0) == "test split decoded: BLEU 11.53, chrF 32.72 in 2m05s"
    assert context_usage_line(scores, 190) == ("context usage: CXMI +0.0270, random-context CXMI +0.0110, "
                                               "random-context BLEU -0.31 (floor +0.01) in 3m10s")
    assert context_usage_line({"cxmi": 0.0}, 1) == "context usage: CXMI +0.0000 in 1s"
