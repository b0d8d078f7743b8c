"""The contrastive scoring report (evaluation/contrastive_scoring.py): accuracy per distance to the
antecedent, repeated candidates merged before scoring, and their metrics and text lines.

The model is an untrained tiny Transformer (random weights): what is checked is how its candidate
scores become the report, with the expected figures recomputed from `score_suite`'s scores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lightning_docmt.config.registry import build_model
from lightning_docmt.evaluation.contrastive_scoring import (
    controlled_result,
    report_lines,
    score_suite,
    suite_metrics,
)
from lightning_docmt.inference.loaded_model import LoadedModel
from lightning_docmt.tables.contrastive_columns import column_value
from tests.helpers.cli_run import docmt, write_config
from tests.helpers.corpus_fixtures import WORD_VOCAB as VOCAB
from tests.helpers.stage_fits import tiny_config

SOURCES = ["the cat sees a dog", "a big tree and a river", "old light sings", "the red house",
           "small stone walks", "blue night and green tree", "new dog runs", "the old cat"]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    cfg = tiny_config(tmp_path_factory.mktemp("report"), "model.arch=transformer")
    torch.manual_seed(0)  # its weights, and so its hits, must not depend on what the worker ran before
    return LoadedModel(build_model(cfg.model, len(VOCAB), len(VOCAB)).eval(), cfg, VOCAB, VOCAB)


def example(i: int, candidates: list[str], label: int = 0, **extra) -> dict:
    return {"id": i, "src": SOURCES[i % len(SOURCES)], "src_context": ["the dog"],
            "tgt_context": ["DOG THE"], "candidates": candidates, "label": label,
            "phenomenon": "pronoun", **extra}


def hits(model: LoadedModel, examples: list[dict]) -> list[bool]:
    """Whether the model scores each example's labelled candidate strictly above the others."""
    return [all(scores[ex["label"]] > s for j, s in enumerate(scores) if j != ex["label"])
            for scores, ex in zip(score_suite(model, examples), examples)]


def with_distances(distances: list[int | None]) -> list[dict]:
    """One example per distance (None: the example records none), two or three candidates each."""
    suite = []
    for i, distance in enumerate(distances):
        candidates = ["CAT SEES", "DOG SEES", "TREE SEES"][:2 + i % 2]
        extra = {} if distance is None else {"distance": distance}
        suite.append(example(i, candidates, label=i % 2, **extra))
    return suite


def test_accuracy_per_distance_counts_each_distance_and_the_examples_without_one(model):
    distances = [0, 1, 0, 10, None, 2, 1, 0, None, 2, 10, 0]
    suite = with_distances(distances)
    result = controlled_result(model, suite)
    scored = hits(model, suite)
    assert any(scored) and not all(scored)  # accuracies between 0 and 1: the split is not vacuous
    expected = {}
    for bucket in ("0", "1", "2", "10", "none"):  # nearest first, 10 after 2, `none` last
        mine = [h for h, d in zip(scored, distances) if str(d if d is not None else "none") == bucket]
        expected[bucket] = {"accuracy": sum(mine) / len(mine), "n": len(mine)}
    assert list(result["by_distance"].items()) == list(expected.items())
    assert result["accuracy"] == sum(scored) / len(scored)


def test_a_suite_without_distances_reports_no_breakdown(model):
    suite = with_distances([None] * 4)
    result = controlled_result(model, suite)
    assert result["by_distance"] == {}
    assert not [line for line in report_lines(result) if "distance" in line]
    assert not [key for key in suite_metrics(model, {"s": suite}) if "distance" in key]


def ordered_pair(model: LoadedModel) -> tuple[str, str]:
    """(better, worse): two candidates of `example(0, ...)`, the one the model scores higher first."""
    first, second = "CAT SEES", "DOG SEES"
    [scores] = score_suite(model, [example(0, [first, second])])
    assert scores[0] != scores[1]
    return (first, second) if scores[0] > scores[1] else (second, first)


def test_a_repeated_correct_candidate_is_scored_once(model):
    """Unmerged, the two copies of the correct candidate would tie (a miss) and chance be 1/3."""
    better, worse = ordered_pair(model)
    result = controlled_result(model, [example(0, [better, worse, better], label=2)])
    assert result["accuracy"] == 1.0
    assert result["chance"] == 0.5
    assert result["merged"] == {"items": 1, "candidates_dropped": 1}


def test_a_copy_of_the_correct_candidate_among_the_incorrect_is_not_a_wrong_answer(model):
    """The copy at position 2 is the correct text: dropped, so the example is a hit, not a tie."""
    better, worse = ordered_pair(model)
    suite = [example(0, [better, worse, better, worse], label=0), example(1, ["A DOG", "A CAT"])]
    result = controlled_result(model, suite)
    assert result["merged"] == {"items": 1, "candidates_dropped": 2}
    assert result["n"] == 2
    assert result["accuracy"] == (1 + hits(model, suite[1:])[0]) / 2


def test_metrics_and_report_lines_carry_the_distances_and_the_merges(model):
    better, worse = ordered_pair(model)
    suite = with_distances([0, 1, 1]) + [example(3, [better, better, worse], distance=1)]
    metrics = suite_metrics(model, {"s": suite})
    result = controlled_result(model, suite)
    for bucket, part in result["by_distance"].items():
        assert metrics[f"contrastive/distance/{bucket}"] == part["accuracy"]
        assert metrics[f"contrastive/distance/{bucket}/n"] == part["n"]
    assert (metrics["contrastive/distance/0/n"], metrics["contrastive/distance/1/n"]) == (1, 3)
    assert metrics["contrastive/merged/items"] == 1 and metrics["contrastive/merged/candidates_dropped"] == 1
    # a table column reads the per-distance accuracy like any other key of the suite
    assert column_value(metrics, "contrastive:s:distance/1") == metrics["contrastive/distance/1"]
    lines = report_lines(result)
    assert lines[0].startswith(f"accuracy {result['accuracy']:.4f} on 4 examples (chance")
    assert f"{'1'.rjust(18)}: {result['by_distance']['1']['accuracy']:.4f} (3)" in lines
    assert lines[-1] == "  repeated candidates merged: examples affected 1, candidates dropped 1"


@pytest.mark.parametrize("distance", [-1, 1.5, "2", None, True])
def test_a_bad_distance_exits_2_with_one_line_naming_file_line_and_key(workdir: Path, distance):
    suite = workdir / "bad_distance.jsonl"
    good = example(0, ["CAT SEES", "DOG SEES"], distance=1)
    suite.write_text(json.dumps(good) + "\n" + json.dumps(good | {"id": 1, "distance": distance}) + "\n",
                     encoding="utf-8")
    config = write_config(workdir / "bad_distance.yaml", f"eval:\n  contrastive: ['{suite}']\n")
    outcome = docmt("fit", config, "--profile", "tiny")  # the suites are read before any training
    assert outcome.code == 2
    assert outcome.err.splitlines() == [f"docmt fit: error: {suite}:2: key 'distance': must be a non-negative "
                                        f"integer (sentences back to the antecedent, 0 = the same "
                                        f"sentence), got {distance!r}"]
