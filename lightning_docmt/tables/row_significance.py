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
from typing import Mapping, Sequence

from omegaconf import OmegaConf

from lightning_docmt.data.languages import bleu_tokenizer
from lightning_docmt.evaluation.paired_tests import paired_tests, significance_mark
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


def tested_against(baseline: RunRecord, records: Mapping[str, RunRecord]) -> dict[str, tuple[float, float]]:
    """Per row, (p-value, BLEU delta) of its record's test (or valid) hypotheses against
    `baseline`'s, the records of one seed. Records whose runs score BLEU alike (split, tokenizer,
    case) are tested in one `paired_tests` call: the references and the baseline are scored once."""
    settings: dict[tuple[str, str, bool], dict[str, RunRecord]] = {}
    for row, record in records.items():
        cfg = OmegaConf.load(record.run_dir / "config.yaml")
        split = cfg.data.get("report_split", "test")
        key = (split, bleu_tokenizer(cfg.eval, cfg.data), bool(cfg.eval.lowercase))
        settings.setdefault(key, {})[row] = record
    out: dict[str, tuple[float, float]] = {}
    for (split, tokenize, lowercase), alike in settings.items():
        refs = read_lines(baseline.run_dir / f"{split}.ref.txt")
        for record in alike.values():
            if read_lines(record.run_dir / f"{split}.ref.txt") != refs:
                raise ValueError(f"{record.run_dir} and {baseline.run_dir} were tested on different references")
        results = paired_tests(read_lines(baseline.run_dir / f"{split}.hyp.txt"),
                               {row: read_lines(record.run_dir / f"{split}.hyp.txt") for row, record in alike.items()},
                               refs, tokenize=tokenize, lowercase=lowercase)
        out.update({row: (result.p_value, result.delta) for row, result in results.items()})
    return out


def row_significance(summaries: Sequence[RowSummary], baseline: str) -> dict[str, RowSignificance]:
    """Per row other than `baseline`, its tests against the baseline over their common finished seeds."""
    base = {r.seed: r for s in summaries if s.row.name == baseline for r in s.records if r.succeeded}
    per_seed: dict[int, dict[str, RunRecord]] = {}
    for summary in summaries:
        if summary.row.name != baseline:
            for r in summary.records:
                if r.succeeded and r.seed in base:
                    per_seed.setdefault(r.seed, {})[summary.row.name] = r
    tested = {(row, seed): outcome for seed, records in per_seed.items()
              for row, outcome in tested_against(base[seed], records).items()}
    out: dict[str, RowSignificance] = {}
    for summary in summaries:
        tests = [(*tested[(summary.row.name, r.seed)], r.seed) for r in summary.records
                 if (summary.row.name, r.seed) in tested]
        if tests:
            p_values, deltas, seeds = zip(*tests)
            out[summary.row.name] = RowSignificance(p_values, deltas, seeds)
    return out
