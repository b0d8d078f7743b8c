"""Contrastive test suites: the generic JSONL format (docs/design.md section 8) and converters to it.

One example per line:

    {"id": str|int, "src": str, "src_context": [str], "tgt_context": [str],
     "candidates": [str, ...], "label": int, "phenomenon": str, "distance": int (optional)}

`src` is the current source sentence; `src_context`/`tgt_context` the previous sentences of the
document, oldest first, source and reference target aligned (equal lengths), or one side empty when
a suite gives only the other (many public suites give source context only: a model reading the
empty side reads empty sentences there); empty lists when there is no context; `candidates` the
target sentences to score (at least two different ones), `candidates[label]` the correct one;
`distance`, when a suite records it, the number of sentences back to the antecedent (0: in the same
sentence; ContraPro's `ante distance`), which the scoring report breaks the accuracy down by. A
model scores each candidate by its log-probability given the source and context.

Repeated candidates (`merge_repeated_candidates`, applied before scoring): candidates that are the
same string (exact equality: the scorer scores the text as given, so equal strings score equally)
are merged into the first of them, and the label follows the correct text. A repeat of the correct
candidate is thus merged into it, wherever it sits: a copy listed among the incorrect candidates is
the correct translation, and is dropped rather than counted as a wrong one. The report counts the
examples affected and the candidates dropped. An example left with fewer than two different
candidates cannot be scored: an error naming its file and line.

Converters from the published suites (files as distributed, see ../shared/data/contrastive):

- ContraPro (Müller et al. 2018, en-de): `contrapro.{text,context}.{en,de}` and `sentence_groups.txt`
  (0-based start line of each example, reference first). Phenomenon `pronoun_er|sie|es`: the German
  reference pronoun, found as the reference token that the contrastive variants replace. When the
  folder also holds the release's labelled file `contrapro.json`, each example's `distance` is its
  `ante distance` (antecedents further back than 1 lie outside the one context sentence of the text
  files); without it the examples carry no distance.
- DiscEvalMT (Bawden et al. 2018, en-fr): `anaphora.json` and `lexical-choice.json`; the correct (or
  "semi-correct") translation first. Phenomena `anaphora`, `lexical_choice`.
- SCAT (Yin et al. 2021, en-fr): `highlighted.SPLIT.{en,fr}` with the pronoun marked `<p>..</p>` and
  the context lines. The contrastive variant swaps il<->elle, ils<->elles inside the `<p>` marks
  (marks glued inside a word, like `déra<p>il</p>les`, are not pronouns and are left alone); all
  markup (`<p>`, `<hon>`, `<hoff>`, and their broken pieces) is removed. A line whose French side has
  no marked pronoun cannot be made contrastive: it is skipped and counted. The context line (several
  sentences) is kept as one context sentence. Phenomenon `pronoun_<reference pronoun>`.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_docmt.data.corpora.validate import iter_jsonl, normalize_space, open_text, parallel_lines
from lightning_docmt.errors import DocMTInputError

FIELDS = ("id", "src", "src_context", "tgt_context", "candidates", "label", "phenomenon")
OPTIONAL_FIELDS = ("distance",)


@dataclass
class ConvertedSuite:
    """Examples in the generic format, and what the conversion skipped by rule (reason -> count)."""

    examples: list[dict]
    skipped: dict[str, int] = field(default_factory=dict)


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def check_distance(value: Any, *, path: str | Path, key: str, line: int | None = None) -> None:
    """Raise DocMTInputError naming file, line and key unless `value` is a distance to the
    antecedent: a non-negative integer number of sentences."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DocMTInputError(f"must be a non-negative integer (sentences back to the antecedent, 0 "
                              f"= the same sentence), got {value!r}", path=path, line=line, key=key)


