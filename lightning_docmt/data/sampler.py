"""Token-budget batch samplers, sharded across DDP ranks and resumable mid-epoch (docs/design.md section 5).

Budget rule: a batch of n sentences costs n * (sum over its tensors of the longest row), i.e.
the padded sizes of `src`, `tgt_in` (= `tgt_out`, counted once) and every context tensor summed;
it must stay within `max_tokens`. A sentence over the budget on its own forms a batch of one
(never dropped).

Length bucketing: all candidate sentences are sorted by their tuple of row lengths (rounded up to
a multiple of `bucket_width` when > 0, which is then also the length the budget counts), and
packed greedily in that order; each epoch shuffles the order *among equal keys* and the order of
the batches (seeded by `(seed, epoch)`). The greedy packing only sees the sequence of keys, which
is the same every epoch, so every epoch has exactly the same number of batches: Lightning fixes
an epoch's length when it first builds the loader, and DDP ranks must agree on it. A wider
`bucket_width` gives more equal keys, hence more mixing between epochs, at the price of padding.

Sharding: rank r takes batches r, r + W, ... of the epoch's list. To give every rank the same
number of batches (a rank that runs out first hangs DDP; Lightning also refuses a rank with no
batch) without showing any sentence twice, the batch with the most sentences is split in two
until the count is a multiple of W (fewer than W extra batches, all within the budget). Only
when every batch is a single sentence are batches repeated instead (fewer than W). This holds
for training and evaluation alike: each sentence exactly once per epoch, across all ranks.

State: `state_dict()` = {epoch, seed, position, num_replicas}; position counts this rank's batches
of the epoch already consumed, and a sampler loaded from it continues with exactly the remaining
batches. The samplers subclass `DistributedSampler` because they shard themselves: Lightning
leaves a `DistributedSampler` in place instead of wrapping it in its own.
"""

from __future__ import annotations

import math
import warnings
from typing import Iterator

import numpy as np
from torch.utils.data import DistributedSampler


class ShardedBatchSampler(DistributedSampler):
    """Base: this rank's list of batches for (seed, epoch), iterated from a resumable position.

    As with `DistributedSampler`, the order changes only through `set_epoch`. Every iteration
    starts at the epoch's first batch, except the first one after `load_state_dict`, which
    starts at the loaded position.
    """

    def __init__(self, *, num_replicas: int = 1, rank: int = 0, seed: int = 0,
                 shuffle: bool = True):
        # DistributedSampler.__init__ is not called: it wants a dataset and a process group.
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} outside world size {num_replicas}")
        self.num_replicas, self.rank, self.seed = num_replicas, rank, seed
        self.shuffle, self.drop_last = shuffle, False
        self.epoch = 0
        self.position = 0  # batches of `epoch` handed out on this rank
        self._resume_at = 0  # where the next iteration starts (set by load_state_dict)
        self._cached: tuple[int, list[np.ndarray]] | None = None

    def _rank_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches of `epoch`, in order."""
        raise NotImplementedError

    def batches(self, epoch: int | None = None) -> list[np.ndarray]:
        """This rank's batches of `epoch` (default: the current one), from the start."""
        epoch = self.epoch if epoch is None else epoch
        if self._cached is None or self._cached[0] != epoch:
            self._cached = (epoch, self._rank_batches(epoch))
        return self._cached[1]

    def __len__(self) -> int:
        return len(self.batches())

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches()
        self.position, self._resume_at = self._resume_at, 0
        while self.position < len(batches):
            batch = batches[self.position]
            self.position += 1
            yield batch.tolist()

    def set_epoch(self, epoch: int) -> None:
        """A new epoch starts from its first batch; the current one keeps a loaded position."""
        if epoch != self.epoch:
            self.epoch, self.position, self._resume_at = epoch, 0, 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "seed": self.seed, "position": self.position,
                "num_replicas": self.num_replicas}

    def load_state_dict(self, state: dict) -> None:
        """Continue where `state` stopped.

        A finished epoch resumes as the start of the next one (a loader that creates its
        iterator before `set_epoch`, as Lightning does with workers, then gets the right
        batches). From a different world size the position is mapped to the same number of
        global batches, rounded down; as balancing splits batches per world size, the rest
        of the epoch then matches the interrupted one only approximately (warned).
        """
        self.seed, self.epoch, position = state["seed"], state["epoch"], state["position"]
        self._cached = None
        if state["num_replicas"] != self.num_replicas:
            warnings.warn(f"resuming a {state['num_replicas']}-rank sampler on "
                          f"{self.num_replicas} ranks: the epoch's remaining batches differ")
            position = position * state["num_replicas"] // self.num_replicas
        if position >= len(self):
            self.epoch, position = self.epoch + 1, 0
        self.position = self._resume_at = position


