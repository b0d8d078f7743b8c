"""The lines a run prints when a stage ends and after its test passes (training/run.py).

A stage's line, from the `done.json` it wrote:

    [docmt] stage 'doc' done: 300 updates in 4m12s · best val/bleu 9.3200 after 250 updates ·
            lr 2.00e-03 -> 0.00e+00, summed 0.300 · 5,412 tok/s

The summed lr is there because a null result means something only if the stage could learn
(trap K9, docs/design.md section 12).
"""

from __future__ import annotations

from typing import Any

from lightning_docmt.logs import clock


def stage_summary(info: dict[str, Any], monitor: str, tokens_per_s: float | None) -> str:
    """`info`: a stage's `done.json`; `monitor`: the metric its best checkpoint was chosen on."""
    parts = [f"stage '{info['stage']}' done: {info['trained_steps']} updates in {clock(info['seconds'])}"]
    if info.get("best_score") is not None:
        parts.append(f"best {monitor} {info['best_score']:.4f} after {info['global_step']} updates")
    for index, record in enumerate(info.get("lr", [])):
        name = "lr" if len(info["lr"]) == 1 else f"lr[{index}]"  # one per optimizer phase
        parts.append(f"{name} {record['first']:.2e} -> {record['last']:.2e}, summed {record['sum']:.3f}")
    if tokens_per_s:
        parts.append(f"{tokens_per_s:,.0f} tok/s")
    return " · ".join(parts)


def decoded_split_line(scores: dict[str, float | str], split: str, seconds: float) -> str:
    """`test split decoded: BLEU 11.53, chrF 32.72 in 2m05s`."""
    parts = [f"{name} {scores[key]:.2f}" for name, key in (("BLEU", "test/bleu"), ("chrF", "test/chrf"))
             if isinstance(scores.get(key), float)]
    return f"{split} split decoded: {', '.join(parts)} in {clock(seconds)}"


CONTEXT_USAGE = (("cxmi", "CXMI {:+.4f}"), ("random_ctx/cxmi", "random-context CXMI {:+.4f}"),
                 ("random_ctx/bleu_delta", "random-context BLEU {:+.2f}"))


def context_usage_line(scores: dict[str, float | str], seconds: float) -> str:
    """`context usage: CXMI +0.0270, random-context CXMI +0.0110, random-context BLEU -0.31 (floor
    +0.01) in 3m10s` (evaluation/context_usage.py)."""
    parts = [form.format(scores[key]) for key, form in CONTEXT_USAGE if isinstance(scores.get(key), float)]
    if parts and isinstance(scores.get("random_ctx/bleu_floor"), float):
        parts[-1] += f" (floor {scores['random_ctx/bleu_floor']:+.2f})"
    return f"context usage: {', '.join(parts) or 'nothing measured'} in {clock(seconds)}"
