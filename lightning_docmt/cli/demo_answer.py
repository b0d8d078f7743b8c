"""The demo's answer in words, from its table: does the previous source sentence help (test BLEU of
`concat` against `transformer`, seed by seed, with the table's paired bootstrap), and does `concat`
read what that sentence says (CXMI, and CXMI against another book's sentence: the random-context
control, docs/design.md section 8)?"""

from __future__ import annotations

from typing import Mapping, Sequence

from lightning_docmt.tables.effects import seed_values
from lightning_docmt.tables.row_significance import RowSignificance
from lightning_docmt.tables.summaries import RowSummary

BASELINE, DOCUMENT_ROW = "transformer", "concat"


def _mean(values: dict[int, float]) -> float:
    return sum(values.values()) / len(values)


def demo_answer(summaries: Sequence[RowSummary], tested: Mapping[str, RowSignificance]) -> str:
    """Two or three sentences; a note when the rows have not both finished."""
    rows = {s.row.name: s for s in summaries}
    base, document = (seed_values(rows[name], "test/bleu") for name in (BASELINE, DOCUMENT_ROW))
    seeds = sorted(set(base) & set(document))
    if not seeds:
        return f"Answer: none yet: rows {BASELINE} and {DOCUMENT_ROW} have not both finished a seed."
    changes = [document[s] - base[s] for s in seeds]
    significance = tested.get(DOCUMENT_ROW)
    verdict = {"↑": "significantly better", "↓": "significantly worse"}.get(
        significance.mark if significance else "", "not significantly different")
    p_values = ", ".join(f"{p:.3f}" for p in significance.p_values) if significance else "n/a"
    lines = [f"Answer ({len(seeds)} seed{'s' if len(seeds) > 1 else ''}): with the previous source sentence, "
             f"{DOCUMENT_ROW} scores {sum(changes) / len(changes):+.2f} test BLEU against {BASELINE} "
             f"({verdict}; paired bootstrap p = {p_values})."]
    cxmi, control = (seed_values(rows[DOCUMENT_ROW], m) for m in ("cxmi", "random_ctx/cxmi"))
    if cxmi and control:
        reads = all(v > 0 for v in cxmi.values()) and all(v > 0 for v in control.values())
        lines.append(f"It {'reads' if reads else 'does not read'} what that sentence says: the references "
                     f"are {_mean(cxmi):+.4f} nats/token more likely with it than with none, and "
                     f"{_mean(control):+.4f} more likely than with a sentence of another book "
                     f"({'above 0 in every seed' if reads else 'not above 0 in every seed'}).")
    return " ".join(lines)
