"""The one line a stage prints when it ends, from the `done.json` it wrote (training/run.py):

    [docmt] stage 'doc' done: 300 updates in 4m12s · best val/bleu 9.3200 after 250 updates ·
            lr 2.00e-03 -> 0.00e+00, summed 0.300 · 5,412 tok/s

The summed lr is there because a null result means something only if the stage could learn
(trap K9, docs/design.md section 12).
"""

from __future__ import annotations

from typing import Any

from lightning_docmt.callbacks.progress_line import clock


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
