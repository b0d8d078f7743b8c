"""Contrastive evaluation (docs/design.md section 8): does the model prefer the correct candidate?

Each candidate of an example becomes a small document whose last sentence is (`src`, candidate) and
whose earlier sentences are the example's `src_context` / `tgt_context` (the shorter side padded
with empty sentences at the far end), so the model reads its context through the very window and
collation code used in training. The score of a candidate is the summed log-probability of its
tokens (plus `<eos>`) given the source and the context. A model that carries a state from sentence
to sentence (`Seq2SeqModel.carries_state`, the shared-context RNN) walks each candidate document in
order instead, as in training: its context sentences, teacher-forced on the example's
`tgt_context`, hand their state on to the scored sentence.

Suites of a run (`eval.contrastive`, evaluated after testing; `configured_suites` reads them before
training so that a bad entry fails early): each entry is a suite file in the generic format,
`corpus`, the suite that comes with the corpus of the test split (`data.test`, else `data.corpus`;
the synthetic generator makes one), or a published suite by name (`contrapro`, `discevalmt`,
`scat`; `named_suites.py`), whose metric name is that name. Metric names (`suite_metrics`): with
one suite `contrastive/accuracy` and `contrastive/<phenomenon>`; with several, each suite's are
prefixed with its name (the file's stem, or `corpus`): `contrastive/<name>/accuracy`,
`contrastive/<name>/<phenomenon>`; each suite also gets `.../random_ctx/accuracy`, its accuracy
when every example reads another example's context, and `.../chance` and `.../majority`, what a
model that ignores the context and the sentence gets. A suite whose examples record their distance
to the antecedent also gets `.../distance/<d>` and `.../distance/<d>/n`, the accuracy and the number
of examples at each distance (`accuracy_by_distance`); one with repeated candidates, merged before
scoring (`data.contrastive_suites.merge_repeated_candidates`), gets `.../merged/items` and
`.../merged/candidates_dropped`.
A selection table (`evaluate: valid`) scores `corpus` on the valid split instead, after training,
and names the metrics `val/contrastive/...` (`training/run.run_validation_metrics`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from omegaconf import DictConfig

from lightning_docmt.data.cache import BinarizedSplit
from lightning_docmt.data.context_anchors import RANDOM_CONTEXT_SEED
from lightning_docmt.data.contrastive_suites import chance_rates, merge_repeated_candidates, read_suite
from lightning_docmt.data.corpora import corpus_suite
from lightning_docmt.data.languages import data_languages
from lightning_docmt.data.splits import split_sources
from lightning_docmt.data.types import Document
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.evaluation import metrics
from lightning_docmt.evaluation.named_suites import NAMED_SUITES, load_named_suite, named_suite
from lightning_docmt.inference.document_order import DocumentOrderWalk
from lightning_docmt.inference.loaded_model import LoadedModel
from lightning_docmt.inference.translate import batches, binarize_documents, document_order_batches
from lightning_docmt.nn.output_loss import output_loss_of
from lightning_docmt.nn.scoring import sequence_log_probs


def candidate_documents(examples: Sequence[dict]) -> tuple[list[Document], list[tuple[int, int]]]:
    """One document per (example, candidate); returns them and their (example, candidate) ids."""
    documents, owners = [], []
    for e, example in enumerate(examples):
        n = max(len(example["src_context"]), len(example["tgt_context"]))
        src_ctx = [""] * (n - len(example["src_context"])) + list(example["src_context"])
        tgt_ctx = [""] * (n - len(example["tgt_context"])) + list(example["tgt_context"])
        for c, candidate in enumerate(example["candidates"]):
            documents.append(Document(f"{example['id']}#{c}", [*src_ctx, example["src"]],
                                      [*tgt_ctx, candidate]))
            owners.append((e, c))
    return documents, owners


@torch.no_grad()
def score_suite(model: LoadedModel, examples: Sequence[dict], max_tokens: int = 8192
                ) -> list[list[float]]:
    """Log-probability of every candidate of every example."""
    documents, owners = candidate_documents(examples)
    scores: list[list[float]] = [[0.0] * len(ex["candidates"]) for ex in examples]
    with tempfile.TemporaryDirectory() as tmp:
        split = binarize_documents(documents, model, Path(tmp))
        last = np.asarray(split.doc_offsets[1:], dtype=np.int64) - 1  # the scored sentences
        doc_of_sentence = {int(s): d for d, s in enumerate(last)}
        for sentences, logp in last_sentence_log_probs(model, split, last, max_tokens):
            for s, value in zip(sentences, logp):
                e, c = owners[doc_of_sentence[s]]
                scores[e][c] = value
    return scores


def last_sentence_log_probs(model: LoadedModel, split: BinarizedSplit, last: np.ndarray,
                            max_tokens: int) -> Iterator[tuple[list[int], list[float]]]:
    """(sentence indices, their target log-probabilities) of the sentences `last`, batch by batch.

    A model that reads its context through the window scores them alone, in length-sorted batches.
    One that carries a state walks every document in document-order batches (sentence j of each
    document of a group, `inference.translate.document_order_batches`): each batch's teacher-forced
    state goes on to the next sentence of its document (`inference/document_order.py`), keyed by
    document, so documents batched together never read each other's state.
    """
    network = model.model
    if not type(network).carries_state:
        for batch in batches(split, last, model.window, max_tokens, model.device):
            yield batch["sent_index"].tolist(), sequence_log_probs(network, batch).tolist()
        return
    scored = torch.zeros(split.n_sentences, dtype=torch.bool, device=model.device)
    scored[torch.as_tensor(last, device=model.device)] = True
    walk = DocumentOrderWalk(network, split, model.window, own_targets=False)
    for batch in document_order_batches(split, model.window, model.device):
        batch = walk.read(batch)  # the carried rows
        walk.hand_on(batch, network.loss_terms(batch, output_loss_of(network)).carry)
        rows = scored[batch["sent_index"]]  # (B,) the documents' last sentences
        if rows.any():
            logp = sequence_log_probs(network, batch)  # (B,) with the carried rows of `batch`
            yield batch["sent_index"][rows].tolist(), logp[rows].tolist()


def evaluate_suite(model: LoadedModel, examples: Sequence[dict]) -> dict[str, Any]:
    """`{"accuracy", "n", "by_phenomenon", "by_distance"}` of a loaded model on a contrastive suite
    whose candidates are all different (`controlled_result` merges repeats first)."""
    scores = score_suite(model, examples)
    labels = [ex["label"] for ex in examples]
    result = metrics.contrastive_accuracy(scores, labels, [ex.get("phenomenon", "all") for ex in examples])
    result["by_distance"] = accuracy_by_distance(scores, labels, examples)
    return result


NO_DISTANCE = "none"  # the bucket of the examples that record no distance


def distance_bucket(example: dict) -> str:
    """The example's distance to its antecedent as text, or `none` when it records none."""
    return str(example["distance"]) if "distance" in example else NO_DISTANCE