def check_example(obj: Any, *, path: str | Path, line: int) -> None:
    """Raise DocMTInputError (naming file and line) unless `obj` is a valid generic example."""

    def fail(message: str) -> None:
        raise DocMTInputError(message, path=path, line=line)

    if not isinstance(obj, dict):
        fail("expected a JSON object")
    unknown = sorted(set(obj) - set(FIELDS) - set(OPTIONAL_FIELDS))
    missing = [key for key in FIELDS if key not in obj]
    if unknown:
        fail(f"unknown key(s) {', '.join(unknown)}; expected {', '.join(FIELDS)} and optionally "
             f"{', '.join(OPTIONAL_FIELDS)}")
    if missing:
        fail(f"missing key(s) {', '.join(missing)}")
    if isinstance(obj["id"], bool) or not isinstance(obj["id"], (str, int)):
        fail("'id' must be a string or an integer")
    if not isinstance(obj["src"], str) or not obj["src"].strip():
        fail("'src' must be a non-empty string")
    if not (_is_str_list(obj["src_context"]) and _is_str_list(obj["tgt_context"])):
        fail("'src_context' and 'tgt_context' must be lists of strings")
    sizes = (len(obj["src_context"]), len(obj["tgt_context"]))
    if 0 not in sizes and sizes[0] != sizes[1]:
        fail(f"'src_context' has {sizes[0]} sentences but 'tgt_context' has {sizes[1]} (they must "
             f"be aligned, or one of them empty)")
    candidates = obj["candidates"]
    if not _is_str_list(candidates) or len(candidates) < 2 or not all(c.strip() for c in candidates):
        fail("'candidates' must be a list of at least two non-empty strings")
    if len(set(candidates)) < 2:
        fail("'candidates' must hold at least two different strings (repeats are merged)")
    label = obj["label"]
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(candidates):
        fail(f"'label' must be an integer in 0..{len(candidates) - 1}")
    if not isinstance(obj["phenomenon"], str) or not obj["phenomenon"]:
        fail("'phenomenon' must be a non-empty string")
    if "distance" in obj:
        check_distance(obj["distance"], path=path, line=line, key="distance")


def read_suite(path: str | Path) -> list[dict]:
    """Read and validate a generic contrastive JSONL file (blank lines are allowed)."""
    examples: list[dict] = []
    first_line: dict[Any, int] = {}
    for lineno, obj in iter_jsonl(path):
        check_example(obj, path=path, line=lineno)
        if obj["id"] in first_line:
            raise DocMTInputError(f"duplicate id {obj['id']!r} (first on line "
                                  f"{first_line[obj['id']]})", path=path, line=lineno)
        first_line[obj["id"]] = lineno
        examples.append(obj)
    if not examples:
        raise DocMTInputError("no examples", path=path)
    return examples


def write_suite(examples: list[dict], path: str | Path) -> None:
    """Validate every example, then write the JSONL file (atomically: all or nothing)."""
    path = Path(path)
    seen: set[Any] = set()
    for lineno, example in enumerate(examples, start=1):
        check_example(example, path=path, line=lineno)
        if example["id"] in seen:
            raise DocMTInputError(f"duplicate id {example['id']!r}", path=path, line=lineno)
        seen.add(example["id"])
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w", encoding="utf-8") as f:
        for example in examples:
            fields = [*FIELDS, *(key for key in OPTIONAL_FIELDS if key in example)]
            f.write(json.dumps({key: example[key] for key in fields}, ensure_ascii=False) + "\n")
    os.replace(partial, path)


@dataclass
class MergedSuite:
    """Examples whose repeated candidates are merged, and what the merging changed."""

    examples: list[dict]
    items: int = 0  # examples that had a repeated candidate
    dropped: int = 0  # candidates removed as repeats


def merge_repeated_candidates(examples: list[dict]) -> MergedSuite:
    """The examples with every repeated candidate merged into its first occurrence (exact string
    equality), the label following the correct text (the module docstring's rule)."""
    merged = MergedSuite([])
    for example in examples:
        distinct = list(dict.fromkeys(example["candidates"]))
        dropped = len(example["candidates"]) - len(distinct)
        if dropped:
            correct = example["candidates"][example["label"]]
            example = {**example, "candidates": distinct, "label": distinct.index(correct)}
            merged.items += 1
            merged.dropped += dropped
        merged.examples.append(example)
    return merged


# --- ContraPro ---------------------------------------------------------------------------------

_WORD = re.compile(r"[^\W\d_]+")
CONTRAPRO_PRONOUNS = ("er", "sie", "es")


def _contrapro_pronoun(reference: str, variants: list[str]) -> str:
    """The reference pronoun (er/sie/es) that the contrastive variants replace; "" if unclear.

    The words of the reference are aligned with those of each variant (the variants were re-tokenised,
    so positions shift); among the reference words that an edit touches, exactly one kind of
    er/sie/es is expected.
    """
    ref = _WORD.findall(reference.lower())
    replaced: set[str] = set()
    for variant in variants:
        matcher = difflib.SequenceMatcher(None, ref, _WORD.findall(variant.lower()), autojunk=False)
        for op, i1, i2, _, _ in matcher.get_opcodes():
            if op != "equal":
                replaced |= {w for w in ref[i1:i2] if w in CONTRAPRO_PRONOUNS}
    return replaced.pop() if len(replaced) == 1 else ""


