"""Paired significance tests (sacreBLEU's `significance` module) and the per-seed table mark."""

from __future__ import annotations

import os
import random

import pytest

from lightning_docmt.evaluation.paired_tests import paired_test, paired_tests, significance_mark

N_SENTENCES = 150
VOCAB = [f"word{i}" for i in range(200)]


def _references() -> list[str]:
    rng = random.Random(1234)
    return [" ".join(rng.choice(VOCAB) for _ in range(rng.randint(8, 16)))
            for _ in range(N_SENTENCES)]


def _drop_words(sentences: list[str], rate: float, seed: int) -> list[str]:
    """Each word kept with probability 1 - rate (at least one word per sentence)."""
    rng = random.Random(seed)
    out = []
    for sentence in sentences:
        words = sentence.split()
        out.append(" ".join([w for w in words if rng.random() >= rate] or words[:1]))
    return out


@pytest.fixture(scope="module")
def corpus() -> dict[str, list[str]]:
    refs = _references()
    baseline = _drop_words(refs, rate=0.4, seed=1)
    better = [ref if i % 5 else hyp for i, (ref, hyp) in enumerate(zip(refs, baseline))]
    return {"refs": refs, "baseline": baseline, "better": better,
            "same_quality": _drop_words(refs, rate=0.4, seed=2)}


@pytest.mark.parametrize("method", ["bs", "ar"])
def test_identical_system_is_not_significant(corpus, method):
    result = paired_test(corpus["baseline"], list(corpus["baseline"]), corpus["refs"],
                         method=method)
    assert result.delta == 0
    assert result.p_value == 1.0  # sacreBLEU alone would give 1 / 1001
    assert significance_mark([result.p_value] * 3, [result.delta] * 3) == ""


@pytest.mark.parametrize("method", ["bs", "ar"])
def test_same_quality_system_is_not_significant(corpus, method):
    result = paired_test(corpus["baseline"], corpus["same_quality"], corpus["refs"],
                         method=method)
    assert result.delta != 0
    assert result.p_value >= 0.05


@pytest.mark.parametrize("method", ["bs", "ar"])
def test_several_systems_tested_at_once_get_the_results_of_their_tests_alone(corpus, method):
    """A table tests every row of a seed against the baseline in one call (references and baseline
    scored once); each row must get the p-value and scores of its own test."""
    systems = {name: corpus[name] for name in ("better", "same_quality")}
    together = paired_tests(corpus["baseline"], {**systems, "baseline_again": list(corpus["baseline"])},
                            corpus["refs"], method=method)
    assert list(together) == ["better", "same_quality", "baseline_again"]
    for name, hyps in systems.items():
        assert together[name] == paired_test(corpus["baseline"], hyps, corpus["refs"], method=method)
    assert together["better"].p_value < 0.05 <= together["same_quality"].p_value
    assert together["baseline_again"].p_value == 1.0


def test_a_system_of_another_length_is_named(corpus):
    with pytest.raises(ValueError, match="'short'"):
        paired_tests(corpus["baseline"], {"better": corpus["better"], "short": corpus["better"][:-1]},
                     corpus["refs"])


def test_clearly_better_system_is_significant_in_both_methods_and_directions(corpus):
    up = {m: paired_test(corpus["baseline"], corpus["better"], corpus["refs"], method=m)
          for m in ("bs", "ar")}
    down = {m: paired_test(corpus["better"], corpus["baseline"], corpus["refs"], method=m)
            for m in ("bs", "ar")}
    for method in ("bs", "ar"):
        assert up[method].delta > 10 and up[method].p_value < 0.05
        assert down[method].delta == pytest.approx(-up[method].delta)
        assert down[method].p_value < 0.05
    assert up["bs"].baseline == up["ar"].baseline and up["bs"].system == up["ar"].system
    assert significance_mark([up["bs"].p_value, up["ar"].p_value],
                             [up["bs"].delta, up["ar"].delta]) == "↑"
    assert significance_mark([down["bs"].p_value], [down["bs"].delta]) == "↓"


@pytest.mark.parametrize("method", ["bs", "ar"])
def test_p_value_is_reproducible_with_the_seed(corpus, method):
    seed_before = os.environ.get("SACREBLEU_SEED")

    def run(seed: int) -> float:
        return paired_test(corpus["baseline"], corpus["same_quality"], corpus["refs"],
                           method=method, n_samples=300, seed=seed).p_value

    assert run(7) == run(7)
    assert run(7) != run(8)
    assert os.environ.get("SACREBLEU_SEED") == seed_before  # set only while the test runs


def test_signature_names_method_samples_seed_and_bleu_setting(corpus):
    bs = paired_test(corpus["baseline"], corpus["better"], corpus["refs"])
    ar = paired_test(corpus["baseline"], corpus["better"], corpus["refs"], method="ar",
                     n_samples=500, seed=3, lowercase=True, tokenize="none")
    assert (bs.method, ar.method) == ("bs", "ar")
    for part in ("bs:1000", "seed:12345", "tok:13a", "case:mixed", "nrefs:1"):
        assert part in bs.signature
    for part in ("ar:500", "seed:3", "tok:none", "case:lc"):
        assert part in ar.signature
    assert "bs:" not in ar.signature


@pytest.mark.parametrize("p_values, deltas, mark", [
    ([0.001, 0.01, 0.04], [1.2, 0.3, 0.8], "↑"),
    ([0.001, 0.01, 0.04], [-1.2, -0.3, -0.8], "↓"),
    ([0.001, 0.06, 0.04], [1.2, 0.3, 0.8], ""),  # one seed not significant
    ([0.001, 0.01, 0.04], [1.2, -0.3, 0.8], ""),  # mixed signs
    ([0.001, 0.05], [1.0, 1.0], ""),  # p == alpha is not below alpha
    ([0.001], [0.0], ""),
    ([], [], ""),
])
def test_significance_mark(p_values, deltas, mark):
    assert significance_mark(p_values, deltas) == mark


def test_significance_mark_alpha_and_length_mismatch():
    assert significance_mark([0.03], [1.0], alpha=0.01) == ""
    with pytest.raises(ValueError, match="2 p-values but 1 deltas"):
        significance_mark([0.01, 0.01], [1.0])


@pytest.mark.parametrize("method", ["bs", "ar"])
def test_lowercase_ignores_a_case_only_difference(corpus, method):
    shouted = [hyp.upper() for hyp in corpus["baseline"]]
    cased = paired_test(corpus["baseline"], shouted, corpus["refs"], method=method)
    assert cased.delta < -10 and cased.p_value < 0.05
    lowered = paired_test(corpus["baseline"], shouted, corpus["refs"], method=method,
                          lowercase=True)
    assert lowered.system == lowered.baseline == pytest.approx(cased.baseline)
    assert lowered.p_value >= 0.05


def test_length_mismatch_and_bad_arguments_raise(corpus):
    refs = corpus["refs"][:3]
    with pytest.raises(ValueError, match="3 baseline hypotheses, 2 hypotheses of 'system' and 3 ref"):
        paired_test(corpus["baseline"][:3], corpus["better"][:2], refs)
    with pytest.raises(ValueError, match="2 references"):
        paired_test(corpus["baseline"][:3], corpus["better"][:3], refs[:2])
    with pytest.raises(ValueError, match="unknown test method 'ttest'"):
        paired_test(corpus["baseline"][:3], corpus["better"][:3], refs, method="ttest")
    with pytest.raises(ValueError, match="must be positive"):
        paired_test(corpus["baseline"][:3], corpus["better"][:3], refs, seed=0)
    with pytest.raises(ValueError, match="no sentences"):
        paired_test([], [], [])
