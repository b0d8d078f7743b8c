"""Greedy and beam search: hand-computed searches over a table model, and checks on a real Transformer."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import pytest
import torch
from torch import Tensor

from lightning_docmt.batch import BOS_ID, EOS_ID, PAD_ID
from lightning_docmt.inference.decoding import (
    RANKING_CHUNK,
    Hypothesis,
    beam_search,
    beam_search_nbest,
    best_extensions,
    greedy_search,
)
from lightning_docmt.nn.scoring import sequence_log_probs
from lightning_docmt.nn.seq2seq import DecoderCache, EncoderState
from tests.helpers.model_inputs import padded, random_batch, tiny_model

A, B = 5, 6  # the two ordinary tokens of the table model
V = 7

Policy = Callable[[int, tuple[int, ...]], dict[int, float]]


@dataclass
class PrefixCache(DecoderCache):
    prefix: Optional[Tensor] = None  # (B, t) tokens fed so far, <s> included


class TableModel:
    """A model whose next-token distribution is `policy(sentence_key, prefix)`, prefix without `<s>`.

    The sentence key is the first source token. Unlisted tokens have probability 0.
    """

    def __init__(self, policy: Policy):
        self.policy = policy
        self.encode_calls = 0
        self.steps = 0

    def encode(self, batch: dict[str, Tensor]) -> EncoderState:
        self.encode_calls += 1
        src = batch["src"]
        return EncoderState(memory=src[:, :1, None].float(), memory_pad=src[:, :1].eq(PAD_ID))

    def init_cache(self, state: EncoderState) -> PrefixCache:
        return PrefixCache(prefix=torch.zeros(state.memory.size(0), 0, dtype=torch.long))

    def distribution(self, key: int, prefix: list[int]) -> Tensor:
        row = torch.full((V,), float("-inf"))
        for token, prob in self.policy(key, tuple(prefix)).items():
            row[token] = math.log(prob)
        return row

    def decode_step(self, tokens: Tensor, state: EncoderState, cache: PrefixCache) -> Tensor:
        self.steps += 1
        cache.prefix = torch.cat([cache.prefix, tokens], dim=1)
        keys = state.memory[:, 0, 0].long().tolist()
        return torch.stack([self.distribution(key, prefix[1:]) for key, prefix in zip(keys, cache.prefix.tolist())])

    def __call__(self, batch: dict[str, Tensor]) -> Tensor:
        """Teacher-forced logits (B, T, V)."""
        keys = batch["src"][:, 0].tolist()
        return torch.stack([torch.stack([self.distribution(key, row[1:t + 1]) for t in range(len(row))])
                            for key, row in zip(keys, batch["tgt_in"].tolist())])


def table_policy(table: dict[tuple[int, ...], dict[int, float]]) -> Policy:
    """Prefixes outside the table (dead beams, padding) end at once; they never reach a result."""
    return lambda key, prefix: table.get(prefix, {EOS_ID: 1.0})


# Tree 1. Greedy takes A (.5) then A (.4 > .35) then <eos>: "A A", P = .5 * .4 = .2.
# Beam 2, alpha 0: step 1 keeps A (.5), B (.4). Step 2 candidates: B<eos> .36, AA .2, A<eos> .175,
# AB .125, BA .04; B<eos> is in the best two: "B" finishes with .36; AA and AB stay open.
# Step 3: AA<eos> .2 and AB<eos> .125 finish; nothing is open. Best two: "B" (.36), "A A" (.2).
TREE_1 = {(): {A: .5, B: .4, EOS_ID: .1}, (A,): {A: .4, B: .25, EOS_ID: .35}, (B,): {EOS_ID: .9, A: .1},
          (A, A): {EOS_ID: 1.0}, (A, B): {EOS_ID: 1.0}, (B, A): {EOS_ID: 1.0}}

# Tree 2. Finished hypotheses: "" P=.4 (|y|=1), "A" .6*.3=.18 (|y|=2), "A A" .6*.7*5/6=.35 (|y|=3),
# "A A A" .6*.7/6=.07 (|y|=4). GNMT lp(|y|) = ((5+|y|)/6)^alpha.
TREE_2 = {(): {EOS_ID: .4, A: .6}, (A,): {A: .7, EOS_ID: .3}, (A, A): {EOS_ID: 5 / 6, A: 1 / 6},
          (A, A, A): {EOS_ID: 1.0}}


def one_sentence(src_len: int = 3, key: int = 9) -> dict[str, Tensor]:
    return {"src": torch.tensor([[key] * src_len + [EOS_ID]])}


def test_greedy_follows_the_most_probable_token():
    [hyp] = greedy_search(TableModel(table_policy(TREE_1)), one_sentence(), max_len_a=0, max_len_b=10)
    assert hyp.tokens == [A, A]
    assert hyp.score == hyp.log_prob == pytest.approx(math.log(.5 * .4))


def test_beam_finds_a_better_hypothesis_than_greedy():
    model = TableModel(table_policy(TREE_1))
    nbest = beam_search_nbest(model, one_sentence(), beam=2, len_penalty=0.0, max_len_a=0, max_len_b=10)
    assert [h.tokens for h in nbest[0]] == [[B], [A, A]]
    assert [h.score for h in nbest[0]] == pytest.approx([math.log(.4 * .9), math.log(.5 * .4)])
    assert model.steps == 3 and model.encode_calls == 1


def test_length_penalty_changes_the_winner():
    # alpha = 0: "" (log .4 = -0.92) beats "A A" (log .35 = -1.05).
    model = TableModel(table_policy(TREE_2))
    nbest = beam_search_nbest(model, one_sentence(), beam=2, len_penalty=0.0, max_len_a=0, max_len_b=10)
    assert [h.tokens for h in nbest[0]] == [[], [A, A]]
    assert [h.score for h in nbest[0]] == pytest.approx([math.log(.4), math.log(.35)])
    # alpha = 1: "A A" scores log(.35) / (8/6) = -0.79 and beats "" at log(.4) / 1 = -0.92.
    model = TableModel(table_policy(TREE_2))
    nbest = beam_search_nbest(model, one_sentence(), beam=2, len_penalty=1.0, max_len_a=0, max_len_b=10)
    assert [h.tokens for h in nbest[0]] == [[A, A], []]
    assert [h.score for h in nbest[0]] == pytest.approx([math.log(.35) / (8 / 6), math.log(.4)])
    assert nbest[0][0].log_prob == pytest.approx(math.log(.35))
    # Stopping rule: after step 3 the open "A A A" (P = .07) can at best score
    # log(.07) / lp(max_len + 1) = -2.66 / (16/6) = -1.00 < -0.92, the second best finished: stop.
    assert model.steps == 3


def test_search_stops_once_no_open_hypothesis_can_win():
    # With a long maximum length the open "A A" after step 2 could still, at best, score
    # log(.42) / lp(41) = -0.11, above the second best finished "A" (log(.18) / lp(2) = -1.47):
    # step 3 runs; then "A A A" can at best score log(.07) / lp(41) = -0.35 > log(.4) = -0.92: step 4
    # runs and finishes it; nothing is open any more.
    model = TableModel(table_policy(TREE_2))
    [hyp] = beam_search(model, one_sentence(), beam=2, len_penalty=1.0, max_len_a=0, max_len_b=40)
    assert hyp.tokens == [A, A] and model.steps == 4


def test_beam_of_one_is_greedy_on_the_table_model():
    for tree in (TREE_1, TREE_2):
        [greedy] = greedy_search(TableModel(table_policy(tree)), one_sentence(), max_len_a=0, max_len_b=10)
        [beam] = beam_search(TableModel(table_policy(tree)), one_sentence(), beam=1, len_penalty=0.0,
                             max_len_a=0, max_len_b=10)
        assert beam == greedy


def never_ending(key: int, prefix: tuple[int, ...]) -> dict[int, float]:
    return {A: .9, EOS_ID: .1}


def test_max_length_forces_eos_per_sentence():
    # |x| = 3 and 1: max_len = floor(1.5 * 3 + 2) = 6 and floor(1.5 * 1 + 2) = 3.
    batch = {"src": padded([[9, 9, 9, EOS_ID], [9, EOS_ID]])}
    greedy = greedy_search(TableModel(never_ending), batch, max_len_a=1.5, max_len_b=2)
    assert [h.tokens for h in greedy] == [[A] * 6, [A] * 3]
    assert [h.log_prob for h in greedy] == pytest.approx([6 * math.log(.9) + math.log(.1),
                                                          3 * math.log(.9) + math.log(.1)])
    model = TableModel(never_ending)
    beam = beam_search(model, batch, beam=1, len_penalty=0.0, max_len_a=1.5, max_len_b=2)
    assert beam == greedy
    assert model.steps == 7  # 6 tokens + the forced <eos>


def test_batched_table_search_equals_one_sentence_at_a_time():
    trees = {7: TREE_1, 8: TREE_2}
    model = TableModel(lambda key, prefix: table_policy(trees[key])(key, prefix))
    batch = {"src": padded([[8, EOS_ID], [7, 7, 7, EOS_ID], [8, 8, EOS_ID]])}
    together = beam_search_nbest(model, batch, beam=2, len_penalty=1.0, max_len_a=0, max_len_b=10)
    alone = [beam_search_nbest(model, {"src": batch["src"][i:i + 1]}, beam=2, len_penalty=1.0, max_len_a=0,
                               max_len_b=10)[0] for i in range(3)]
    assert together == alone
    assert [h.tokens for h in together[1]] == [[B], [A, A]]  # TREE_1 at alpha 1: -1.02/(7/6) vs -1.61/(8/6)


def test_sequence_log_probs_sum_target_tokens_and_ignore_padding():
    model = TableModel(table_policy(TREE_2))
    batch = {"src": padded([[9, EOS_ID], [9, EOS_ID]]),
             "tgt_in": padded([[BOS_ID, A, A], [BOS_ID]]),
             "tgt_out": padded([[A, A, EOS_ID], [EOS_ID]])}
    assert sequence_log_probs(model, batch).tolist() == pytest.approx([math.log(.35), math.log(.4)])


# Real tiny Transformer (random weights)


def real_batch() -> dict[str, Tensor]:
    return random_batch([4, 7, 2, 5], [1, 1, 1, 1], seed=3)


@pytest.mark.parametrize("sentences,beam,vocab", [
    (5, 4, 8 * RANKING_CHUNK),  # whole chunks
    (3, 3, 3 * RANKING_CHUNK + 17),  # a short last chunk
    (2, 4, 11),  # fewer tokens than one chunk
    (4, 1, 2 * RANKING_CHUNK - 1),
])
def test_ranking_the_best_chunks_finds_the_best_extensions_of_a_full_ranking(sentences, beam, vocab):
    torch.manual_seed(vocab)
    lprobs = torch.randn(sentences * beam, vocab).log_softmax(dim=-1)
    lprobs[:, PAD_ID] = lprobs[:, BOS_ID] = float("-inf")
    scores = torch.randn(sentences, beam) * 3
    scores[0, 1:] = float("-inf")  # a sentence at its first step: one open hypothesis
    lprobs[beam:2 * beam] = float("-inf")  # sentence 1: nothing left but its last beam's <eos>
    lprobs[2 * beam - 1, EOS_ID] = -0.5
    count = min(2 * beam, beam * vocab)
    want_scores, want_index = (scores.view(-1, 1) + lprobs).view(sentences, -1).topk(count, dim=1)
    got_scores, got_index = best_extensions(lprobs, scores, count)
    assert torch.equal(got_scores, want_scores)
    finite = want_scores.isfinite()  # the order among the -inf candidates is unspecified on both sides
    assert torch.equal(got_index[finite], want_index[finite])
    assert finite[1].sum() == 1


def test_beam_of_one_is_greedy_on_a_transformer():
    model = tiny_model()
    greedy = greedy_search(model, real_batch(), max_len_a=1.0, max_len_b=3)
    beam = beam_search(model, real_batch(), beam=1, len_penalty=0.0, max_len_a=1.0, max_len_b=3)
    assert [h.tokens for h in beam] == [h.tokens for h in greedy]
    assert [h.score for h in beam] == pytest.approx([h.score for h in greedy], abs=1e-5)


def teacher_forced(model, batch: dict[str, Tensor], hyps: list[Hypothesis]) -> Tensor:
    """The model's own log-probability of every hypothesis followed by <eos>."""
    return sequence_log_probs(model, {"src": batch["src"], "tgt_in": padded([[BOS_ID] + h.tokens for h in hyps]),
                                      "tgt_out": padded([h.tokens + [EOS_ID] for h in hyps])})


