"""Batches mixing two training corpora at a share of target tokens (`data/mix_sampler.py`,
`data.mix`; Donato, Yu & Dyer 2021, Table 6: "~50% IWSLT per batch")."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from lightning_docmt.data.mix_sampler import MixedBatchSampler
from tests.helpers.sampler_resume import interrupt_and_resume

RNG = np.random.default_rng(0)
N_IN, N_OUT = 300, 700
INDICES = RNG.permutation(2000)[:N_IN + N_OUT]  # dataset indices, the two sides interleaved
IN, OUT = np.sort(INDICES[:N_IN]), np.sort(INDICES[N_IN:])
# (src, tgt, context) row lengths; the out-of-domain sentences are longer, as the Old Testament's
SIZES_IN = np.stack([RNG.integers(2, 40, N_IN), RNG.integers(2, 40, N_IN), RNG.integers(1, 60, N_IN)])
SIZES_OUT = np.stack([RNG.integers(2, 50, N_OUT), RNG.integers(2, 50, N_OUT), RNG.integers(1, 60, N_OUT)])
SIZE_OF = dict(zip(np.concatenate([IN, OUT]).tolist(), np.concatenate([SIZES_IN, SIZES_OUT], axis=1).T))
IN_DOMAIN = set(IN.tolist())
BUDGET = 3000


def sampler(share: float = 0.5, **kwargs) -> MixedBatchSampler:
    out = kwargs.pop("out", OUT)
    return MixedBatchSampler(IN, SIZES_IN, out, np.stack([SIZE_OF[i] for i in out], axis=1), share,
                             BUDGET, **kwargs)


def epoch(s) -> list[list[int]]:
    return list(s)


def target_tokens(batch: list[int]) -> tuple[int, int]:
    """(in-domain, all) target tokens of a batch."""
    tokens = [int(SIZE_OF[i][1]) for i in batch]
    return sum(t for i, t in zip(batch, tokens) if i in IN_DOMAIN), sum(tokens)


def padded_cost(batch: list[int]) -> int:
    return len(batch) * int(np.stack([SIZE_OF[i] for i in batch]).max(axis=0).sum())


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("share", [0.25, 0.5, 0.75])
def test_each_batch_holds_about_the_share_of_in_domain_target_tokens(share, seed):
    s = sampler(share, seed=seed)
    counts = []
    for e in range(3):
        s.set_epoch(e)
        counts += [target_tokens(b) for b in epoch(s)]
    own, total = np.array(counts).T
    assert abs(own.sum() / total.sum() - share) < 0.01  # over the 3 epochs' ~50-140 batches each
    assert np.mean(np.abs(own / total - share) <= 0.1) >= 0.95  # a batch: within 10 points
    assert s.in_domain_share(range(3)) == own.sum() / total.sum()  # what the run records


def test_every_batch_is_within_the_budget():
    batches = epoch(sampler())
    assert all(padded_cost(b) <= BUDGET or len(b) == 1 for b in batches)
    assert max(map(padded_cost, batches)) > 0.9 * BUDGET  # and the budget is used


def test_every_in_domain_sentence_once_per_epoch_and_the_other_side_read_evenly():
    s = sampler()
    reads: Counter[int] = Counter()
    for e in range(10):
        s.set_epoch(e)
        flat = [i for b in epoch(s) for i in b]
        assert sorted(i for i in flat if i in IN_DOMAIN) == IN.tolist()
        drawn = Counter(i for i in flat if i not in IN_DOMAIN)
        assert set(drawn) <= set(OUT.tolist())
        assert max(drawn.values()) <= 2  # twice only in an epoch whose draw spans two passes
        reads.update(drawn)
    assert set(reads) == set(OUT.tolist())  # 10 epochs read the other side ~4 times over: all of it,
    assert max(reads.values()) - min(reads.values()) <= 2  # each sentence about equally often


def test_a_small_out_of_domain_side_is_read_more_than_once_per_epoch():
    s = sampler(out=OUT[:40])
    drawn = Counter(i for b in epoch(s) for i in b if i not in IN_DOMAIN)
    assert set(drawn) == set(OUT[:40].tolist()) and min(drawn.values()) >= 2
    assert abs(s.in_domain_share([0]) - 0.5) < 0.01


def test_deterministic_per_seed_the_same_count_every_epoch():
    a, b = sampler(seed=7), sampler(seed=7)
    first = epoch(a)
    assert epoch(b) == first
    lengths = {len(first)}
    for e in range(1, 8):
        a.set_epoch(e)
        lengths.add(len(epoch(a)))
        assert epoch(a) != first
    assert lengths == {len(first)} == {len(a)}  # Lightning reads an epoch's length once
    assert epoch(sampler(seed=8)) != first


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_shards_have_equal_counts_and_share_the_epoch_without_overlap(world):
    single = epoch(sampler(seed=3))
    shards = [epoch(sampler(seed=3, num_replicas=world, rank=r)) for r in range(world)]
    assert len({len(s) for s in shards}) == 1
    assert sorted(i for s in shards for b in s for i in b) == sorted(i for b in single for i in b)
    assert all(padded_cost(b) <= BUDGET or len(b) == 1 for s in shards for b in s)


def test_resume_mid_epoch_gives_the_identical_remaining_batches():
    full, consumed, resumed, _ = interrupt_and_resume(sampler, epoch=3, consumed=4)
    assert consumed + epoch(resumed) == full
