"""Does a model use its context? CXMI and the random-context control (docs/design.md section 8).

A context model's BLEU gain over a sentence model can come from anything that differs between the
two (more parameters, more training steps); these diagnostics ask the model itself, on the test
split, with the context swapped by `data/context_anchors.py` and everything else unchanged:

- **CXMI** (conditional cross-mutual information, Fernandes et al. 2021, "Measuring and Increasing
  Context Usage in Context-Aware Machine Translation", Eq. 3): the mean over the target tokens of
  `log p(y_t | x, C, y_<t) - log p(y_t | x, y_<t)`, both from the *same* model, the second with
  every context side it reads emptied (the layout of a document's first sentence). Reported over
  all tokens (`cxmi`) and separately for the first sentences of documents (`cxmi/first`: for a
  model that reads previous sentences only, their context is empty either way, so it is 0 up to
  float rounding, the check that the two passes differ only in the context; rounding, because the
  other rows of a batch change their context, and with it the padded width a model such as the
  concatenation one computes over. A model that also reads the next sentences, like the
  Flat-Transformer, does have context there, and its `cxmi/first` is not 0) and for the others
  (`cxmi/rest`). A model that ignores its context gets exactly 0; the paper's
  estimate compares two models, this one the model with itself (their "CXMI of a single model").
- **Random-context control**: every sentence reads the context of a sentence of a document of
  another collection (another book of the Bible: another chapter of the same book shares names and
  story, trap K10), with as many context sentences (seeded, `data/context_anchors.py`).
  `random_ctx/cxmi` is the same difference of log-probabilities against random instead of empty
  context (how much better the real context is than an irrelevant one). `random_ctx/bleu` is the
  test BLEU decoded with the random context, and `random_ctx/bleu_delta` its difference to the real
  context decoded in the same path: same precision, same batches, same beam (trap K11: a delta
  between two precisions measures the precision). A model that uses its context loses BLEU; one
  whose gain comes from elsewhere does not. `random_ctx/bleu_floor`, the real context decoded
  again in batches of half the budget minus the real decode, is the control's own noise floor.
- **Target-side context** is read as the test BLEU reads it: the model's own translations of the
  previous sentences (its test loop's, in document order), not the references, for the CXMI and
  the random control alike; `cxmi/gold_context` is the CXMI with the reference previous sentences.

Every pass runs under the autocast of the test loop's precision (`inference/device.autocast_for`).
Scores are in nats per target token (the final `<eos>` included), in the order of `sent_index`.
Models that carry a state from sentence to sentence are scored only in document order, which these
passes do not do: they are refused (`check_sentence_by_sentence`); their test loop scores them
(`evaluation/carried_context.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch

from lightning_docmt.batch import PAD_ID
from lightning_docmt.data.cache import BinarizedSplit
from lightning_docmt.data.collate import collate, row_lengths
from lightning_docmt.data.context_anchors import (
    RANDOM_CONTEXT_SEED,
    ContextAnchors,
    document_groups,
    no_context,
    own_context,
    random_context,
)
from lightning_docmt.data.sampler import TokenBudgetBatchSampler
from lightning_docmt.evaluation import metrics
from lightning_docmt.inference import decoding
from lightning_docmt.inference.device import autocast_for
from lightning_docmt.inference.loaded_model import LoadedModel
from lightning_docmt.inference.own_outputs import OutputTokens, WithContextTargets
from lightning_docmt.inference.translate import check_sentence_by_sentence, collated
from lightning_docmt.nn.scoring import token_log_probs

# What each score means, printed under every table that shows it (tables/report.py), so that no
# column is read the wrong way round: `random_ctx/cxmi` is not "the CXMI of random context".
METRIC_MEANINGS = {
    "cxmi": "how much more likely the references are with the row's real context than with none "
            "(nats per target token, the same model); 0 for a model that reads no context",
    "cxmi/first": "`cxmi` over the first sentences of documents (0 unless the model reads next sentences)",
    "cxmi/rest": "`cxmi` over the other sentences",
    "random_ctx/cxmi": "how much more likely the references are with the real context than with the "
                       "context of a document of another collection (book): near 0 when the model "
                       "reads only that there is context, near `cxmi` or above when it reads what "
                       "its own context says",
    "random_ctx/bleu": "BLEU decoded with the context of a document of another collection (book)",
    "random_ctx/bleu_delta": "`random_ctx/bleu` minus the real context's BLEU decoded in the same path "
                             "(precision, batches, beam): below 0 when the row's BLEU depends on what "
                             "its own context says",
    "random_ctx/bleu_floor": "the real context decoded again in other batches minus the real decode: the "
                             "control's noise floor, a `random_ctx/bleu_delta` within it is noise",
    "random_ctx/other_collection": "the share of rows whose control state came from another collection "
                                   "(a model carrying a state: its test batch may hold one collection only)",
    "initial_damage": "the valid NLL (nats per target token) of the model as the first stage that added "
                      "parameters began, minus that of the checkpoint it started from: how much the fresh "
                      "parameters disturbed it",
    "cxmi/gold_context": "`cxmi` with the reference previous target sentences as context instead of the "
                         "model's own translations (target-side context only)",
}


@dataclass(frozen=True)
class SentenceLogProbs:
    """Per sentence of a split, (n,) each: summed log-probability of its target tokens and their count."""

    total: np.ndarray
    tokens: np.ndarray


@torch.no_grad()
def sentence_log_probs(model: LoadedModel, split: BinarizedSplit,
                       contexts: Sequence[ContextAnchors], max_tokens: int) -> list[SentenceLogProbs]:
    """Teacher-forced log-probabilities of every reference target of `split`, once with the
    context of each of `contexts`.

    Every pass uses the same batches (packed by the longest row of any pass), so that the source
    and target are padded alike and a model that ignores its context gets bit-identical scores.
    """
    check_sentence_by_sentence(model, "context-usage scoring")
    window, indices = model.window, np.arange(split.n_sentences)
    sizes = np.max([row_lengths(split, window, indices, anchors) for anchors in contexts], axis=0)
    totals = [np.zeros(split.n_sentences) for _ in contexts]
    tokens = np.zeros(split.n_sentences, dtype=np.int64)
    for batch_indices in TokenBudgetBatchSampler(indices, sizes, max_tokens, shuffle=False):
        for total, anchors in zip(totals, contexts):
            batch = {k: v.to(model.device) for k, v in
                     collate(split, batch_indices, window, anchors).items()}
            per_token = token_log_probs(model.model, batch)  # (B, T), 0 at padding
            total[batch_indices] = per_token.sum(dim=1).double().cpu().numpy()
        tokens[batch_indices] = batch["tgt_out"].ne(PAD_ID).sum(dim=1).cpu().numpy()
    return [SentenceLogProbs(total, tokens) for total in totals]


def per_token_gain(real: SentenceLogProbs, other: SentenceLogProbs, rows: np.ndarray) -> float:
    """Mean over the target tokens of the given sentences of log p(real context) - log p(other)."""
    count = int(real.tokens[rows].sum())
    return float((real.total[rows] - other.total[rows]).sum() / count) if count else 0.0


def decode_bleu(model: LoadedModel, split: BinarizedSplit, anchors: ContextAnchors,
                references: list[str], tokenize: str, sampler: Iterable[Sequence[int]]) -> float:
    """Test BLEU of beam search (`decode.*`) with the context of `anchors`, in the batches of
    `sampler` (index lists)."""
    cfg = model.cfg
    hyps = [""] * split.n_sentences
    with torch.no_grad():
        for batch in collated(split, sampler, model.window, model.device, anchors):
            best = decoding.best_tokens(model.model, batch, cfg.decode, cfg.decode.beam)
            for i, ids in zip(batch["sent_index"].tolist(), best):
                hyps[i] = model.tgt_vocab.decode(ids)
    return metrics.corpus_bleu(hyps, references, tokenize=tokenize,
                               lowercase=cfg.eval.lowercase).score


def random_context_bleu(model: LoadedModel, split: BinarizedSplit, real: ContextAnchors,
                        random: ContextAnchors, references: list[str], tokenize: str) -> dict[str, float]:
    """`random_ctx/bleu`, `random_ctx/bleu_delta` and `random_ctx/bleu_floor`, from three decodes
    in one path (the caller's precision, `decode.*`): the real and the random context in the same
    batches (packed by the longer row of either), and the real context again in batches of half
    the token budget. The delta is random minus real; the floor, real in other batches minus real,
    is the change that batch composition and rounding alone make: a delta within it is noise."""
    window, budget = model.window, int(model.cfg.decode.batch_max_tokens)
    indices = np.arange(split.n_sentences)
    sizes = np.max([row_lengths(split, window, indices, anchors) for anchors in (real, random)], axis=0)
    batches = list(TokenBudgetBatchSampler(indices, sizes, budget, shuffle=False))
    halves = TokenBudgetBatchSampler(indices, sizes, max(budget // 2, int(sizes.max(initial=1))), shuffle=False)
    own = decode_bleu(model, split, real, references, tokenize, batches)
    other = decode_bleu(model, split, random, references, tokenize, batches)
    again = decode_bleu(model, split, real, references, tokenize, halves)
    return {"random_ctx/bleu": other, "random_ctx/bleu_delta": other - own, "random_ctx/bleu_floor": again - own}


def context_usage_metrics(model: LoadedModel, split: BinarizedSplit, references: list[str],
                          tokenize: str, decode: bool, *, precision: str = "32-true",
                          own_targets: OutputTokens | None = None) -> dict[str, float]:
    """`cxmi`, `cxmi/first`, `cxmi/rest`, `random_ctx/cxmi`, and with `decode` the random-context
    BLEU scores (`random_context_bleu`), on `split`, every pass under the autocast of `precision`
    (the resolved precision of the run's test loop, so that these passes compute as it does).

    `own_targets`: the model's own translations of `split` (its test loop's, in document order),
    for a model with target-side context. Its context is then cut from them, as its test BLEU
    reads it, and `cxmi/gold_context` is the CXMI with the reference previous sentences instead.
    The random context comes from another collection's documents (`document_groups`)."""
    window = model.window
    if not window.reads_context:  # its batches hold no context tensors: every pass gives the same
        return {**dict.fromkeys(("cxmi", "cxmi/first", "cxmi/rest", "random_ctx/cxmi"), 0.0),
                **({"random_ctx/bleu_delta": 0.0, "random_ctx/bleu_floor": 0.0} if decode else {})}
    max_tokens = int(model.cfg.data.eval_max_tokens)
    random_anchors = random_context(split.doc_offsets, *window.reach, RANDOM_CONTEXT_SEED,
                                    groups=document_groups(split.doc_ids))
    real_anchors = own_context(split.doc_offsets)
    read = split if own_targets is None else WithContextTargets(split, own_targets)
    everything = np.arange(split.n_sentences)
    first = split.doc_offsets[:-1][np.diff(split.doc_offsets) > 0]
    rest = np.setdiff1d(everything, first)
    with autocast_for(precision, model.device):
        real, empty, shuffled = sentence_log_probs(
            model, read, [real_anchors, no_context(split.n_sentences), random_anchors], max_tokens)
        scores = {"cxmi": per_token_gain(real, empty, everything),
                  "cxmi/first": per_token_gain(real, empty, first),
                  "cxmi/rest": per_token_gain(real, empty, rest),
                  "random_ctx/cxmi": per_token_gain(real, shuffled, everything)}
        if own_targets is not None:
            gold = sentence_log_probs(model, split, [real_anchors], max_tokens)[0]
            scores["cxmi/gold_context"] = per_token_gain(gold, empty, everything)
        if decode:
            scores.update(random_context_bleu(model, read, real_anchors, random_anchors, references, tokenize))
    return scores
