"""Published contrastive suites by name (evaluation/named_suites.py) and their chance and majority
rates (data/contrastive.chance_rates), on the real files in ../shared/data/contrastive."""

from __future__ import annotations

import pytest

from lightning_docmt.data.contrastive_suites import chance_rates
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.evaluation.named_suites import NAMED_SUITES, load_named_suite, named_suite
from tests.helpers.paths import CONTRASTIVE_SUITES

SUITES = CONTRASTIVE_SUITES


def example(candidates: list[str], label: int = 0) -> dict:
    return {"id": len(candidates), "src": "s", "src_context": [], "tgt_context": [],
            "candidates": candidates, "label": label, "phenomenon": "p"}


def test_chance_is_the_mean_of_one_over_the_number_of_candidates():
    rates = chance_rates([example(["a x", "b x"]), example(["a x", "b x", "c x"])])
    assert rates["chance"] == pytest.approx((1 / 2 + 1 / 3) / 2)


def test_majority_always_takes_the_answer_most_often_correct():
    # `il` is correct twice and `elle` once: the rule always answers `il` (2 of 3 right); on the
    # ils/elles example neither answer was ever correct elsewhere... and `elles` once: it answers
    # `elles`, right. Total 3 of 4.
    examples = [example(["il dort", "elle dort"]), example(["il mange", "elle mange"]),
                example(["il lit", "elle lit"], label=1), example(["ils vont", "elles vont"], label=1)]
    assert chance_rates(examples) == {"chance": 0.5, "majority": 0.75}


def test_majority_is_chance_on_a_balanced_suite_and_ties_score_one_over_k():
    examples = [example(["il dort", "elle dort"]), example(["il dort", "elle dort"], label=1)]
    assert chance_rates(examples)["majority"] == 0.5


def test_answers_survive_a_re_tokenised_variant():
    # ContraPro's variants move punctuation around the swapped pronoun: the answers stay the words
    # `sie` / `er` / `es`, so the three examples share them and `sie` (correct twice) wins.
    examples = [example(["Sie ist da.", "Er ist da .", "Es ist da ."]),
                example(["Wo ist sie?", "Wo ist er ?", "Wo ist es ?"]),
                example(["Sie kam.", "Er kam .", "Es kam ."], label=1)]
    assert chance_rates(examples)["majority"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("name, n, majority", [
    ("discevalmt", 400, 0.5),  # balanced by design
    # SCAT's test split: il 322 / elle 298 correct, and every plural is `elles` (377): always `il`
    # against `elle` and `elles` against `ils` gets (322 + 377) / 997.
    ("scat", 997, (322 + 377) / 997),
    # ContraPro: 4,000 examples per reference pronoun; as answer words es and sie are correct
    # 3,923 times each, er 3,787 (the rest changes an inflected word too: er+ihn, es+ihm, ...), so
    # the rule is barely above chance.
    ("contrapro", 12000, 0.338),
])
def test_the_published_suites_with_their_rates(name, n, majority):
    suite_name, examples = load_named_suite(name, str(SUITES), ("en", None))
    assert suite_name == name and len(examples) == n
    rates = chance_rates(examples)
    assert rates["majority"] == pytest.approx(majority, abs=1e-9)


def test_contrapro_chance_counts_the_groups_with_more_than_three_candidates():
    _, examples = load_named_suite("contrapro", str(SUITES))
    sizes = [len(e["candidates"]) for e in examples]
    assert min(sizes) == 3 and max(sizes) > 3  # a few groups list a pronoun variant twice over
    assert chance_rates(examples)["chance"] == pytest.approx(sum(1 / k for k in sizes) / len(sizes))
    assert chance_rates(examples)["chance"] < 1 / 3


def test_name_and_folder_forms():
    assert named_suite("scat") == (NAMED_SUITES["scat"], None)
    assert named_suite(f"scat:{SUITES / 'scat-enfr'}") == (NAMED_SUITES["scat"], SUITES / "scat-enfr")
    assert named_suite("scat.jsonl") is None and named_suite("corpus") is None
    name, examples = load_named_suite(f"discevalmt:{SUITES / 'bawden-discevalmt-enfr'}", None)
    assert name == "discevalmt" and len(examples) == 400


@pytest.mark.parametrize("entry, suites_dir, languages, match", [
    ("scat", None, (None, None), "set eval.suites_dir"),
    ("scat", "/nonexistent", (None, None), "no folder /nonexistent/scat-enfr"),
    ("contrapro", str(SUITES), ("en", "fr"), "target language is 'de', the run's is 'fr'"),
    ("discevalmt", str(SUITES), ("de", "fr"), "source language is 'en', the run's is 'de'"),
])
def test_bad_named_suites_are_one_error_naming_the_key(entry, suites_dir, languages, match):
    with pytest.raises(DocMTInputError, match=match) as err:
        load_named_suite(entry, suites_dir, languages)
    assert err.value.key == "eval.contrastive"
