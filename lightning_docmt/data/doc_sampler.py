"""Document-order batches (docs/design.md section 5, `data.document_order`).

Documents are taken in groups of up to `max_documents`; a group yields, for j = 0, 1, ..., the
j-th target sentence of every document of the group that has one. A model that carries state
along a document (target-side context from its own previous outputs, Yamagishi & Komachi's shared
models that reuse the previous sentence's states) therefore sees each document in order, one
sentence per batch. Sentences that are not training targets (over-long, see `cache.py`) are
skipped here but remain available as context. `max_tokens` does not apply: `max_documents`
bounds the batch.

A group holds at most `max_documents` documents and at most ceil(n_docs / W), so that every
rank gets a group. Groups go to ranks longest-processing-time first (the group with the most
batches to the rank with the fewest so far), so the ranks' batch counts are nearly equal.

Training (`shuffle=True`): documents are sorted by target count with ties broken at random per
epoch before they are cut into groups, and the group order is shuffled; the number of batches
per epoch (the sum of each group's longest document) is thus the same in every epoch. A rank
with fewer batches than the busiest one replays the first batches of its own groups, in
document order, so that every rank runs the same number of batches.
Evaluation (`shuffle=False`): groups of consecutive documents in corpus order; no sentence is
repeated, and ranks may run different numbers of batches (the model gathers hypotheses by
`sent_index`).
With fewer documents than ranks, a rank without a group replays one (no rank may be empty).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from lightning_docmt.data.sampler import ShardedBatchSampler


class DocumentOrderBatchSampler(ShardedBatchSampler):
    def __init__(self, doc_offsets: np.ndarray, targets: np.ndarray, max_documents: int, **kwargs):
        super().__init__(**kwargs)
        if max_documents < 1:
            raise ValueError("max_documents must be positive")
        self.max_documents = max_documents
        self._targets = np.asarray(targets, dtype=np.int64)
        first = np.searchsorted(self._targets, doc_offsets)  # (n_docs + 1,) into targets
        counts = np.diff(first)
        self._docs = np.flatnonzero(counts > 0)  # documents with at least one target
        self._first, self._count = first[self._docs], counts[self._docs]

    def _groups(self, epoch: int) -> list[np.ndarray]:
        """Positions into `self._docs`, one array per group."""
        n = len(self._docs)
        size = min(self.max_documents, max(1, math.ceil(n / self.num_replicas)))
        if not self.shuffle:
            return [np.arange(i, min(i + size, n)) for i in range(0, n, size)]
        rng = np.random.default_rng([self.seed, epoch])
        order = np.lexsort((rng.random(n), -self._count))  # longest first, random ties
        groups = [order[i:i + size] for i in range(0, n, size)]
        return [groups[g] for g in rng.permutation(len(groups))]

    def _group_batches(self, group: np.ndarray) -> list[np.ndarray]:
        first, count = self._first[group], self._count[group]
        return [self._targets[first[count > j] + j] for j in range(int(count.max()))]

    def _rank_batches(self, epoch: int) -> list[np.ndarray]:
        groups = self._groups(epoch)
        if not groups:
            return []
        steps = [int(self._count[g].max()) for g in groups]
        load = [(0, r) for r in range(self.num_replicas)]  # (batches, rank), least loaded first
        mine = []
        for g in sorted(range(len(groups)), key=lambda g: -steps[g]):  # stable: keeps tie order
            batches, rank = heapq.heappop(load)
            if rank == self.rank:
                mine.append(g)
            heapq.heappush(load, (batches + steps[g], rank))
        if not mine:
            mine = [self.rank % len(groups)]
        own = [b for g in sorted(mine) for b in self._group_batches(groups[g])]
        if not self.shuffle:
            return own
        busiest = max(b for b, _ in load)
        return [own[i % len(own)] for i in range(busiest)]