def split_largest(batches: list[np.ndarray]) -> bool:
    """Split the batch with the most sentences into its two halves, in place (the budget holds for
    both); False, and nothing split, when every batch is a single sentence."""
    sizes = [len(b) for b in batches]
    big = int(np.argmax(sizes))
    if sizes[big] < 2:
        return False
    batches[big:big + 1] = [batches[big][:sizes[big] // 2], batches[big][sizes[big] // 2:]]
    return True


def shard(batches: list[np.ndarray], rank: int, world: int) -> list[np.ndarray]:
    """Batches rank, rank + world, ... after balancing the count to a multiple of `world` by
    splitting the largest batches (see the module docstring)."""
    batches = list(batches)
    while batches and len(batches) % world:
        if not split_largest(batches):  # only single sentences left to split: repeat some
            total = math.ceil(len(batches) / world) * world
            batches = [batches[i % len(batches)] for i in range(total)]
            break
    return batches[rank::world]


def bucketed(sizes: np.ndarray, bucket_width: int) -> np.ndarray:
    """The row lengths the budget counts: rounded up to a multiple of `bucket_width` when > 0."""
    keys = np.asarray(sizes)
    return -(-keys // bucket_width) * bucket_width if bucket_width > 0 else keys


def key_ranks(keys: np.ndarray) -> np.ndarray:
    """(n,) int32: the rank of each column of (n_keys, n) `keys` among its distinct columns, in
    lexicographic order, first row the primary key (equal keys, equal ranks)."""
    order = np.lexsort(keys[::-1])
    ranks = np.empty(len(order), dtype=np.int32)
    ranks[order] = run_ids(key_runs(keys[:, order]), len(order))
    return ranks


def key_runs(sorted_keys: np.ndarray) -> np.ndarray:
    """Start of every run of identical columns in (n_keys, n) sorted keys, (n_runs,) int64."""
    change = np.any(sorted_keys[:, 1:] != sorted_keys[:, :-1], axis=0)
    return np.flatnonzero(np.concatenate(([True], change)))


def run_ids(starts: np.ndarray, n: int) -> np.ndarray:
    """(n,) int32: the run each of n sorted items is in, from the runs' starts (`key_runs`)."""
    return np.repeat(np.arange(len(starts), dtype=np.int32), np.diff(np.append(starts, n)))


def pack_greedy(sorted_sizes: np.ndarray, max_tokens: int, starts: np.ndarray | None = None,
                chunk: int = 1 << 16) -> np.ndarray:
    """Batch boundaries over rows already in packing order, (n_batches + 1,) int64.

    `sorted_sizes` is (n_tensors, n); a batch's cost is n * sum of per-tensor maxima. Runs of
    identical columns (`starts`, from `key_runs` when not given) are packed together, so the
    loop is over distinct keys, not sentences, and keys become Python lists `chunk` runs at a
    time to bound memory.
    """
    n = sorted_sizes.shape[1]
    if n == 0:
        return np.zeros(1, dtype=np.int64)
    starts = key_runs(sorted_sizes) if starts is None else starts
    counts = np.diff(np.append(starts, n))
    bounds, pos, size, longest = [0], 0, 0, [0] * sorted_sizes.shape[0]
    for c in range(0, len(starts), chunk):
        keys = sorted_sizes[:, starts[c:c + chunk]].T.tolist()
        for key, remaining in zip(keys, counts[c:c + chunk].tolist()):
            while remaining:
                widened = [max(a, b) for a, b in zip(longest, key)]
                fit = max_tokens // sum(widened) - size
                if fit <= 0 and size > 0:  # close the current batch, retry the key in a new one
                    bounds.append(pos)
                    size, longest = 0, [0] * len(longest)
                    continue
                take = min(max(fit, 1), remaining)
                pos, size, remaining, longest = pos + take, size + take, remaining - take, widened
    if bounds[-1] != pos:
        bounds.append(pos)
    return np.asarray(bounds, dtype=np.int64)


class TokenBudgetBatchSampler(ShardedBatchSampler):
    """Length-bucketed token-budget batches over `indices` (see the module docstring).

    `sizes` is (n_tensors, len(indices)): the row lengths of each candidate sentence
    (`collate.row_lengths` of the candidates).
    """

    def __init__(self, indices: np.ndarray, sizes: np.ndarray, max_tokens: int, *,
                 bucket_width: int = 0, **kwargs):
        super().__init__(**kwargs)
        if max_tokens < 1:
            raise ValueError("max_tokens must be positive")
        keys = bucketed(sizes, bucket_width)
        order = np.lexsort(keys[::-1])  # first row is the primary key
        sorted_keys = keys[:, order]
        indices = np.asarray(indices)
        small = len(indices) == 0 or indices.max() < np.iinfo(np.int32).max
        self._sorted = indices.astype(np.int32 if small else np.int64)[order]
        starts = key_runs(sorted_keys)
        self._group = run_ids(starts, len(order))  # equal-key runs
        self._bounds = pack_greedy(sorted_keys, max_tokens, starts)

    @property
    def n_batches(self) -> int:
        """Batches per epoch before sharding."""
        return len(self._bounds) - 1

    def _rank_batches(self, epoch: int) -> list[np.ndarray]:
        ordered, batch_order = self._sorted, np.arange(self.n_batches)
        if self.shuffle:
            rng = np.random.default_rng([self.seed, epoch])
            noise = rng.random(len(ordered), dtype=np.float32)
            ordered = ordered[np.lexsort((noise, self._group))]
            batch_order = rng.permutation(self.n_batches)
        batches = [ordered[self._bounds[b]:self._bounds[b + 1]] for b in batch_order]
        return shard(batches, self.rank, self.num_replicas)
