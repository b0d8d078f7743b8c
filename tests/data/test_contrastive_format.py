"""The generic contrastive JSONL format and the converters from ContraPro, DiscEvalMT and SCAT."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from lightning_docmt.data.contrastive_suites import (
    CONTRAPRO_LABELS,
    FIELDS,
    context_free_ceiling,
    convert_contrapro,
    convert_discevalmt,
    convert_scat,
    merge_repeated_candidates,
    read_suite,
    strip_scat_markup,
    write_suite,
)
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.evaluation.contrastive_scoring import candidate_documents, with_random_contexts
from tests.helpers.paths import CONTRASTIVE_SUITES

SUITES = CONTRASTIVE_SUITES
CONTRAPRO, DISCEVALMT, SCAT = (SUITES / "contrapro-ende", SUITES / "bawden-discevalmt-enfr",
                               SUITES / "scat-enfr")

EXAMPLE = {"id": "x1", "src": "It is red.", "src_context": ["I saw the car."],
           "tgt_context": ["J'ai vu la voiture."], "candidates": ["Elle est rouge.", "Il est rouge."],
           "label": 0, "phenomenon": "pronoun"}


def _write_lines(path: Path, *objects) -> Path:
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objects),
                    encoding="utf-8")
    return path


def test_round_trip(tmp_path):
    second = dict(EXAMPLE, id=2, src_context=[], tgt_context=[], label=1,
                  candidates=["a", "b", "c"])
    path = tmp_path / "suite.jsonl"
    write_suite([EXAMPLE, second], path)
    assert read_suite(path) == [EXAMPLE, second]
    assert [list(json.loads(line)) for line in path.read_text().splitlines()] == [list(FIELDS)] * 2


def test_round_trip_keeps_the_distance_to_the_antecedent(tmp_path):
    near, far = EXAMPLE | {"distance": 0}, EXAMPLE | {"id": "x2", "distance": 3}
    path = tmp_path / "suite.jsonl"
    write_suite([near, far, EXAMPLE | {"id": "x3"}], path)
    assert read_suite(path) == [near, far, EXAMPLE | {"id": "x3"}]
    assert [list(json.loads(line)) for line in path.read_text().splitlines()] == [
        [*FIELDS, "distance"], [*FIELDS, "distance"], list(FIELDS)]


def test_a_suite_may_give_the_context_of_one_side_only(tmp_path):
    source_only = EXAMPLE | {"id": "s", "tgt_context": []}
    target_only = EXAMPLE | {"id": "t", "src_context": []}
    path = _write_lines(tmp_path / "one_side.jsonl", source_only, target_only)
    assert read_suite(path) == [source_only, target_only]
    documents, _ = candidate_documents([source_only])
    assert documents[0].src == [*EXAMPLE["src_context"], EXAMPLE["src"]]
    assert documents[0].tgt == ["", EXAMPLE["candidates"][0]]  # the empty side: empty sentences


@pytest.mark.parametrize("change, match", [
    ({"label": 2}, "'label' must be an integer in 0..1"),
    ({"label": True}, "'label' must be an integer"),
    ({"label": "0"}, "'label' must be an integer"),
    ({"candidates": ["only one"]}, "at least two"),
    ({"candidates": ["same", "same"]}, "at least two different strings"),
    ({"candidates": ["a", ""]}, "non-empty strings"),
    ({"src": ""}, "'src' must be a non-empty string"),
    ({"src_context": "I saw the car."}, "lists of strings"),
    ({"tgt_context": ["a", "b"]}, "must be aligned, or one of them empty"),
    ({"phenomenon": ""}, "'phenomenon'"),
    ({"id": None}, "'id' must be a string or an integer"),
    ({"extra": 1}, "unknown key"),
    ({"distance": -1}, "key 'distance': must be a non-negative integer .* got -1$"),
    ({"distance": 1.0}, "key 'distance': must be a non-negative integer .* got 1.0$"),
    ({"distance": "1"}, "key 'distance': must be a non-negative integer .* got '1'$"),
    ({"distance": None}, "key 'distance': must be a non-negative integer .* got None$"),
    ({"distance": False}, "key 'distance': must be a non-negative integer .* got False$"),
])
def test_invalid_example_names_file_and_line(tmp_path, change, match):
    path = _write_lines(tmp_path / "bad.jsonl", EXAMPLE, EXAMPLE | {"id": "x2"} | change)
    with pytest.raises(DocMTInputError, match=match) as err:
        read_suite(path)
    assert f"{path}:2:" in str(err.value)


@pytest.mark.parametrize("second, match", [
    ("{not json", "invalid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ({k: v for k, v in EXAMPLE.items() if k != "label"} | {"id": "x2"}, "missing key"),
    (EXAMPLE, r"duplicate id 'x1' \(first on line 1\)"),
])
def test_malformed_lines(tmp_path, second, match):
    path = _write_lines(tmp_path / "bad.jsonl", EXAMPLE, second)
    with pytest.raises(DocMTInputError, match=match) as err:
        read_suite(path)
    assert f"{path}:2:" in str(err.value)


def test_empty_and_missing_files(tmp_path):
    empty = _write_lines(tmp_path / "empty.jsonl", "")
    with pytest.raises(DocMTInputError, match="no examples"):
        read_suite(empty)
    with pytest.raises(DocMTInputError, match="no such file"):
        read_suite(tmp_path / "absent.jsonl")


def test_repeated_candidates_are_read_then_merged_with_the_label_on_the_correct_text(tmp_path):
    repeated_correct = EXAMPLE | {"id": "r1", "candidates": ["Il.", "Elle.", "Il."], "label": 2}
    copy_among_incorrect = EXAMPLE | {"id": "r2", "candidates": ["Il.", "Elle.", "On.", "Il.", "On."]}
    repeated_incorrect = EXAMPLE | {"id": "r3", "candidates": ["Elle.", "Il.", "Il."], "label": 0}
    path = _write_lines(tmp_path / "repeats.jsonl", EXAMPLE, repeated_correct, copy_among_incorrect,
                        repeated_incorrect)
    examples = read_suite(path)
    assert examples[1:] == [repeated_correct, copy_among_incorrect, repeated_incorrect]  # as written
    merged = merge_repeated_candidates(examples)
    assert merged.examples == [
        EXAMPLE,
        repeated_correct | {"candidates": ["Il.", "Elle."], "label": 0},
        copy_among_incorrect | {"candidates": ["Il.", "Elle.", "On."], "label": 0},
        repeated_incorrect | {"candidates": ["Elle.", "Il."], "label": 0},
    ]
    assert (merged.items, merged.dropped) == (3, 4)


def test_an_example_of_one_repeated_candidate_cannot_be_scored(tmp_path):
    path = _write_lines(tmp_path / "one.jsonl", EXAMPLE,
                        EXAMPLE | {"id": "x2", "candidates": ["Il.", "Il.", "Il."]})
    with pytest.raises(DocMTInputError, match="at least two different strings") as err:
        read_suite(path)
    assert str(err.value).startswith(f"{path}:2: ")


def test_write_refuses_invalid_examples_and_writes_nothing(tmp_path):
    path = tmp_path / "out.jsonl"
    with pytest.raises(DocMTInputError, match=f"{path}:2: 'label'"):
        write_suite([EXAMPLE, dict(EXAMPLE, id="x2", label=5)], path)
    assert not path.exists() and not list(tmp_path.iterdir())


# --- ContraPro -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def contrapro():
    return convert_contrapro(CONTRAPRO)


def test_contrapro_counts(contrapro):
    examples = contrapro.examples
    assert len(examples) == 12_000 and contrapro.skipped == {}
    assert sum(len(e["candidates"]) for e in examples) == 36_031
    assert all(e["label"] == 0 for e in examples)
    # ContraPro is balanced by design: 4,000 examples per German reference pronoun.
    assert Counter(e["phenomenon"] for e in examples) == {
        "pronoun_es": 4000, "pronoun_er": 4000, "pronoun_sie": 4000}
    assert sum(not e["src_context"] for e in examples) == 6  # the context line is empty
    assert not any("distance" in e for e in examples)  # the folder holds no contrapro.json


def test_contrapro_first_example_by_hand(contrapro):
    first = contrapro.examples[0]
    assert first["src"] == "It was the womenfolk of Marstrand, both young and old."
    assert [c.split()[0] for c in first["candidates"]] == ["Es", "Sie", "Er"]
    assert first["tgt_context"] == ["Und vom hohen Achterdeck aus sah der Kapitän, wie eine lange "
                                    "Reihe Menschen zum Schiff hinaus strömte."]
    assert first["phenomenon"] == "pronoun_es"


def test_contrapro_groups_must_cover_the_text_files(tmp_path):
    for name in ("contrapro.text.en", "contrapro.text.de", "contrapro.context.en",
                 "contrapro.context.de"):
        (tmp_path / name).write_text("a\nb\nc\n", encoding="utf-8")
    groups = _write_lines(tmp_path / "sentence_groups.txt", "0", "2")
    with pytest.raises(DocMTInputError, match="end at 3") as err:
        convert_contrapro(tmp_path)
    assert str(groups) in str(err.value)
    _write_lines(groups, "0", "2", "1")
    with pytest.raises(DocMTInputError, match=f"{groups}:3: expected an increasing"):
        convert_contrapro(tmp_path)


CONTRAPRO_TEXTS = ("contrapro.text.en", "contrapro.text.de", "contrapro.context.en", "contrapro.context.de")


def _first_contrapro_groups(folder: Path, groups: int) -> list[int]:
    """The first `groups` examples of ContraPro's text files, written to `folder`; their sizes."""
    starts = [int(n) for n in (CONTRAPRO / "sentence_groups.txt").read_text().split()][:groups + 1]
    for name in CONTRAPRO_TEXTS:
        lines = (CONTRAPRO / name).read_text(encoding="utf-8").split("\n")[:starts[-1]]
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    _write_lines(folder / "sentence_groups.txt", *map(str, starts))
    return [end - begin for begin, end in zip(starts, starts[1:])]


