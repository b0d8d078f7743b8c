"""Changes between rows (`changes:` in a table file): what a paper states as one row against another
that is not the table's baseline, or as the mean of such changes (docs/design.md section 3).

Papers often give a row only as a step from the row above (Donato et al. 2021, Table 5: "+ previous
sentence +0.44" over "+ BERT source"), or as a model's gain from a change of data and the mean
gain of a family of models (their Table 6: the Transformer +1.61 from the new documents, the
sentence-level models 1.58 on average). A change names its pairs, each a row and the row it is
measured against:

    changes:
      - name: transformer_gain
        of: [[transformer_plus, transformer]]      # [row, against]: row minus against
        paper: {valid/bleu: 1.61}                  # the paper's change; optional, per metric
        notes: free text                           # optional
      - name: sentence_models
        of: [[transformer_plus, transformer], [multi_source_plus, multi_source]]
        paper: {valid/bleu: 1.58}

In a seed, the change is the mean over its pairs of row - against, both of that seed; a seed counts
only when every row of every pair finished it, so a mean never mixes seeds (`change_results.py`
measures, tests and writes them). This module reads the section; errors name the file and line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from lightning_docmt.errors import DocMTInputError
from lightning_docmt.tables.values import is_finite_number

CHANGE_KEYS = ("name", "of", "paper", "notes")


@dataclass(frozen=True)
class Change:
    name: str
    pairs: tuple[tuple[str, str], ...]  # (row, the row it is measured against)
    paper: dict[str, float]  # the paper's change, for the metrics it gives one
    notes: str

    @property
    def rows(self) -> set[str]:
        return {row for pair in self.pairs for row in pair}

    def label(self) -> str:
        """`a − b` for one pair, `mean(a − b, c − d)` for several."""
        steps = ", ".join(f"{row} − {against}" for row, against in self.pairs)
        return steps if len(self.pairs) == 1 else f"mean({steps})"


def parse_changes(raw: Any, metrics: Sequence[str], rows: Sequence[str],
                  fail: Callable[..., DocMTInputError]) -> tuple[Change, ...]:
    """The `changes:` list of a table whose metrics are `metrics` and rows `rows`, checked."""
    if not (isinstance(raw, list) and raw):
        raise fail("'changes' must be a non-empty list of {name, of, paper}", "changes")
    changes = tuple(_parse_change(entry, i, metrics, rows, fail) for i, entry in enumerate(raw))
    names = [c.name for c in changes]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise fail(f"change '{name}': duplicate change name", "changes", i)
    return changes


def _parse_change(entry: Any, index: int, metrics: Sequence[str], rows: Sequence[str],
                  fail: Callable[..., DocMTInputError]) -> Change:
    if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and entry["name"]):
        raise fail(f"changes[{index}] must be a mapping with a 'name' and 'of'", "changes", index)
    label = f"change '{entry['name']}'"
    for key in entry:
        if key not in CHANGE_KEYS:
            raise fail(f"{label}: unknown key '{key}' (keys: {', '.join(CHANGE_KEYS)})", "changes", index, key)
    pairs = entry.get("of")
    if not (isinstance(pairs, list) and pairs
            and all(isinstance(p, list) and len(p) == 2 and all(isinstance(r, str) for r in p) for p in pairs)):
        raise fail(f"{label}: 'of' must be a non-empty list of [row, against] pairs", "changes", index, "of")
    for i, (row, against) in enumerate(pairs):
        for name in (row, against):
            if name not in rows:
                raise fail(f"{label}: no row '{name}' (rows: {', '.join(rows)})", "changes", index, "of", i)
        if row == against:
            raise fail(f"{label}: row '{row}' is measured against itself", "changes", index, "of", i)
    paper_raw = entry.get("paper") or {}
    if not isinstance(paper_raw, dict):
        raise fail(f"{label}: 'paper' must map metrics to numbers or null", "changes", index, "paper")
    paper: dict[str, float] = {}
    for metric, value in paper_raw.items():
        if metric not in metrics:
            raise fail(f"{label}: paper change for '{metric}', which is not in the table's metrics",
                       "changes", index, "paper", metric)
        if value is not None and not is_finite_number(value):
            raise fail(f"{label}: paper change of '{metric}' must be a number or null, got {value!r}",
                       "changes", index, "paper", metric)
        if value is not None:
            paper[metric] = float(value)
    notes = entry.get("notes", "")
    if not isinstance(notes, str):
        raise fail(f"{label}: 'notes' must be a string", "changes", index, "notes")
    return Change(name=entry["name"], pairs=tuple((row, against) for row, against in pairs),
                  paper=paper, notes=notes)
