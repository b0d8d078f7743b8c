"""What a table's figure shows of each row (docs/design.md section 10): the effect, not the absolute.

Our corpora are not the papers', so our absolute BLEU beside the paper's (9.27 beside 45.97) hides
what matters, the change a row makes against its baseline (9.27 against 9.32). For a *score* (BLEU,
chrF, METEOR, an accuracy) in a table with a baseline row, each other row is shown as its change
against the baseline, seed by seed (row - baseline of the same seed, over the seeds both finished),
beside the paper's change (the row's paper number - the baseline row's). Columns that are already
measured against something of the row itself (CXMI, the random-context controls, initial damage, a
stack's branches scored alone) and speeds are shown as they are.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

from lightning_docmt.evaluation.branch_usage import BRANCH_METRIC_MEANINGS
from lightning_docmt.evaluation.context_usage import METRIC_MEANINGS
from lightning_docmt.tables import contrastive_columns
from lightning_docmt.tables.summaries import RowSummary, values_by_seed

DIAGNOSTIC_MEANINGS = {**METRIC_MEANINGS, **BRANCH_METRIC_MEANINGS}
"""The columns a row measures against its own model, each explained under the tables that show it."""
SPLIT_PREFIXES = ("val/", "valid/", "test/")
SCORE_WORDS = ("bleu", "chrf", "meteor", "accuracy", "oracle_context")
LABELS = {"bleu": "BLEU", "chrf": "chrF", "meteor": "METEOR", "cxmi": "CXMI (nats/token)",
          "random_ctx/cxmi": "random-context CXMI (nats/token)",
          "random_ctx/bleu_delta": "random-context BLEU change",
          "random_ctx/bleu_floor": "random-context BLEU noise floor",
          "initial_damage": "initial damage (valid NLL, nats/token)",
          "branch/original/bleu": "BLEU on R alone", "branch/stack/bleu": "BLEU on S alone",
          "speed/train_tokens_per_s": "training target tokens/s", "speed/decode_sents_per_s": "decoded sentences/s"}


def bare(metric: str) -> str:
    """`valid/random_ctx/cxmi` -> `random_ctx/cxmi`: the metric without its split."""
    return next((metric[len(p):] for p in SPLIT_PREFIXES if metric.startswith(p)), metric)


def metric_label(metric: str) -> str:
    """A readable axis name: `test/bleu` -> 'test BLEU', `valid/cxmi` -> 'valid CXMI (nats/token)',
    `val/bleu@600` -> 'val BLEU@600', `contrastive:corpus:pronoun_d1` -> 'corpus: pronoun_d1 accuracy'."""
    if contrastive_columns.parse_column(metric) is not None:
        suite, _, part = metric[len(contrastive_columns.PREFIX):].partition(":")
        if not part:
            return f"{suite} accuracy"
        part = part.replace("random_ctx/", "random-context ")
        return f"{suite}: {part}" if "accuracy" in part else f"{suite}: {part} accuracy"
    name, at, when = bare(metric).partition("@")
    split = metric[: len(metric) - len(bare(metric))].rstrip("/")
    readable = LABELS.get(name, name.replace("_", " ").replace("/", " "))
    return f"{split} {readable}{at}{when}".strip()


def is_score(metric: str) -> bool:
    """Whether a row's value is read against the baseline row's (a score), rather than as it is (a
    column measured against the row's own model: CXMI, the controls, initial damage; speeds)."""
    name = bare(metric)
    return name not in DIAGNOSTIC_MEANINGS and "random_ctx" not in name and not name.startswith("speed/") and \
        (contrastive_columns.parse_column(metric) is not None or any(w in name for w in SCORE_WORDS))


def seed_values(summary: RowSummary, metric: str) -> dict[int, float]:
    """seed -> the finite value of `metric` in each finished run of the row."""
    return values_by_seed(summary.records, metric)


@dataclass(frozen=True)
class Effect:
    """One row's bar in a panel: per-seed values (changes against the baseline in a change panel),
    and the paper's value (its change, in a change panel) when the paper gives it."""

    row: str
    seeds: dict[int, float]
    paper: float | None

    @property
    def mean(self) -> float:
        return statistics.fmean(self.seeds.values())

    @property
    def sd(self) -> float | None:
        return statistics.stdev(self.seeds.values()) if len(self.seeds) >= 2 else None


@dataclass(frozen=True)
class Panel:
    metric: str
    against: str | None  # the baseline row of a change panel; None: values as they are
    effects: tuple[Effect, ...]

    @property
    def has_paper(self) -> bool:
        return any(e.paper is not None for e in self.effects)

    def effect_of(self, row: str) -> Effect | None:
        """The row's bar; None for a row without one (no finished run, or the baseline itself)."""
        return next((e for e in self.effects if e.row == row), None)


def metric_panel(summaries: Sequence[RowSummary], metric: str, baseline: str | None) -> Panel:
    """The rows with finished runs, as changes against `baseline` when the metric is a score and the
    baseline has values (the baseline's own bar, 0, is left out), else as they are."""
    base = next((s for s in summaries if s.row.name == baseline), None)
    base_values = seed_values(base, metric) if base is not None else {}
    if is_score(metric) and base_values:
        base_paper = base.row.paper.get(metric)
        effects = []
        for s in summaries:
            mine = seed_values(s, metric)
            common = {seed: mine[seed] - base_values[seed] for seed in mine if seed in base_values}
            if s is base or not common:
                continue
            paper = s.row.paper.get(metric)
            effects.append(Effect(s.row.name, common, None if paper is None or base_paper is None
                                  else paper - base_paper))
        return Panel(metric, baseline, tuple(effects))
    effects = [Effect(s.row.name, seed_values(s, metric), s.row.paper.get(metric)) for s in summaries]
    return Panel(metric, None, tuple(e for e in effects if e.seeds))