CONTRAPRO_LABELS = "contrapro.json"  # the release's labelled examples, `ante distance` among them


def _contrapro_group_starts(groups_path: Path, n_rows: int) -> list[int]:
    """The 0-based start line of every sentence group, and `n_rows` last."""
    starts: list[int] = []
    for lineno, text in enumerate(open_text(groups_path), start=1):
        if not text.strip():
            continue
        if not text.strip().isdigit() or (starts and int(text) <= starts[-1]):
            raise DocMTInputError("expected an increasing line number", path=groups_path, line=lineno)
        starts.append(int(text))
    if len(starts) < 2 or starts[0] != 0 or starts[-1] != n_rows:
        raise DocMTInputError(f"groups must start at 0 and end at {n_rows} (the number of lines "
                              "of the text files)", path=groups_path)
    return starts


def _contrapro_distances(path: Path, group_sizes: list[int]) -> list[int]:
    """The `ante distance` of every example of ContraPro's `contrapro.json` (one object per example,
    in the order of the text files, its contrastive variants under `errors`), checked against the
    sentence groups: one object per group, with one variant fewer than its group has lines (the
    alignment ContraPro's own evaluation script reads the scores by)."""
    try:
        labelled = [(entry["ante distance"], len(entry["errors"]))
                    for entry in json.loads("\n".join(open_text(path)))]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise DocMTInputError(f"not ContraPro's labelled examples ({type(err).__name__}: {err})",
                              path=path) from None
    if len(labelled) != len(group_sizes):
        raise DocMTInputError(f"{len(labelled)} examples, but sentence_groups.txt lists "
                              f"{len(group_sizes)}", path=path)
    for index, ((distance, variants), size) in enumerate(zip(labelled, group_sizes)):
        if variants != size - 1:
            raise DocMTInputError(f"{variants} contrastive variants, but its sentence group (example "
                                  f"{index + 1}) has {size - 1}", path=path, key=f"[{index}].errors")
        check_distance(distance, path=path, key=f"[{index}].ante distance")
    return [distance for distance, _ in labelled]


def convert_contrapro(directory: str | Path) -> ConvertedSuite:
    """ContraPro en-de -> generic examples (one per sentence group), with their `distance` when the
    folder holds `contrapro.json`."""
    d = Path(directory)
    names = ("contrapro.text.en", "contrapro.text.de", "contrapro.context.en", "contrapro.context.de")
    rows = [row for _, row in parallel_lines(*(d / n for n in names))]
    starts = _contrapro_group_starts(d / "sentence_groups.txt", len(rows))
    sizes = [end - begin for begin, end in zip(starts, starts[1:])]
    labels = d / CONTRAPRO_LABELS
    distances = _contrapro_distances(labels, sizes) if labels.is_file() else None
    examples = []
    for k, (begin, end) in enumerate(zip(starts, starts[1:])):
        src, _, ctx_en, ctx_de = rows[begin]
        for offset, (other_src, _, other_en, other_de) in enumerate(rows[begin + 1:end], begin + 2):
            if (other_src, other_en, other_de) != (src, ctx_en, ctx_de):
                raise DocMTInputError(f"example {k + 1}: source or context differs inside its group",
                                      path=d / names[0], line=offset)
        if bool(ctx_en.strip()) != bool(ctx_de.strip()):
            raise DocMTInputError("context present on one side only", path=d / names[2],
                                  line=begin + 1)
        candidates = [row[1] for row in rows[begin:end]]
        pronoun = _contrapro_pronoun(candidates[0], candidates[1:])
        examples.append({
            "id": f"contrapro.{k + 1}", "src": src,
            "src_context": [ctx_en] if ctx_en.strip() else [],
            "tgt_context": [ctx_de] if ctx_de.strip() else [],
            "candidates": candidates, "label": 0,
            "phenomenon": f"pronoun_{pronoun}" if pronoun else "pronoun",
        })
        if distances is not None:
            examples[-1]["distance"] = distances[k]
    return ConvertedSuite(examples)


