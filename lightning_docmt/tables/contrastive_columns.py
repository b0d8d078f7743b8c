"""Table columns `contrastive:<suite>[:<key>]`: a contrastive suite scored for every row.

`<suite>` is an `eval.contrastive` entry without a colon: a published suite by name (`contrapro`,
`discevalmt`, `scat`, read from `eval.suites_dir`), `corpus`, or a suite file. Every row of the
table gets the suite added to its `eval.contrastive` (`with_suites`), and the column shows the
run's `<key>` for that suite (default `accuracy`; also `random_ctx/accuracy`, a phenomenon such as
`pronoun_il`, `chance`, `majority`, and for a suite that records distances to the antecedent
`distance/<d>` or `distance/<d>/n`). The table's footnote gives each suite's chance and majority
rates (`footnote`), so that no accuracy is printed without them. In a selection table (`evaluate:
valid`) only `corpus` may be a column, and it is the corpus' valid-split suite.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from omegaconf import DictConfig

from lightning_docmt.evaluation.contrastive_scoring import CORPUS_SUITE
from lightning_docmt.evaluation.named_suites import NAMED_SUITES

PREFIX = "contrastive:"


@dataclass(frozen=True)
class ContrastiveColumn:
    entry: str  # the eval.contrastive entry
    key: str  # what of the suite's results the column shows

    @property
    def suite_name(self) -> str:
        """The suite's name in metric names (`evaluation/contrastive_scoring.py`)."""
        if self.entry in NAMED_SUITES or self.entry == CORPUS_SUITE:
            return self.entry
        return Path(self.entry).stem


def parse_column(metric: str) -> Optional[ContrastiveColumn]:
    """`contrastive:scat:random_ctx/accuracy` -> (scat, random_ctx/accuracy); None for other metrics."""
    if not metric.startswith(PREFIX):
        return None
    entry, _, key = metric[len(PREFIX):].partition(":")
    return ContrastiveColumn(entry, key or "accuracy")


def is_corpus_column(metric: str) -> bool:
    """Whether `metric` is a column of the corpus' own suite (`contrastive:corpus[:<key>]`), the one
    suite a selection table (`evaluate: valid`) scores, on the valid split."""
    column = parse_column(metric)
    return column is not None and column.entry == CORPUS_SUITE


def check_column(metric: str) -> Optional[str]:
    """Why `metric` is not a valid contrastive column, or None."""
    column = parse_column(metric)
    if column is not None and not column.entry:
        return f"'{metric}': expected contrastive:<suite>[:<key>]"
    return None


def with_suites(cfg: DictConfig, metrics: Sequence[str]) -> None:
    """Add the suites of the table's contrastive columns to `cfg.eval.contrastive` (once each)."""
    entries = [c.entry for c in map(parse_column, metrics) if c is not None]
    cfg.eval.contrastive = list(dict.fromkeys([*cfg.eval.contrastive, *entries]))


def column_value(metrics: Mapping[str, Any], metric: str) -> Any:
    """The value of column `metric` in a run's metrics. A run with one suite names its metrics
    without the suite (`contrastive/accuracy`), one with several with it (`contrastive/scat/accuracy`);
    a selection table's run prefixes them with `val/` (scored on the valid split)."""
    column = parse_column(metric)
    if column is None:
        return metrics.get(metric)
    for scope in ("", "val/"):
        for name in (f"{scope}contrastive/{column.suite_name}/{column.key}", f"{scope}contrastive/{column.key}"):
            if metrics.get(name) is not None:
                return metrics[name]
    return None


def footnote(metrics_columns: Sequence[str], records_metrics: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per suite of the contrastive columns: its chance and majority rates, read from the
    first run that has them (they depend on the suite only)."""
    lines = []
    suites = dict.fromkeys(c.entry for c in map(parse_column, metrics_columns) if c is not None)
    for entry in suites:
        rates = {}
        for key in ("chance", "majority"):
            rates[key] = next((v for m in records_metrics
                               if (v := column_value(m, f"{PREFIX}{entry}:{key}")) is not None), None)
        if rates["chance"] is None:
            continue
        lines.append(f"- `{PREFIX}{entry}`: chance {rates['chance']:.3f}, majority "
                     f"{rates['majority']:.3f} (always the answer word most often correct in the "
                     "suite, ignoring context and sentence).")
    return lines
