"""Paired significance tests of corpus BLEU with sacreBLEU's own `sacrebleu.significance` module.

- `paired_test`: one system against a baseline on the same references, by paired bootstrap
  resampling ("bs", Koehn 2004) or paired approximate randomization ("ar", Riezler & Maxwell 2005);
  `paired_tests`: several systems against one baseline at once, with the same p-values.
- `significance_mark`: the table mark of a cell run with several seeds: "↑" / "↓" only when the
  difference is significant, in the same direction, in every seed (as Yamagishi & Komachi do).

Both sacreBLEU tests are two-sided: the test statistic is the absolute BLEU difference
|system - baseline|, so a small p-value says the systems differ, and the sign of the difference
says which one is better.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

METHODS = ("bs", "ar")


@dataclass(frozen=True)
class PairedResult:
    """Corpus BLEU of both systems, the p-value of their difference and how it was obtained.

    `signature` is sacreBLEU's BLEU signature extended with the test's parameters, e.g.
    `nrefs:1|bs:1000|seed:12345|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`.
    """

    baseline: float
    system: float
    p_value: float
    method: str
    signature: str

    @property
    def delta(self) -> float:
        """System minus baseline BLEU."""
        return self.system - self.baseline


def paired_test(baseline_hyps: Sequence[str], system_hyps: Sequence[str], refs: Sequence[str], *,
                tokenize: str = "13a", lowercase: bool = False, method: str = "bs",
                n_samples: int = 1000, seed: int = 12345) -> PairedResult:
    """Test whether `system_hyps` differs in corpus BLEU from `baseline_hyps` (one reference each).

    BLEU is `sacrebleu.metrics.BLEU(tokenize=..., lowercase=...)`, the setting of the table's BLEU.
    `method`, with `n_samples` resamples or trials:

    - "bs", paired bootstrap resampling (Koehn 2004): draw test sets of the same size with
      replacement, score both systems on each. sacreBLEU's p-value is *not* the fraction of
      resamples where the system fails to beat the baseline (Koehn's one-sided count); following Moses'
      `bootstrap-hypothesis-difference-significance.pl`, it shifts the resampled absolute
      differences |d_i| to mean zero (the null hypothesis) and returns
      p = (#{i : |d_i| - mean_j |d_j| > |delta|} + 1) / (n_samples + 1).
    - "ar", approximate randomization (Riezler & Maxwell 2005): in each trial swap the two
      systems' outputs of each sentence with probability 1/2 and return
      p = (#{trials : |BLEU(A') - BLEU(B')| > |delta|} + 1) / (n_samples + 1).

    When the two corpus scores are equal (e.g. identical outputs) there is no difference to test
    and p is 1.0: sacreBLEU counts only resamples *strictly* more extreme than |delta|, so it would
    give identical systems the smallest p-value, 1 / (n_samples + 1), and call them different.

    Route: the public `sacrebleu.significance.PairedTest` (as the `sacrebleu` command line uses it)
    instead of the private `_paired_bs_test` / `_paired_ar_test`, which need the baseline's
    statistics from private `Metric` methods. `PairedTest` takes its seed only from the
    environment variable `SACREBLEU_SEED`, so it is set while the test is built and run (not
    thread-safe), and it treats seed 0 as "no seed", so the seed must be positive.
    """
    return paired_tests(baseline_hyps, {"system": system_hyps}, refs, tokenize=tokenize, lowercase=lowercase,
                        method=method, n_samples=n_samples, seed=seed)["system"]


def paired_tests(baseline_hyps: Sequence[str], systems: Mapping[str, Sequence[str]], refs: Sequence[str], *,
                 tokenize: str = "13a", lowercase: bool = False, method: str = "bs",
                 n_samples: int = 1000, seed: int = 12345) -> dict[str, PairedResult]:
    """`paired_test` of each of `systems` (name -> hypotheses) against one baseline, in one sacreBLEU
    `PairedTest`: the references' statistics (cached by the metric) and the baseline's are computed
    once, not once per system. Each system's p-value is the one `paired_test` gives it alone:
    sacreBLEU seeds each system's resampling afresh with the same seed."""
    if not refs:
        raise ValueError("no sentences to test")
    for name, hyps in systems.items():
        if not len(baseline_hyps) == len(hyps) == len(refs):
            raise ValueError(f"{len(baseline_hyps)} baseline hypotheses, {len(hyps)} hypotheses of {name!r} "
                             f"and {len(refs)} references: the paired test needs one of each per sentence")
    if method not in METHODS:
        raise ValueError(f"unknown test method {method!r}; expected one of {', '.join(METHODS)}")
    if n_samples < 1 or seed < 1:
        raise ValueError(f"n_samples and seed must be positive, got {n_samples} and {seed}")
    metric = BLEU(tokenize=tokenize, lowercase=lowercase, references=[list(refs)])
    with _sacrebleu_seed(seed):
        signatures, scores = PairedTest(
            [("baseline", list(baseline_hyps)), *((name, list(hyps)) for name, hyps in systems.items())],
            {"BLEU": metric}, references=None, test_type=method, n_samples=n_samples)()
    baseline, *results = scores["BLEU"]
    return {name: PairedResult(baseline=float(baseline.score), system=float(system.score),
                               p_value=1.0 if system.score == baseline.score else float(system.p_value),
                               method=method, signature=str(signatures["BLEU"]))
            for name, system in zip(systems, results)}


def significance_mark(p_values_per_seed: Sequence[float], deltas_per_seed: Sequence[float],
                      alpha: float = 0.05) -> str:
    """"↑" / "↓" when the difference is significant and positive / negative in every seed.

    `deltas_per_seed` are system minus baseline BLEU. Every seed, not most or the mean: a single
    lucky seed is not a result, and a difference counts only if it survives the randomness of
    training (Yamagishi & Komachi). Mixed signs, one non-significant seed, or no seeds give "".
    """
    if len(p_values_per_seed) != len(deltas_per_seed):
        raise ValueError(f"{len(p_values_per_seed)} p-values but {len(deltas_per_seed)} deltas")
    if not p_values_per_seed or any(p >= alpha for p in p_values_per_seed):
        return ""
    if all(delta > 0 for delta in deltas_per_seed):
        return "↑"
    if all(delta < 0 for delta in deltas_per_seed):
        return "↓"
    return ""


@contextmanager
def _sacrebleu_seed(seed: int) -> Iterator[None]:
    """Set `SACREBLEU_SEED` (read by `PairedTest`) for the duration of the block."""
    previous = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if previous is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = previous