def accuracy_by_distance(scores: Sequence[Sequence[float]], labels: Sequence[int],
                         examples: Sequence[dict]) -> dict[str, dict[str, Any]]:
    """`{bucket: {"accuracy", "n"}}` by `distance_bucket`, nearest first and `none` (the examples
    without a distance, counted apart from every distance) last; empty when no example records a
    distance."""
    if not any("distance" in ex for ex in examples):
        return {}
    parts = metrics.contrastive_accuracy(scores, labels, [distance_bucket(ex) for ex in examples])["by_phenomenon"]
    return {bucket: parts[bucket] for bucket in sorted(parts, key=_nearest_first)}


def _nearest_first(bucket: str) -> tuple[bool, int]:
    """Sort key of the distance buckets: by distance, `none` last."""
    return bucket == NO_DISTANCE, 0 if bucket == NO_DISTANCE else int(bucket)


CORPUS_SUITE = "corpus"  # the `eval.contrastive` entry naming the test corpus' own suite
KEY = "eval.contrastive"


def configured_suites(cfg: DictConfig, split: str = "test") -> dict[str, list[dict]]:
    """The suites of `eval.contrastive`, read and validated, by metric name (see the module
    docstring). A missing or malformed file, `corpus` for a corpus without a suite, or two entries
    with the same name raise DocMTInputError.

    `split`: the split whose corpus suite `corpus` names. A selection table (`evaluate: valid`)
    scores the valid split's; there a published suite or a suite file, which are test sets, is an
    error: nothing is chosen by reading a test set."""
    suites: dict[str, list[dict]] = {}
    for entry in cfg.eval.contrastive:
        if entry != CORPUS_SUITE and split != "test":
            raise DocMTInputError(f"'{entry}' is a test set: scoring on the {split} split takes "
                                  f"only '{CORPUS_SUITE}', the suite of the corpus' {split} split",
                                  key=KEY)
        if entry == CORPUS_SUITE:
            spec = split_sources(cfg.data)[split].spec
            examples = corpus_suite(spec, split)
            if examples is None:
                raise DocMTInputError(f"'{CORPUS_SUITE}': the {split} corpus '{spec}' has no "
                                      "contrastive suite of its own; give a suite file", key=KEY)
            name = CORPUS_SUITE
        elif named_suite(entry) is not None:
            name, examples = load_named_suite(entry, cfg.eval.suites_dir, data_languages(cfg.data))
        else:
            path = Path(entry)
            if not path.is_file():
                raise DocMTInputError(f"no such contrastive suite file '{entry}' (or use "
                                      f"'{CORPUS_SUITE}' for the test corpus' own suite, or one of "
                                      f"{', '.join(NAMED_SUITES)})", key=KEY)
            examples, name = read_suite(path), path.stem
        if name in suites:
            raise DocMTInputError(f"two suites named '{name}' (metric names use the file stem)",
                                  key=KEY)
        suites[name] = examples
    return suites


