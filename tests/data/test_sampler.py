from __future__ import annotations

import numpy as np
import pytest
from torch.utils.data import DistributedSampler

from lightning_docmt.data.doc_sampler import DocumentOrderBatchSampler
from lightning_docmt.data.sampler import TokenBudgetBatchSampler, pack_greedy
from tests.helpers.sampler_resume import interrupt_and_resume

RNG = np.random.default_rng(0)
N = 400
SIZES = np.stack([RNG.integers(2, 40, N), RNG.integers(2, 40, N), RNG.integers(1, 60, N)])
INDICES = np.sort(RNG.choice(1000, size=N, replace=False))  # candidates (e.g. the targets)
SIZE_OF = {int(i): SIZES[:, k] for k, i in enumerate(INDICES)}
BUDGET = 600


def sampler(**kwargs) -> TokenBudgetBatchSampler:
    return TokenBudgetBatchSampler(INDICES, SIZES, kwargs.pop("max_tokens", BUDGET), **kwargs)


def epoch(s) -> list[list[int]]:
    return list(s)


def padded_cost(batch: list[int], width: int = 0) -> int:
    sizes = np.stack([SIZE_OF[i] for i in batch])
    if width:
        sizes = -(-sizes // width) * width
    return len(batch) * int(sizes.max(axis=0).sum())


def test_pack_greedy_by_hand():
    # one tensor, budget 6: [2 2 2] costs 3*2 = 6; two 5s would cost 2*5 > 6, so one each
    assert pack_greedy(np.array([[2, 2, 2, 5, 5]]), 6).tolist() == [0, 3, 4, 5]
    # two tensors: rows (1,1),(1,1),(1,4): adding the third costs 3*(1+4) = 15 > 10
    assert pack_greedy(np.array([[1, 1, 1], [1, 1, 4]]), 10).tolist() == [0, 2, 3]


@pytest.mark.parametrize("width", [0, 8])
def test_token_budget_respected_on_padded_sizes(width):
    batches = epoch(sampler(bucket_width=width))
    for b in batches:
        assert padded_cost(b, width) <= BUDGET or len(b) == 1
    assert max(len(b) for b in batches) > 1


def test_a_sentence_over_the_budget_is_a_batch_of_its_own():
    sizes = np.array([[5, 500, 5], [5, 5, 5]])
    batches = epoch(TokenBudgetBatchSampler(np.arange(3), sizes, 100))
    assert sorted(map(sorted, batches)) == [[0, 2], [1]]


def test_every_sentence_exactly_once_per_epoch_on_one_rank():
    s = sampler()
    for e in range(2):
        s.set_epoch(e)
        flat = [i for b in epoch(s) for i in b]
        assert sorted(flat) == INDICES.tolist()


def test_deterministic_per_seed_different_per_epoch_and_seed():
    a, b = sampler(seed=7), sampler(seed=7)
    assert epoch(a) == epoch(b)
    first = epoch(a)
    a.set_epoch(1)
    assert epoch(a) != first and len(epoch(a)) == len(first)  # same batch count every epoch
    assert epoch(sampler(seed=8)) != first


def test_equal_keys_mix_between_epochs():
    s = sampler(bucket_width=16)
    contents = [set(map(frozenset, epoch(s)))]
    s.set_epoch(1)
    contents.append(set(map(frozenset, epoch(s))))
    assert contents[0] != contents[1]  # batch composition changes, not only batch order


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("shuffle", [True, False])
def test_ddp_shards_have_equal_counts_and_each_sentence_exactly_once(world, shuffle):
    single = epoch(sampler(seed=3, shuffle=shuffle))
    shards = [epoch(sampler(seed=3, shuffle=shuffle, num_replicas=world, rank=r))
              for r in range(world)]
    assert len({len(s) for s in shards}) == 1
    assert sum(map(len, shards)) - len(single) < world  # only a few batches split to balance
    assert sorted(i for s in shards for b in s for i in b) == INDICES.tolist()
    assert all(padded_cost(b) <= BUDGET or len(b) == 1 for s in shards for b in s)


def test_eval_order_is_sorted_by_length():
    batches = epoch(sampler(shuffle=False))
    firsts = [SIZE_OF[b[0]][0] for b in batches]
    assert firsts == sorted(firsts)


def test_fewer_batches_than_ranks_are_split_and_only_singletons_repeat():
    sizes = np.ones((2, 4), dtype=int)
    shards = [epoch(TokenBudgetBatchSampler(np.arange(4), sizes, 1000, num_replicas=3, rank=r))
              for r in range(3)]  # one batch of 4 -> split into 2 + 1 + 1
    assert sorted(i for s in shards for b in s for i in b) == [0, 1, 2, 3]
    assert [len(s) for s in shards] == [1, 1, 1]
    one = [epoch(TokenBudgetBatchSampler(np.arange(1), sizes[:, :1], 1000, num_replicas=2, rank=r))
           for r in range(2)]
    assert one == [[[0]], [[0]]]  # a single sentence for two ranks: repeated, never empty


def test_resume_mid_epoch_gives_the_identical_remaining_batches():
    full, consumed, resumed, state = interrupt_and_resume(sampler, epoch=3, consumed=4)
    assert state == {"epoch": 3, "seed": 5, "position": 4, "num_replicas": 2}
    assert consumed + epoch(resumed) == full
    assert epoch(resumed) == full  # later iterations start the epoch from its beginning


def test_state_at_the_end_of_an_epoch_resumes_with_the_next_epoch():
    s = sampler(seed=2)
    epoch(s)
    resumed = sampler()
    resumed.load_state_dict(s.state_dict())
    s.set_epoch(1)
    assert resumed.epoch == 1 and epoch(resumed) == epoch(s)


def test_resume_on_another_world_size_maps_the_global_position():
    state = {"epoch": 2, "seed": 1, "position": 3, "num_replicas": 2}
    resumed = sampler()
    with pytest.warns(UserWarning, match="2-rank sampler on 1 ranks"):
        resumed.load_state_dict(state)
    assert (resumed.epoch, resumed.position) == (2, 6)


def test_samplers_are_distributed_samplers_so_lightning_keeps_them():
    assert isinstance(sampler(), DistributedSampler)


# ---------------------------------------------------------------------------- document order
DOC_SIZES = [5, 1, 3, 7, 2, 2, 4, 6, 1, 3, 5]
DOC_OFFSETS = np.concatenate(([0], np.cumsum(DOC_SIZES)))
NOT_TARGETS = {3, 10, 11}  # sentence 3 (doc 0), 10 and 11 (doc 3): e.g. over-long
TARGETS = np.array([i for i in range(DOC_OFFSETS[-1]) if i not in NOT_TARGETS])
DOC_OF = np.repeat(np.arange(len(DOC_SIZES)), DOC_SIZES)


def doc_sampler(**kwargs) -> DocumentOrderBatchSampler:
    return DocumentOrderBatchSampler(DOC_OFFSETS, TARGETS, kwargs.pop("max_documents", 3), **kwargs)


def check_document_order(batches: list[list[int]], max_documents: int) -> None:
    """Each batch holds at most one sentence per document, at most `max_documents` of them,
    and each document's sentences arrive in order, one batch after the other."""
    last: dict[int, int] = {}
    for b in batches:
        docs = DOC_OF[b].tolist()
        assert len(set(docs)) == len(docs) <= max_documents
        for i, d in zip(b, docs):
            assert i > last.get(d, -1) or i == TARGETS[TARGETS >= DOC_OFFSETS[d]][0]  # or replay
            last[d] = i


def test_document_order_yields_each_documents_targets_in_order():
    s = doc_sampler(max_documents=3)
    batches = epoch(s)
    check_document_order(batches, 3)
    assert sorted(i for b in batches for i in b) == TARGETS.tolist()
    per_doc = {}
    for b in batches:
        for i in b:
            per_doc.setdefault(DOC_OF[i], []).append(i)
    for d, got in per_doc.items():
        assert got == [t for t in TARGETS if DOC_OF[t] == d]
    s.set_epoch(1)
    assert len(epoch(s)) == len(batches) and epoch(s) != batches


def test_document_order_batch_j_holds_sentence_j_of_each_group_document():
    batches = epoch(doc_sampler(max_documents=len(DOC_SIZES), shuffle=False))
    per_doc_targets = [[t for t in TARGETS if DOC_OF[t] == d] for d in range(len(DOC_SIZES))]
    expected = [sorted(ts[j] for ts in per_doc_targets if len(ts) > j)
                for j in range(max(map(len, per_doc_targets)))]
    assert [sorted(b) for b in batches] == expected


def one_long_document_corpus() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 12-sentence document and six of 4 (as a long psalm among short chapters): offsets,
    targets (every sentence) and each sentence's document."""
    sizes = [4, 4, 12, 4, 4, 4, 4]
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    return offsets, np.arange(offsets[-1]), np.repeat(np.arange(len(sizes)), sizes)


def test_document_order_training_rows_stream_documents_so_batches_stay_full():
    """Three rows: the long document fills one, the six short ones the other two (12 each), so
    all 12 batches hold three sentences. Groups of three documents read to their ends would
    take 20 batches, 12 of them a single sentence (8 of the long document, 4 of the lone last one)."""
    offsets, targets, doc_of = one_long_document_corpus()
    for ep in range(3):
        s = DocumentOrderBatchSampler(offsets, targets, 3, seed=5)
        s.set_epoch(ep)
        batches = epoch(s)
        assert [len(b) for b in batches] == [3] * 12
        assert sorted(i for b in batches for i in b) == targets.tolist()
        for b in batches:
            assert len(set(doc_of[b].tolist())) == 3


def test_document_order_training_rows_keep_their_places():
    """Row i of a batch continues row i of the one before (the next sentence of its document, or
    the first of the row's next document once that one ended); rows that run out are the last."""
    s = doc_sampler(max_documents=3, seed=2)
    for ep in range(3):
        s.set_epoch(ep)
        batches = epoch(s)
        for before, after in zip(batches, batches[1:]):
            assert len(after) <= len(before)
            for prev, cur in zip(before, after):
                same_doc = DOC_OF[cur] == DOC_OF[prev]
                starts = cur == TARGETS[TARGETS >= DOC_OFFSETS[DOC_OF[cur]]][0]
                ended = prev == TARGETS[TARGETS < DOC_OFFSETS[DOC_OF[prev] + 1]][-1]
                assert (same_doc and cur > prev) or (starts and ended)


def test_document_order_training_epochs_differ_in_order_not_length():
    s = doc_sampler(max_documents=3, seed=8)
    lengths, orders = set(), set()
    for ep in range(6):
        s.set_epoch(ep)
        batches = epoch(s)
        lengths.add(len(batches))
        orders.add(tuple(tuple(b) for b in batches))
    assert len(lengths) == 1 and len(orders) > 1


@pytest.mark.parametrize("world", [2, 3])
def test_document_order_ddp_equal_counts_every_target_seen(world):
    shards = [epoch(doc_sampler(num_replicas=world, rank=r, seed=4)) for r in range(world)]
    assert len({len(s) for s in shards}) == 1
    for s in shards:
        check_document_order(s, 3)
    assert {i for s in shards for b in s for i in b} == set(TARGETS.tolist())


@pytest.mark.parametrize("world", [2, 3])
def test_document_order_eval_shards_without_repeats_and_none_empty(world):
    shards = [epoch(doc_sampler(num_replicas=world, rank=r, shuffle=False, max_documents=100))
              for r in range(world)]
    assert all(shards)
    assert sorted(i for s in shards for b in s for i in b) == TARGETS.tolist()
    for s in shards:
        check_document_order(s, 100)


def test_document_order_resumes_mid_epoch():
    full = epoch(doc_sampler(seed=9))
    s = doc_sampler(seed=9)
    it = iter(s)
    head = [next(it) for _ in range(5)]
    resumed = doc_sampler()
    resumed.load_state_dict(s.state_dict())
    assert head + epoch(resumed) == full