@pytest.mark.parametrize("pre_norm", [False, True])
def test_beam_scores_are_the_models_length_normalised_log_probs(pre_norm):
    model = tiny_model(pre_norm=pre_norm)
    batch = real_batch()
    nbest = beam_search_nbest(model, batch, beam=3, len_penalty=0.6, max_len_a=1.0, max_len_b=3)
    for rank in range(3):
        hyps = [sentence_hyps[rank] for sentence_hyps in nbest]
        expected = teacher_forced(model, batch, hyps)
        assert [h.log_prob for h in hyps] == pytest.approx(expected.tolist(), abs=1e-4)
        penalties = [((5 + len(h.tokens) + 1) / 6) ** 0.6 for h in hyps]
        assert [h.score for h in hyps] == pytest.approx((expected / torch.tensor(penalties)).tolist(), abs=1e-4)
    for sentence_hyps in nbest:
        assert [h.score for h in sentence_hyps] == sorted((h.score for h in sentence_hyps), reverse=True)


def test_greedy_scores_are_the_models_log_probs():
    model = tiny_model()
    batch = real_batch()
    hyps = greedy_search(model, batch, max_len_a=1.0, max_len_b=3)
    assert [h.score for h in hyps] == pytest.approx(teacher_forced(model, batch, hyps).tolist(), abs=1e-4)


@pytest.mark.parametrize("arch", ["transformer", "concat"])
def test_batched_decoding_equals_decoding_each_sentence_alone(arch):
    model = tiny_model(arch)
    batch = random_batch([4, 7, 2, 5], [1, 1, 1, 1], [3, 0, 5, 2] if arch == "concat" else None, seed=3)
    searches = [lambda b: greedy_search(model, b, max_len_a=1.0, max_len_b=3),
                lambda b: beam_search(model, b, beam=3, len_penalty=0.6, max_len_a=1.0, max_len_b=3)]
    for search in searches:
        together = search(batch)
        for row, hyp in enumerate(together):
            alone = {key: value[row:row + 1] for key, value in batch.items()}
            alone = {key: value[:, : int(value.ne(PAD_ID).sum())] for key, value in alone.items()}
            [single] = search(alone)
            assert single.tokens == hyp.tokens
            assert single.score == pytest.approx(hyp.score, abs=1e-4)
