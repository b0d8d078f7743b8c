"""Greedy and batched beam search over the incremental model interface (`nn/seq2seq.py`).

Both searches encode each sentence once, expand the `EncoderState` and the decoder cache with
`index_select` (beam search keeps one copy of a sentence's cross-attention keys and values, which
its k beams read, `nn/attention.py`), and feed one token per step to `decode_step`. Call them on a
model in eval mode.

Conventions shared by both:
- Scores are the model's log-probabilities (log-softmax of its logits), summed over the hypothesis
  tokens and the final `<eos>`. `<pad>` and `<s>` are never generated: their log-probabilities are
  set to -inf after the log-softmax, without renormalising, so a score is the model's own probability.
- Maximum length, per sentence: `max_len = floor(max_len_a * |x| + max_len_b)` target tokens, where
  |x| is the source sentence length without its `<eos>`. A hypothesis that reaches `max_len`
  tokens is forced to end: at that step only `<eos>` may follow (with its true log-probability).
- Returned hypotheses hold token ids without `<s>` and `<eos>`, in the batch's row order.

Beam search (THUMT's algorithm, the toolkit of Zhang et al. 2018, with fairseq's rule for which
`<eos>` candidates are kept), per sentence with beam size k:
1. Extend each of the k open hypotheses by every token; rank the candidates by summed log-probability
   and keep the 2k best.
2. A candidate ending in `<eos>` and ranked among the best k is finished, with the GNMT
   length-normalised score `log P(y) / ((5 + |y|) / 6) ** alpha` (Wu et al. 2016), where |y|
   counts the `<eos>` (as THUMT does). The k best finished hypotheses are kept.
3. The k best candidates not ending in `<eos>` are the open hypotheses of the next step.
4. Stopping rule: a sentence is done when no open hypothesis can beat its k-th best finished
   score. Log-probabilities only decrease as a hypothesis grows, so an open hypothesis with summed
   log-probability s can at best score s / max(lp(t + 1), lp(max_len + 1)), with t its current
   length. Until k hypotheses are finished, the k-th best is -inf, so the search goes on; the
   forced `<eos>` at max_len finishes every open hypothesis at the latest.
With k = 1 and alpha = 0 this is exactly greedy search. Finished sentences leave the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from lightning_docmt.batch import BOS_ID, EOS_ID, PAD_ID
from lightning_docmt.nn.seq2seq import IncrementalSeq2Seq

NEG_INF = float("-inf")
RANKING_CHUNK = 64  # tokens per chunk of the candidate ranking (`best_extensions`)


@dataclass(frozen=True)
class Hypothesis:
    """One output sentence: `tokens` without `<s>`/`<eos>`, its search `score` and raw `log_prob`.

    `log_prob` sums the log-probabilities of the tokens and the final `<eos>`; `score` is
    `log_prob` length-normalised (beam search) or `log_prob` itself (greedy search).
    """

    tokens: list[int]
    score: float
    log_prob: float


def length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """GNMT length penalty ((5 + |y|) / 6) ** alpha (Wu et al. 2016, Eq. 14)."""
    return ((5.0 + length) / 6.0) ** alpha


def max_target_lengths(src: Tensor, max_len_a: float, max_len_b: float) -> Tensor:
    """(B,) floor(a * |x| + b), |x| = source tokens without `<eos>`."""
    src_len = src.ne(PAD_ID).sum(1) - 1
    return (max_len_a * src_len.double() + max_len_b).floor().clamp(min=0).long()


def next_token_log_probs(model: IncrementalSeq2Seq, tokens: Tensor, state, cache, forced_eos: Tensor) -> Tensor:
    """(N, V) log-probabilities of the next token; rows with `forced_eos` may only produce `<eos>`."""
    lprobs = torch.log_softmax(model.decode_step(tokens, state, cache), dim=-1, dtype=torch.float32)
    lprobs[:, PAD_ID] = NEG_INF
    lprobs[:, BOS_ID] = NEG_INF
    if forced_eos.any():  # most steps force no row: skip building an (N, V) mask
        eos_log_prob = lprobs[forced_eos, EOS_ID]
        lprobs[forced_eos] = NEG_INF
        lprobs[forced_eos, EOS_ID] = eos_log_prob
    return lprobs


def best_extensions(lprobs: Tensor, scores: Tensor, count: int) -> tuple[Tensor, Tensor]:
    """The `count` best one-token extensions of each sentence's k open hypotheses, ranked by summed
    log-probability: `(scores.view(-1, 1) + lprobs).view(n, k * V).topk(count, dim=1)`, values and
    indices into (k * V), without adding the scores to all n * k * V log-probabilities or ranking them.

    lprobs (n * k, V), scores (n, k). The log-probabilities are cut into chunks of `RANKING_CHUNK`
    tokens and each chunk is represented by its best candidate (its maximum plus its beam's score):
    the `count` best candidates lie in the `count` chunks with the best maxima (a chunk holding one
    of them has a maximum at least as good as the count-th best, and at most `count` chunks do), so
    only those chunks are ranked. The values are the same sums; among exactly equal sums the order
    may differ from a full `topk`, which leaves it unspecified too, and candidates at -inf (more
    asked for than there are finite ones) may repeat a token."""
    n, k = scores.shape
    rows, vocab = lprobs.shape
    width = RANKING_CHUNK
    full, tail = divmod(vocab, width)
    chunk_max = [lprobs[:, :full * width].view(rows, full, width).amax(dim=2)] if full else []  # (n * k, full)
    if tail:
        chunk_max.append(lprobs[:, full * width:].amax(dim=1, keepdim=True))  # (n * k, 1)
    chunk_best = (torch.cat(chunk_max, dim=1) + scores.view(-1, 1)).view(n, -1)  # (n, k * chunks)
    chunks = chunk_best.size(1) // k
    picked = chunk_best.topk(min(count, k * chunks), dim=1).indices  # (n, c)
    beam, chunk = torch.div(picked, chunks, rounding_mode="floor"), picked % chunks
    columns = chunk[:, :, None] * width + torch.arange(width, device=lprobs.device)  # (n, c, width)
    past_end = columns >= vocab  # the last chunk's columns past V: read as V - 1, ranked as -inf
    columns = columns.clamp(max=vocab - 1)
    rows_read = (torch.arange(n, device=lprobs.device)[:, None] * k + beam)[:, :, None]  # (n, c, 1)
    values = lprobs[rows_read, columns] + scores.gather(1, beam)[:, :, None]  # (n, c, width)
    top_scores, position = values.masked_fill(past_end, NEG_INF).view(n, -1).topk(count, dim=1)  # (n, count)
    return top_scores, (beam[:, :, None] * vocab + columns).view(n, -1).gather(1, position)


@torch.no_grad()
def greedy_search(model: IncrementalSeq2Seq, batch: dict[str, Tensor], max_len_a: float = 1.2,
                  max_len_b: float = 10) -> list[Hypothesis]:
    """The most probable token at every step; `score` = `log_prob`."""
    src = batch["src"]
    max_lens = max_target_lengths(src, max_len_a, max_len_b)
    state = model.encode(batch)
    cache = model.init_cache(state)
    rows = torch.arange(src.size(0), device=src.device)  # batch row of each active sentence
    tokens = torch.full((src.size(0), 1), BOS_ID, dtype=torch.long, device=src.device)
    log_probs = torch.zeros(src.size(0), dtype=torch.float32, device=src.device)
    results: list[Hypothesis | None] = [None] * src.size(0)
    for step in range(1, int(max_lens.max()) + 2):
        lprobs = next_token_log_probs(model, tokens[:, -1:], state, cache, step > max_lens)
        best_lp, best = lprobs.max(dim=-1)
        log_probs = log_probs + best_lp
        tokens = torch.cat([tokens, best[:, None]], dim=1)
        ended = best.eq(EOS_ID)
        if not ended.any():
            continue
        for i in ended.nonzero().squeeze(1).tolist():
            score = float(log_probs[i])
            results[int(rows[i])] = Hypothesis(tokens[i, 1:-1].tolist(), score, score)
        keep = (~ended).nonzero().squeeze(1)
        if keep.numel() == 0:
            break
        rows, tokens, log_probs, max_lens = rows[keep], tokens[keep], log_probs[keep], max_lens[keep]
        state, cache = state.index_select(keep), cache.index_select(keep)
    return results


@torch.no_grad()
def beam_search_nbest(model: IncrementalSeq2Seq, batch: dict[str, Tensor], beam: int = 4,
                      len_penalty: float = 0.6, max_len_a: float = 1.2, max_len_b: float = 10,
                      nbest: int | None = None) -> list[list[Hypothesis]]:
    """Per sentence, the `nbest` (default `beam`) best finished hypotheses, best first (see the module docstring)."""
    src = batch["src"]
    k, device = beam, src.device
    nbest = beam if nbest is None else min(nbest, beam)
    max_lens = max_target_lengths(src, max_len_a, max_len_b)
    state = model.encode(batch)
    cache = model.init_cache(state)
    expand = torch.arange(src.size(0), device=device).repeat_interleave(k)
    state, cache = state.index_select(expand), cache.index_select(expand, shared=k)

    rows = torch.arange(src.size(0), device=device)  # batch row of each active sentence (n,)
    scores = torch.full((src.size(0), k), NEG_INF, device=device)  # summed log-probs of the open hypotheses
    scores[:, 0] = 0.0  # a single open hypothesis, <s>, at the start
    kept = torch.full((src.size(0), k), NEG_INF, device=device)  # the k best finished scores
    tokens = torch.full((src.size(0) * k, 1), BOS_ID, dtype=torch.long, device=device)  # (n * k, t)
    finished: list[list[Hypothesis]] = [[] for _ in range(src.size(0))]
    beam_offsets = torch.arange(k, device=device)

    for step in range(1, int(max_lens.max()) + 2):
        n = rows.numel()
        lprobs = next_token_log_probs(model, tokens[:, -1:], state, cache,
                                      (step > max_lens).repeat_interleave(k))  # (n * k, V)
        vocab = lprobs.size(1)
        top_scores, top_index = best_extensions(lprobs, scores, min(2 * k, k * vocab))  # (n, 2k), best first
        origin = torch.div(top_index, vocab, rounding_mode="floor")  # beam each candidate extends
        token = top_index % vocab
        is_eos = token.eq(EOS_ID)

        penalty = length_penalty(step, len_penalty)  # every candidate has `step` tokens, <eos> included
        finishing = is_eos[:, :k] & top_scores[:, :k].isfinite()
        if finishing.any():
            for i, j in finishing.nonzero().tolist():
                log_prob = float(top_scores[i, j])
                history = tokens[i * k + int(origin[i, j]), 1:].tolist()
                finished[int(rows[i])].append(Hypothesis(history, log_prob / penalty, log_prob))
            new_scores = torch.where(finishing, top_scores[:, :k] / penalty, NEG_INF)
            kept = torch.cat([kept, new_scores], dim=1).topk(k, dim=1).values

        # The k best candidates that do not end in <eos> stay open (stable: rank order kept).
        order = torch.sort(is_eos.to(torch.uint8), dim=1, stable=True).indices[:, :k]  # (n, k)
        scores = top_scores.gather(1, order)
        source_rows = (torch.arange(n, device=device)[:, None] * k + origin.gather(1, order)).view(-1)
        tokens = torch.cat([tokens[source_rows], token.gather(1, order).view(-1, 1)], dim=1)
        cache = cache.index_select(source_rows, include_static=False)

        best_penalty = length_penalty((max_lens + 1).double(), len_penalty).clamp(
            min=length_penalty(step + 1, len_penalty))  # (n,) max(lp(t + 1), lp(max_len + 1))
        best_open = scores.max(dim=1).values.double() / best_penalty  # (n,)
        done = best_open <= kept.min(dim=1).values.double()
        if done.all():
            break
        if done.any():
            keep = (~done).nonzero().squeeze(1)
            keep_rows = (keep[:, None] * k + beam_offsets).view(-1)
            rows, scores, kept, max_lens = rows[keep], scores[keep], kept[keep], max_lens[keep]
            tokens = tokens[keep_rows]
            state, cache = state.index_select(keep_rows), cache.index_select(keep_rows)

    return [sorted(hyps, key=lambda h: -h.score)[:nbest] for hyps in finished]


def beam_search(model: IncrementalSeq2Seq, batch: dict[str, Tensor], beam: int = 4, len_penalty: float = 0.6,
                max_len_a: float = 1.2, max_len_b: float = 10) -> list[Hypothesis]:
    """The best hypothesis of every sentence (see `beam_search_nbest`)."""
    return [hyps[0] for hyps in beam_search_nbest(model, batch, beam, len_penalty, max_len_a, max_len_b, nbest=1)]


@torch.no_grad()
def best_tokens(model: IncrementalSeq2Seq, batch: dict[str, Tensor], decode: Any, beam: int,
                len_penalty: float | None = None) -> list[list[int]]:
    """The best hypothesis' token ids (no `<bos>`/`<eos>`) of every sentence of `batch`: greedy
    search for `beam` 1, else beam search, with the run's `decode.*` settings (`max_len_a`,
    `max_len_b`, and `len_penalty`, GNMT's alpha, unless given). The one decode of the test loop,
    `docmt translate` and the random-context controls (trap K11: one path, one precision)."""
    if beam == 1:
        results = greedy_search(model, batch, max_len_a=decode.max_len_a, max_len_b=decode.max_len_b)
    else:
        alpha = decode.len_penalty if len_penalty is None else len_penalty
        results = beam_search(model, batch, beam=beam, len_penalty=alpha, max_len_a=decode.max_len_a,
                              max_len_b=decode.max_len_b)
    return [r.tokens for r in results]