# --- DiscEvalMT --------------------------------------------------------------------------------
# No `distance`: the files record none. The anaphora blocks are written with the antecedent in the
# previous sentence, but that is the design of the set, not a per-example measurement, and lexical
# choice has no antecedent at all.

DISCEVALMT_FILES = {"anaphora": "anaphora.json", "lexical_choice": "lexical-choice.json"}


def _discevalmt_pairs(block: dict) -> list[dict]:
    """The translation pairs of one block: anaphora lists them in `trg`, lexical choice in `examples`."""
    if "trg" in block:
        return [dict(pair, src=block["src"]) for pair in block["trg"]]
    return [dict(example["trg"], src=example["src"]) for example in block["examples"]]


def convert_discevalmt(directory: str | Path) -> ConvertedSuite:
    """DiscEvalMT en-fr (anaphora + lexical choice) -> generic examples, correct candidate first."""
    examples = []
    for phenomenon, name in DISCEVALMT_FILES.items():
        path = Path(directory) / name
        try:
            blocks = json.loads("\n".join(open_text(path)))
            pairs = [(key, j, pair) for key, block in blocks.items()
                     for j, pair in enumerate(_discevalmt_pairs(block), start=1)]
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
            raise DocMTInputError(f"not a DiscEvalMT file ({type(err).__name__}: {err})",
                                  path=path) from None
        for key, j, pair in pairs:
            good = pair.get("correct") or pair.get("semi-correct")
            bad = pair.get("incorrect")
            if not (good and bad and len(good) == len(bad) == len(pair["src"]) == 2
                    and good[0] == bad[0]):
                raise DocMTInputError("expected (context, sentence) pairs sharing their context",
                                      path=path, key=f"{key}.{j}")
            examples.append({
                "id": f"{phenomenon}.{key}.{j}", "src": pair["src"][1],
                "src_context": [pair["src"][0]], "tgt_context": [good[0]],
                "candidates": [good[1], bad[1]], "label": 0, "phenomenon": phenomenon,
            })
    return ConvertedSuite(examples)


# --- SCAT --------------------------------------------------------------------------------------
# No `distance`: SCAT marks the words of the context that people found supporting (`<hon>`), not an
# antecedent, and its context line joins several sentences without their boundaries, so no number
# of sentences back can be read from it.

_SCAT_MARKED = re.compile(r"(?<![^\W\d_])<p>\s*(il|elle|ils|elles)\s*</p>(?![^\W\d_])", re.IGNORECASE)
_SCAT_MARKUP = re.compile(r"<\s*/?\s*(?:p|h\s*o\s*n|h\s*o\s*f\s*f)\s*>", re.IGNORECASE)
_SWAP = {"il": "elle", "elle": "il", "ils": "elles", "elles": "ils"}
NO_MARKED_PRONOUN = "no_marked_pronoun"


def strip_scat_markup(text: str) -> str:
    """Remove `<p>`, `<hon>`, `<hoff>` marks, including the broken pieces left around nested marks."""
    while True:
        stripped = _SCAT_MARKUP.sub("", text)
        if stripped == text:
            return normalize_space(text)
        text = stripped


def _swap_case(word: str) -> str:
    swapped = _SWAP[word.lower()]
    return swapped.capitalize() if word[0].isupper() else swapped


def convert_scat(directory: str | Path, split: str = "test") -> ConvertedSuite:
    """SCAT en-fr split -> generic examples (reference first, swapped pronouns second)."""
    d = Path(directory)
    names = [f"highlighted.{split}.{side}" for side in ("en", "fr", "context.en", "context.fr")]
    examples: list[dict] = []
    skipped: dict[str, int] = {}
    for lineno, (src, tgt, ctx_en, ctx_fr) in parallel_lines(*(d / n for n in names)):
        marked = list(_SCAT_MARKED.finditer(tgt))
        if not marked:
            skipped[NO_MARKED_PRONOUN] = skipped.get(NO_MARKED_PRONOUN, 0) + 1
            continue
        contrast = _SCAT_MARKED.sub(lambda m: f"<p>{_swap_case(m.group(1))}</p>", tgt)
        ctx_en, ctx_fr = strip_scat_markup(ctx_en), strip_scat_markup(ctx_fr)
        if bool(ctx_en) != bool(ctx_fr):
            raise DocMTInputError("context present on one side only", path=d / names[2], line=lineno)
        examples.append({
            "id": f"scat.{split}.{lineno}", "src": strip_scat_markup(src),
            "src_context": [ctx_en] if ctx_en else [], "tgt_context": [ctx_fr] if ctx_fr else [],
            "candidates": [strip_scat_markup(tgt), strip_scat_markup(contrast)], "label": 0,
            "phenomenon": f"pronoun_{marked[0].group(1).lower()}",
        })
    return ConvertedSuite(examples, skipped)