def _write_contrapro_labels(folder: Path, distances: list, sizes: list[int]) -> Path:
    """A `contrapro.json` as the release has it (the fields the converter reads)."""
    entries = [{"ante distance": d, "ref pronoun": "es", "errors": [{"contrastive": "x"}] * (n - 1)}
               for d, n in zip(distances, sizes)]
    path = folder / CONTRAPRO_LABELS
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


def test_contrapro_distances_come_from_ante_distance(tmp_path):
    sizes = _first_contrapro_groups(tmp_path, 6)
    assert 4 in sizes  # groups of different sizes: the labels must follow the groups, not the lines
    without = convert_contrapro(tmp_path).examples
    assert not any("distance" in e for e in without)
    distances = [1, 0, 2, 1, 0, 5]
    _write_contrapro_labels(tmp_path, distances, sizes)
    examples = convert_contrapro(tmp_path).examples
    assert [e.get("distance") for e in examples] == distances
    assert [{k: v for k, v in e.items() if k != "distance"} for e in examples] == without


@pytest.mark.parametrize("labels, match", [
    (lambda sizes: ([1] * 5, sizes[:5]), "5 examples, but sentence_groups.txt lists 6"),
    (lambda sizes: ([1] * 6, [*sizes[:4], sizes[4] - 1, sizes[5]]),
     r"key '\[4\].errors': 2 contrastive variants, but its sentence group \(example 5\) has 3"),
    (lambda sizes: ([1, 0, -2, 1, 0, 1], sizes), r"key '\[2\].ante distance': must be a non-negative"),
    (lambda sizes: ([1, 0, None, 1, 0, 1], sizes), r"key '\[2\].ante distance': .* got None"),
])
def test_contrapro_labels_must_match_the_groups(tmp_path, labels, match):
    sizes = _first_contrapro_groups(tmp_path, 6)
    path = _write_contrapro_labels(tmp_path, *labels(sizes))
    with pytest.raises(DocMTInputError, match=match) as err:
        convert_contrapro(tmp_path)
    assert str(err.value).startswith(f"{path}: ")


