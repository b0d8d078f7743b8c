"""The demo's answer in words, from its table: does the previous source sentence help (test BLEU of
`concat` against `transformer`, seed by seed, with the table's paired bootstrap), and does `concat`
read what that sentence says (CXMI, and CXMI against another book's sentence: the random-context
control, docs/design.md section 8)?"""

from __future__ import annotations

import statistics
from typing import Mapping, Sequence

from lightning_docmt.tables.effects import metric_panel, seed_values
from lightning_docmt.tables.row_significance import RowSignificance
from lightning_docmt.tables.summaries import RowSummary

BASELINE, DOCUMENT_ROW = "transformer", "concat"


def demo_answer(summaries: Sequence[RowSummary], tested: Mapping[str, RowSignificance]) -> str:
    """Two or three sentences; a note when the rows have not both finished."""
    bleu = metric_panel(summaries, "test/bleu", BASELINE)
    change = bleu.effect_of(DOCUMENT_ROW) if bleu.against else None  # seed by seed, as the table's Δ base
    if change is None:
        return f"Answer: none yet: rows {BASELINE} and {DOCUMENT_ROW} have not both finished a seed."
    seeds = len(change.seeds)
    significance = tested.get(DOCUMENT_ROW)
    verdict = {"↑": "significantly better", "↓": "significantly worse"}.get(
        significance.mark if significance else "", "not significantly different")
    p_values = ", ".join(f"{p:.3f}" for p in significance.p_values) if significance else "n/a"
    lines = [f"Answer ({seeds} seed{'s' if seeds > 1 else ''}): with the previous source sentence, "
             f"{DOCUMENT_ROW} scores {change.mean:+.2f} test BLEU against {BASELINE} "
             f"({verdict}; paired bootstrap p = {p_values})."]
    document = next(s for s in summaries if s.row.name == DOCUMENT_ROW)
    cxmi, control = (seed_values(document, m) for m in ("cxmi", "random_ctx/cxmi"))
    if cxmi and control:
        reads = all(v > 0 for v in cxmi.values()) and all(v > 0 for v in control.values())
        lines.append(f"It {'reads' if reads else 'does not read'} what that sentence says: the references "
                     f"are {statistics.fmean(cxmi.values()):+.4f} nats/token more likely with it than with none, and "
                     f"{statistics.fmean(control.values()):+.4f} more likely than with a sentence of another book "
                     f"({'above 0 in every seed' if reads else 'not above 0 in every seed'}).")
    return " ".join(lines)
