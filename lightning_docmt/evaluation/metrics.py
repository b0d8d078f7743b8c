"""Evaluation metrics (docs/design.md section 8).

- `corpus_bleu`, `corpus_chrf`: sacreBLEU (Post 2018) on detokenised text; every `Score` keeps the
  sacreBLEU signature string (e.g. `nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:2.6.0`), since
  BLEU numbers are only comparable under the same signature. `lowercase=True` is the case-insensitive
  BLEU of Zhang et al. 2018 and Li & Feng 2019.
- `doc_bleu`: document-level BLEU (d-BLEU): the sentences of each document joined with a space, then
  corpus BLEU over documents.
- `contrastive_accuracy`: accuracy on contrastive suites (ContraPro, DiscEvalMT, SCAT), overall and per
  phenomenon.

References are one string per hypothesis, or a list of reference streams (several references).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

from sacrebleu.metrics import BLEU, CHRF

from lightning_docmt.errors import DocMTInputError

References = Sequence[str] | Sequence[Sequence[str]]


@dataclass(frozen=True)
class Score:
    """A corpus score with its sacreBLEU signature and the statistics it was computed from.

    BLEU `counts`: n-gram matches `correct` and `total` (orders 1-4), `sys_len`, `ref_len`, brevity
    penalty `bp`. chrF `counts`: the parameters `char_order`, `word_order`, `beta`.
    """

    name: str
    score: float
    signature: str
    counts: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.name} = {self.score:.2f} ({self.signature})"


def corpus_bleu(hyps: Sequence[str], refs: References, tokenize: str = "13a",
                lowercase: bool = False) -> Score:
    """sacreBLEU corpus BLEU."""
    metric = _bleu_metric(tokenize, lowercase)
    result = metric.corpus_score(list(hyps), _reference_streams(hyps, refs))
    return Score(name="BLEU", score=float(result.score), signature=str(metric.get_signature()),
                 counts={"correct": list(result.counts), "total": list(result.totals),
                         "sys_len": int(result.sys_len), "ref_len": int(result.ref_len),
                         "bp": float(result.bp)})


def corpus_chrf(hyps: Sequence[str], refs: References, char_order: int = 6, word_order: int = 0,
                beta: int = 2, lowercase: bool = False) -> Score:
    """sacreBLEU chrF (word_order=2 gives chrF++)."""
    metric = CHRF(char_order=char_order, word_order=word_order, beta=beta, lowercase=lowercase)
    result = metric.corpus_score(list(hyps), _reference_streams(hyps, refs))
    return Score(name=result.name, score=float(result.score),
                 signature=str(metric.get_signature()),
                 counts={"char_order": char_order, "word_order": word_order, "beta": beta})


def doc_bleu(hyps: Sequence[str], refs: References, doc_ids: Sequence[str], tokenize: str = "13a",
             lowercase: bool = False) -> Score:
    """d-BLEU: join each document's sentences (in the given order) with a space, then corpus BLEU.

    Documents are ordered by first appearance of their id; their sentences need not be contiguous.
    """
    streams = _reference_streams(hyps, refs)
    if len(doc_ids) != len(hyps):
        raise DocMTInputError(f"{len(hyps)} hypotheses but {len(doc_ids)} document ids")
    order: dict[str, list[int]] = defaultdict(list)
    for i, doc_id in enumerate(doc_ids):
        order[doc_id].append(i)

    def join(sentences: Sequence[str]) -> list[str]:
        return [" ".join(sentences[i] for i in indices) for indices in order.values()]

    score = corpus_bleu(join(hyps), [join(stream) for stream in streams], tokenize, lowercase)
    return Score(name="d-BLEU", score=score.score, signature=score.signature, counts=score.counts)


def contrastive_accuracy(scores: Sequence[Sequence[float]], labels: Sequence[int],
                         phenomena: Sequence[str] | None = None) -> dict[str, Any]:
    """Accuracy of picking the correct candidate by score (e.g. log-probability).

    An example is correct when the labelled candidate scores strictly higher than every other
    candidate: ties (and NaN scores) count as wrong, so a model that gives all candidates the same
    score gets 0, not chance. Returns `{"accuracy", "n", "by_phenomenon": {name: {"accuracy", "n"}}}`
    (`by_phenomenon` is empty when no phenomena are given).
    """
    if len(scores) != len(labels) or (phenomena is not None and len(phenomena) != len(labels)):
        raise DocMTInputError(f"{len(scores)} score lists, {len(labels)} labels and "
                              f"{len(phenomena) if phenomena is not None else 'no'} phenomena")
    if not scores:
        raise DocMTInputError("no contrastive examples")
    hits = []
    for i, (candidates, label) in enumerate(zip(scores, labels)):
        if len(candidates) < 2:
            raise DocMTInputError(f"example {i}: needs at least 2 candidates, got {len(candidates)}")
        if not 0 <= label < len(candidates):
            raise DocMTInputError(f"example {i}: label {label} is not a candidate index "
                                  f"(0..{len(candidates) - 1})")
        hits.append(all(candidates[label] > s for j, s in enumerate(candidates) if j != label))
    by_phenomenon: dict[str, list[bool]] = defaultdict(list)
    for name, hit in zip(phenomena or [], hits):
        by_phenomenon[name].append(hit)
    return {"accuracy": sum(hits) / len(hits), "n": len(hits),
            "by_phenomenon": {name: {"accuracy": sum(h) / len(h), "n": len(h)}
                              for name, h in sorted(by_phenomenon.items())}}


def _bleu_metric(tokenize: str, lowercase: bool) -> BLEU:
    try:
        return BLEU(tokenize=tokenize, lowercase=lowercase)
    except KeyError:
        raise DocMTInputError(f"unknown BLEU tokenizer '{tokenize}'; sacreBLEU has: "
                              f"{', '.join(BLEU.TOKENIZERS)}", key="eval.tokenize") from None


def _reference_streams(hyps: Sequence[str], refs: References) -> list[list[str]]:
    """One list per reference set, each as long as `hyps`."""
    if not hyps:
        raise DocMTInputError("no hypotheses to score")
    streams = [list(refs)] if all(isinstance(r, str) for r in refs) else [list(s) for s in refs]
    for stream in streams:
        if len(stream) != len(hyps) or not all(isinstance(r, str) for r in stream):
            raise DocMTInputError(f"{len(hyps)} hypotheses but a reference set of {len(stream)} "
                                  "entries (expected one string per hypothesis)")
    return streams