# --- DiscEvalMT ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def discevalmt():
    return convert_discevalmt(DISCEVALMT).examples


def test_discevalmt_counts(discevalmt):
    assert Counter(e["phenomenon"] for e in discevalmt) == {"anaphora": 200, "lexical_choice": 200}


@pytest.mark.parametrize("phenomenon, stem", [("anaphora", "anaphora"),
                                              ("lexical_choice", "lexical_choice")])
def test_discevalmt_matches_the_flattened_line_files(discevalmt, phenomenon, stem):
    """The .current/.prev files list correct then incorrect for each example, in the json order."""
    lines = {name: (DISCEVALMT / f"{stem}.{name}").read_text(encoding="utf-8").splitlines()
             for name in ("current.en", "current.fr", "prev.en", "prev.fr")}
    examples = [e for e in discevalmt if e["phenomenon"] == phenomenon]
    assert all(len(v) == 2 * len(examples) for v in lines.values())
    for i, e in enumerate(examples):
        good, bad = 2 * i, 2 * i + 1
        assert e["src"] == lines["current.en"][good] == lines["current.en"][bad]
        assert e["src_context"] == [lines["prev.en"][good]]
        assert e["tgt_context"] == [lines["prev.fr"][good]] == [lines["prev.fr"][bad]]
        assert e["candidates"] == [lines["current.fr"][good], lines["current.fr"][bad]]


def test_discevalmt_context_free_ceiling_is_50_percent(discevalmt):
    """DiscEvalMT is balanced so that a context-agnostic model gets 50% (Bawden et al. 2018)."""
    assert context_free_ceiling(discevalmt) == {"anaphora": 0.5, "lexical_choice": 0.5,
                                                "overall": 0.5}


