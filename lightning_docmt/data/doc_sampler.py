"""Document-order batches (DESIGN.md section 5, `data.document_order`).

Documents are taken in groups of up to `max_documents`; a group yields, for j = 0, 1, ..., the
j-th target sentence of every document of the group that has one. A model that carries state
along a document (target-side context from its own previous outputs, Yamagishi & Komachi's shared
models that reuse the previous sentence's states) therefore sees each document in order, one
sentence per batch. Sentences that are not training targets (over-long, see `cache.py`) are
skipped here but remain available as context. `max_tokens` does not apply: `max_documents`
bounds the batch.

Training (`shuffle=True`): documents are sorted by target count with ties broken at random per
epoch, cut into groups, and the group order is shuffled; the number of batches per epoch (the sum
of each group's longest document) is thus the same in every epoch. Groups go to ranks by longest
processing time first; a rank with fewer batches than the busiest one replays the first batches
of its own groups, in document order, so every rank runs the same number of batches.
Evaluation (`shuffle=False, even=False`): groups in corpus order, group g on rank g mod W, no
repeats.
"""

from __future__ import annotations

import heapq

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
        if self.shuffle:
            rng = np.random.default_rng([self.seed, epoch])
            order = np.lexsort((rng.random(n), -self._count))  # longest first, random ties
            groups = [order[i:i + self.max_documents] for i in range(0, n, self.max_documents)]
            return [groups[g] for g in rng.permutation(len(groups))]
        return [np.arange(i, min(i + self.max_documents, n)) for i in range(0, n, self.max_documents)]

    def _group_batches(self, group: np.ndarray) -> list[np.ndarray]:
        first, count = self._first[group], self._count[group]
        return [self._targets[first[count > j] + j] for j in range(int(count.max()))]

    def _rank_batches(self, epoch: int) -> list[np.ndarray]:
        groups = self._groups(epoch)
        if not groups:
            return []
        if not self.even:
            mine = groups[self.rank::self.num_replicas]
            return [b for g in mine for b in self._group_batches(g)]
        steps = [int(self._count[g].max()) for g in groups]
        load = [(0, r) for r in range(self.num_replicas)]  # (batches, rank), least loaded first
        mine = []
        for g in sorted(range(len(groups)), key=lambda g: -steps[g]):  # stable: shuffled ties
            batches, rank = heapq.heappop(load)
            if rank == self.rank:
                mine.append(g)
            heapq.heappush(load, (batches + steps[g], rank))
        if not mine:  # fewer groups than ranks: replay one so that this rank keeps step
            mine = [self.rank % len(groups)]
        own = [b for g in sorted(mine) for b in self._group_batches(groups[g])]
        busiest = max(b for b, _ in load)
        return [own[i % len(own)] for i in range(busiest)]
