"""Significance of each table row's test BLEU against the table's `baseline:` row, seed by seed.

For every seed that both the row and the baseline finished, the row's test hypotheses are tested
against the baseline's of the same seed on the same references (`test.hyp.txt` / `test.ref.txt` of
each run, plain or compressed as archived; `valid.*` for a run that reports on valid,
`data.report_split`) by paired bootstrap
resampling (`evaluation/paired_tests.py`, sacreBLEU's module), with the BLEU settings of the row's
run (tokenizer, case). The cell is marked only when the difference is significant (p < 0.05) and in
the same direction in *every* seed (as Yamagishi & Komachi mark their tables): one lucky seed is not
a result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from omegaconf import OmegaConf

from lightning_docmt.data.languages import bleu_tokenizer
from lightning_docmt.evaluation.paired_tests import paired_test, significance_mark
from lightning_docmt.line_files import read_lines
from lightning_docmt.tables.summaries import RowSummary, RunRecord


@dataclass(frozen=True)
class RowSignificance:
    p_values: tuple[float, ...]  # per common finished seed
    deltas: tuple[float, ...]  # row - baseline BLEU, per seed
    seeds: tuple[int, ...]  # those seeds

    @property
    def mark(self) -> str:
        return significance_mark(self.p_values, self.deltas)


def paired_against(baseline: RunRecord, record: RunRecord) -> tuple[float, float]:
    """(p-value, BLEU delta) of `record`'s test (or valid) hypotheses against `baseline`'s."""
    cfg = OmegaConf.load(record.run_dir / "config.yaml")
    split = cfg.data.get("report_split", "test")
    refs = read_lines(record.run_dir / f"{split}.ref.txt")
    if read_lines(baseline.run_dir / f"{split}.ref.txt") != refs:
        raise ValueError(f"{record.run_dir} and {baseline.run_dir} were tested on different references")
    result = paired_test(read_lines(baseline.run_dir / f"{split}.hyp.txt"),
                         read_lines(record.run_dir / f"{split}.hyp.txt"),
                         refs, tokenize=bleu_tokenizer(cfg.eval, cfg.data), lowercase=cfg.eval.lowercase)
    return result.p_value, result.delta


def row_significance(summaries: Sequence[RowSummary], baseline: str) -> dict[str, RowSignificance]:
    """Per row other than `baseline`, its tests against the baseline over their common finished seeds."""
    base = {r.seed: r for s in summaries if s.row.name == baseline for r in s.records if r.succeeded}
    out: dict[str, RowSignificance] = {}
    for summary in summaries:
        if summary.row.name == baseline:
            continue
        tests = [(*paired_against(base[r.seed], r), r.seed) for r in summary.records
                 if r.succeeded and r.seed in base]
        if tests:
            p_values, deltas, seeds = zip(*tests)
            out[summary.row.name] = RowSignificance(p_values, deltas, seeds)
    return out