def with_random_contexts(examples: Sequence[dict], seed: int = RANDOM_CONTEXT_SEED) -> list[dict]:
    """The examples with their contexts exchanged: each takes the `src_context` and `tgt_context` of
    another example with as many sentences on each side (a seeded random derangement within each
    group of equal sizes), so that only the context's relevance changes. An example alone in its
    group, or without context, keeps its own."""
    rng = np.random.default_rng(seed)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, ex in enumerate(examples):
        groups.setdefault((len(ex["src_context"]), len(ex["tgt_context"])), []).append(i)
    donor = list(range(len(examples)))
    for members in groups.values():
        if len(members) > 1:
            shift = rng.permutation(len(members))  # a random cycle through the group: no fixed point
            for k in range(len(members)):
                donor[members[shift[k]]] = members[shift[(k + 1) % len(members)]]
    return [{**ex, "src_context": examples[d]["src_context"], "tgt_context": examples[d]["tgt_context"]}
            for ex, d in zip(examples, donor)]


def suite_metrics(model: LoadedModel, suites: dict[str, list[dict]]) -> dict[str, float]:
    """The metrics of every suite (`result_metrics`), under the names of the module docstring."""
    scores: dict[str, float] = {}
    for name, examples in suites.items():
        prefix = "contrastive/" if len(suites) == 1 else f"contrastive/{name}/"
        scores.update({f"{prefix}{key}": value
                       for key, value in result_metrics(controlled_result(model, examples)).items()})
    return scores


def result_metrics(result: dict[str, Any]) -> dict[str, float]:
    """One suite's `controlled_result` as metrics named without the suite: `accuracy` and one per
    phenomenon; `random_ctx/accuracy`, the accuracy with every example's context exchanged for
    another example's (`with_random_contexts`), the contrastive side of the random-context control;
    the suite's `chance` and `majority` rates (`data.contrastive_suites.chance_rates`), to read
    beside them; `distance/<d>` and `distance/<d>/n` when its examples record distances; and
    `merged/items`, `merged/candidates_dropped` when repeated candidates were merged."""
    values = {"accuracy": result["accuracy"],
              **{phenomenon: part["accuracy"] for phenomenon, part in result["by_phenomenon"].items()},
              "random_ctx/accuracy": result["random_ctx_accuracy"],
              "chance": result["chance"], "majority": result["majority"]}
    for bucket, part in result["by_distance"].items():
        values.update({f"distance/{bucket}": part["accuracy"], f"distance/{bucket}/n": part["n"]})
    if result["merged"]["items"]:
        values.update({f"merged/{key}": count for key, count in result["merged"].items()})
    return values


def controlled_result(model: LoadedModel, examples: Sequence[dict]) -> dict[str, Any]:
    """`evaluate_suite`'s result, on the examples with their repeated candidates merged
    (`data.contrastive_suites.merge_repeated_candidates`), with its controls: `random_ctx_accuracy`
    (every example reading another example's context) and the suite's `chance` and `majority`
    rates; and `merged`: `{"items", "candidates_dropped"}`, the examples that had repeated
    candidates and the candidates dropped."""
    merged = merge_repeated_candidates(list(examples))
    result = evaluate_suite(model, merged.examples)
    result["random_ctx_accuracy"] = evaluate_suite(model, with_random_contexts(merged.examples))["accuracy"]
    result.update(chance_rates(merged.examples))
    result["merged"] = {"items": merged.items, "candidates_dropped": merged.dropped}
    return result


def report_lines(result: dict[str, Any]) -> list[str]:
    """`controlled_result` as text: the accuracy beside its controls, then per phenomenon, per
    distance to the antecedent (when the suite records distances) and the merged repeats (when
    there were any)."""
    lines = [f"accuracy {result['accuracy']:.4f} on {result['n']} examples (chance "
             f"{result['chance']:.4f}, majority {result['majority']:.4f}; with another example's "
             f"context {result['random_ctx_accuracy']:.4f})"]
    lines += [_part_line(name, part) for name, part in sorted(result["by_phenomenon"].items())]
    if result["by_distance"]:
        lines.append("  by distance to the antecedent (sentences back; none: not recorded):")
        lines += [_part_line(bucket, part) for bucket, part in result["by_distance"].items()]
    if result["merged"]["items"]:
        lines.append(f"  repeated candidates merged: examples affected {result['merged']['items']}, "
                     f"candidates dropped {result['merged']['candidates_dropped']}")
    return lines


def _part_line(name: str, part: dict[str, Any]) -> str:
    """One part of a suite (a phenomenon, a distance): its accuracy and, in brackets, its examples."""
    return f"  {name:>16}: {part['accuracy']:.4f} ({part['n']})"
