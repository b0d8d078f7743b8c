"""Fake runs of a significance table: `fake_run` stands in for training a row and writes
hand-made test hypotheses, so that the table's significance marks are known in advance.

The baseline drops about half the words of each reference, `better` is the reference itself,
`worse` keeps one word, `same` is the baseline's output, and `lucky` is better with seed 1 only.
`near` corrects just enough baseline sentences to be significant in each seed, `near_split` one
sentence fewer in seed 2: a cell at the threshold.
"""

from __future__ import annotations

import random
from pathlib import Path

from lightning_docmt.evaluation.paired_tests import paired_test

WORDS = "the a river stone light night sings walks old new cat dog house tree runs sees".split()
REFERENCES = [" ".join(random.Random(i).choices(WORDS, k=12)) for i in range(120)]
ROWS = ("baseline", "better", "worse", "same", "lucky", "near", "near_split")
TABLE = {
    "id": "unit.sig", "title": "Significance", "metrics": ["test/bleu"],
    "base": ["profile=tiny", "eval.lowercase=true"], "seeds": [1, 2], "baseline": "baseline",
    "rows": [{"name": name, "overrides": []} for name in ROWS],
}


def dropped(sentence: str, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(w for w in sentence.split() if rng.random() < 0.5)


def baseline_hypotheses(seed: int) -> list[str]:
    return [dropped(r, seed * 1000 + i) for i, r in enumerate(REFERENCES)]


def improved(seed: int, k: int) -> list[str]:
    """The baseline with its first `k` hypotheses replaced by their references."""
    return REFERENCES[:k] + baseline_hypotheses(seed)[k:]


def p_value(seed: int, k: int) -> float:
    return paired_test(baseline_hypotheses(seed), improved(seed, k), REFERENCES, lowercase=True).p_value


def threshold_k(seed: int) -> int:
    """The fewest corrected sentences that make the row significant (p < 0.05) in `seed`: with
    one fewer it is not (bisection; p falls as k grows over this range)."""
    low, high = 0, len(REFERENCES)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if p_value(seed, middle) < 0.05 else (middle, high)
    return high


NEAR = {seed: threshold_k(seed) for seed in TABLE["seeds"]}


def hypotheses(row: str, seed: int) -> list[str]:
    baseline = baseline_hypotheses(seed)
    if row == "near":  # just significant in both seeds
        return improved(seed, NEAR[seed])
    if row == "near_split":  # just significant in seed 1, just not in seed 2
        return improved(seed, NEAR[seed] - (seed == 2))
    if row == "better" or (row == "lucky" and seed == 1):
        return list(REFERENCES)
    if row == "worse":
        return [r.split()[0] for r in REFERENCES]
    return baseline  # baseline, same, and lucky with seed 2


def fake_run(cfg, run_dir: Path) -> dict:
    """The files a run writes for the split it reports on (`data.report_split`: test, or valid)."""
    row, seed, split = cfg.logging.name, cfg.train.seed, cfg.data.report_split
    (run_dir / f"{split}.hyp.txt").write_text("".join(h + "\n" for h in hypotheses(row, seed)))
    (run_dir / f"{split}.ref.txt").write_text("".join(r + "\n" for r in REFERENCES))
    return {f"{split}/bleu": float(len(row))}