def test_discevalmt_bad_file(tmp_path):
    (tmp_path / "anaphora.json").write_text('{"1": {"src": ["a", "b"]}}', encoding="utf-8")
    with pytest.raises(DocMTInputError, match="not a DiscEvalMT file") as err:
        convert_discevalmt(tmp_path)
    assert str(tmp_path / "anaphora.json") in str(err.value)


# --- SCAT ----------------------------------------------------------------------------------------

_PRONOUNS = {"il", "elle", "ils", "elles"}


@pytest.mark.parametrize("split, kept, skipped", [("test", 997, 3), ("valid", 145, 0)])
def test_scat_counts(split, kept, skipped):
    suite = convert_scat(SCAT, split)
    lines = (SCAT / f"highlighted.{split}.fr").read_text(encoding="utf-8").splitlines()
    assert len(lines) == kept + skipped
    assert len(suite.examples) == kept
    assert suite.skipped == ({"no_marked_pronoun": skipped} if skipped else {})


def test_scat_test_examples():
    examples = convert_scat(SCAT, "test").examples
    # Lines 62, 288 and 596 of highlighted.test.fr carry no <p> mark.
    kept_lines = {int(e["id"].rsplit(".", 1)[1]) for e in examples}
    assert set(range(1, 1001)) - kept_lines == {62, 288, 596}
    for e in examples:
        text = " ".join([e["src"], *e["candidates"], *e["src_context"], *e["tgt_context"]])
        assert "<" not in text and ">" not in text
        good, bad = (re.findall(r"\w+|[^\w\s]", c.lower()) for c in e["candidates"])
        assert len(good) == len(bad)
        swaps = {(g, b) for g, b in zip(good, bad) if g != b}
        assert swaps and swaps <= {("il", "elle"), ("elle", "il"), ("ils", "elles"), ("elles", "ils")}
    first = examples[0]
    assert first["candidates"][0].startswith("C'est juste qu'elles tombent")
    assert first["candidates"][1].startswith("C'est juste qu'ils tombent")
    assert first["src"].startswith("It's just they've fallen")
    assert first["phenomenon"] == "pronoun_elles"


def test_scat_markup_glued_marks_and_capitals(tmp_path):
    fr = ("Bien sûr, <p>Il</p>  <hon>s'est  <hon><h<hoff> off>  avéré qu'il ne te "
          "déra<p>il</p>les pas.")
    for name, text in {"en": "Of course <p>it</p> turned out.", "fr": fr,
                       "context.en": "The <hon>plan<hoff>.", "context.fr": "Le <hon>plan<hoff>."}.items():
        (tmp_path / f"highlighted.test.{name}").write_text(text + "\n", encoding="utf-8")
    [example] = convert_scat(tmp_path, "test").examples
    assert example["candidates"] == ["Bien sûr, Il s'est avéré qu'il ne te dérailles pas.",
                                     "Bien sûr, Elle s'est avéré qu'il ne te dérailles pas."]
    assert example["src_context"] == ["The plan."] and example["tgt_context"] == ["Le plan."]
    assert strip_scat_markup("les  <hon>pièces<hoff>  ne") == "les pièces ne"


def test_scat_unequal_files(tmp_path):
    for name, n in {"en": 2, "fr": 1, "context.en": 2, "context.fr": 2}.items():
        (tmp_path / f"highlighted.test.{name}").write_text("<p>il</p> x\n" * n, encoding="utf-8")
    with pytest.raises(DocMTInputError, match="file ends before line 2") as err:
        convert_scat(tmp_path, "test")
    assert f"{tmp_path / 'highlighted.test.fr'}:2" in str(err.value)


def test_random_contexts_are_another_examples_of_the_same_size():
    """Both sides come from one donor with as many sentences; never the example's own when another
    of its size exists; seeded; the sentence and its candidates unchanged."""
    examples = [EXAMPLE | {"id": i, "src_context": [f"s{i}"] * n, "tgt_context": [f"t{i}"] * n}
                for i, n in enumerate([1, 1, 1, 2, 2, 3, 0, 0])]
    shuffled = with_random_contexts(examples, seed=4)
    assert with_random_contexts(examples, seed=4) == shuffled
    for before, after in zip(examples, shuffled):
        n = len(before["src_context"])
        assert (after["id"], after["src"], after["candidates"]) == (before["id"], before["src"],
                                                                     before["candidates"])
        assert len(after["src_context"]) == len(after["tgt_context"]) == n
        if n:
            donor = int(after["src_context"][0][1:])
            assert after["tgt_context"][0] == f"t{donor}" and len(examples[donor]["src_context"]) == n
        if n in (1, 2):
            assert after["src_context"] != before["src_context"]
    assert shuffled[5]["src_context"] == examples[5]["src_context"]  # alone in its size: its own