# --- Context-free ceiling ----------------------------------------------------------------------


def _answers(candidates: list[str]) -> list[tuple[str, ...]]:
    """For each candidate, the tokens by which it differs from some other candidate (by position)."""
    tokens = [c.split() for c in candidates]
    width = max(len(t) for t in tokens)
    padded = [t + [""] * (width - len(t)) for t in tokens]
    varying = [i for i in range(width) if len({t[i] for t in padded}) > 1]
    return [tuple(t[i] for i in varying) for t in padded]


def context_free_ceiling(examples: list[dict], reference: list[dict] | None = None) -> dict[str, float]:
    """Accuracy of the majority choice given only the current source sentence, per phenomenon and
    "overall".

    A choice is identified by its answer tokens (where the candidates differ, e.g. `il` vs `elle`).
    For each example, the rule picks the candidate whose answer is most often correct among the
    `reference` examples with the same source sentence, or, when there are none, among all
    `reference` examples; a tie between k candidates scores 1/k.

    With `reference=None` the examples themselves are the reference: the exact best score of any
    context-free model on a suite whose source sentences repeat by design (DiscEvalMT: 50%). When
    source sentences rarely repeat that in-sample number is optimistic (a lookup table can memorise
    unique sentences), so pass a reference suite drawn from the same distribution (e.g. the
    synthetic train split's suite): the result is then an unbiased estimate of what the rule learned
    there reaches on `examples`.
    """
    reference = examples if reference is None else reference
    by_src: dict[str, Counter] = defaultdict(Counter)
    everywhere: Counter = Counter()
    for example in reference:
        correct = _answers(example["candidates"])[example["label"]]
        by_src[example["src"]][correct] += 1
        everywhere[correct] += 1
    credit: dict[str, list[float]] = defaultdict(list)
    for example in examples:
        counts = by_src.get(example["src"]) or everywhere
        scores = [counts[answer] for answer in _answers(example["candidates"])]
        tied = [j for j, score in enumerate(scores) if score == max(scores)]
        credit[example["phenomenon"]].append(1 / len(tied) if example["label"] in tied else 0.0)
    result = {name: sum(values) / len(values) for name, values in sorted(credit.items())}
    every = [v for values in credit.values() for v in values]
    result["overall"] = sum(every) / len(every) if every else 0.0
    return result


# --- Chance and majority rates -----------------------------------------------------------------


def _distinguishing_words(candidates: list[str]) -> list[frozenset[str]]:
    """For each candidate, the (lowercased) words it holds more often than some other candidate: a
    bag-of-words difference, so that variants re-tokenised around the swapped word (ContraPro) still
    reduce to the word itself (`sie` vs `er`)."""
    bags = [Counter(_WORD.findall(c.lower())) for c in candidates]
    return [frozenset(w for w, n in bag.items() if any(n > other[w] for j, other in enumerate(bags) if j != i))
            for i, bag in enumerate(bags)]


def chance_rates(examples: list[dict]) -> dict[str, float]:
    """What an accuracy on `examples` must be compared with, whatever the model:

    - `chance`: the expected accuracy of a uniform random choice (mean of 1/#candidates);
    - `majority`: the accuracy of the best context-free preference rule that ignores the sentence
      too: always choose the candidate whose distinguishing words (`il`, `sie`, ...) are most often
      the correct ones over the whole suite (ties between k candidates score 1/k). On a suite
      balanced by design (DiscEvalMT) it equals chance; on ContraPro it is the share of `es`.
    """
    answers = [_distinguishing_words(ex["candidates"]) for ex in examples]
    correct = Counter(a[ex["label"]] for a, ex in zip(answers, examples))
    credit = []
    for a, ex in zip(answers, examples):
        counts = [correct[answer] for answer in a]
        tied = [j for j, n in enumerate(counts) if n == max(counts)]
        credit.append(1 / len(tied) if ex["label"] in tied else 0.0)
    n = max(len(examples), 1)
    return {"chance": sum(1 / len(ex["candidates"]) for ex in examples) / n,
            "majority": sum(credit) / n}
