"""Document-order batches (docs/design.md section 5, `data.document_order`).

A batch holds at most one sentence of each of up to `max_documents` documents, and a document's
next sentence is in the next batch. A model that carries state along a document (target-side
context from its own previous outputs, Yamagishi & Komachi's shared models that reuse the
previous sentence's states) therefore sees each document in order, one sentence per batch.
Sentences that are not training targets (over-long, see `cache.py`) are skipped here but remain
available as context. `max_tokens` does not apply: `max_documents` bounds the batch.

Training (`shuffle=True`) runs `max_documents` rows per rank as streams: each row reads its
documents one after another, and a batch holds every row's current sentence. Documents go to the
rows longest first, each to the row with the least work so far (longest-processing-time
scheduling), so the rows' loads differ by less than a short document and nearly every batch is
full; each row then reads its documents in an order drawn per epoch. The loads depend only on the
documents' lengths, so every epoch has the same number of batches. Rows are ordered by load,
largest first: a row that runs out is always at the end of the batch, and the others keep their
places. (Cutting the length-sorted documents into groups of `max_documents` and reading each group
to its end, as Yamagishi & Komachi describe their batches, leaves a group's longest document to
run alone: on the Bible, Psalm 119's 176 verses gave 95 consecutive batches of one or two
sentences in each epoch of 365. This is reading Y18 of docs/papers/yamagishi.md.)
With W ranks there are W x `max_documents` rows (fewer when there are fewer documents), and rank r
takes rows r, r + W, ...; a rank with fewer batches than the busiest one replays its own first
batches, so that every rank runs the same number of batches.

Evaluation (`shuffle=False`): groups of up to `max_documents` consecutive documents in corpus
order, each read to its end before the next group starts (batch j of a group holds sentence j of
each of its documents that has one); no sentence is repeated, and ranks may run different
numbers of batches (the model gathers hypotheses by `sent_index`); groups go to ranks
longest-processing-time first, so the ranks' batch counts are nearly equal. With fewer documents
than ranks, a rank without documents replays another rank's (no rank may be empty), in training
and evaluation alike.
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

    def _rows_per_rank(self) -> int:
        return min(self.max_documents, max(1, math.ceil(len(self._docs) / self.num_replicas)))

    def _groups(self) -> list[np.ndarray]:
        """Evaluation: positions into `self._docs`, one array per group of consecutive documents."""
        n, size = len(self._docs), self._rows_per_rank()
        return [np.arange(i, min(i + size, n)) for i in range(0, n, size)]

    def _group_batches(self, group: np.ndarray) -> list[np.ndarray]:
        first, count = self._first[group], self._count[group]
        return [self._targets[first[count > j] + j] for j in range(int(count.max()))]

    def _eval_batches(self) -> list[np.ndarray]:
        """This rank's groups, read one after another. Groups go to ranks longest-processing-time
        first (the group with the most batches to the rank with the fewest so far)."""
        groups = self._groups()
        if not groups:
            return []
        steps = [int(self._count[g].max()) for g in groups]
        order = sorted(range(len(groups)), key=lambda g: -steps[g])  # stable: keeps tie order
        ranks, _ = longest_first([steps[g] for g in order], self.num_replicas)
        mine = sorted(order[i] for i in ranks[self.rank]) or [self.rank % len(groups)]
        return [b for g in mine for b in self._group_batches(groups[g])]

    def _row_documents(self, epoch: int) -> tuple[list[list[int]], list[int]]:
        """Training: every row's documents (positions into `self._docs`) in reading order, and
        every row's load (its number of batches); rows by load, largest first (all ranks' rows:
        row k belongs to rank k mod W)."""
        rng = np.random.default_rng([self.seed, epoch])
        by_length = np.lexsort((rng.random(len(self._docs)), -self._count))  # longest first
        rows, loads = longest_first(self._count[by_length].tolist(),
                                    self._rows_per_rank() * self.num_replicas)
        order = sorted(range(len(rows)), key=lambda r: -loads[r])  # stable: ties keep row order
        return ([[int(by_length[rows[r][i]]) for i in rng.permutation(len(rows[r]))] for r in order],
                [loads[r] for r in order])

    def _stream_batches(self, rows: list[list[int]]) -> list[np.ndarray]:
        """Batch t holds the t-th target of every row (its documents read one after another)."""
        streams = [np.concatenate([self._first[d] + np.arange(self._count[d]) for d in docs])
                   for docs in rows if docs]  # positions into `self._targets`, rows by load
        if not streams:
            return []
        return [self._targets[[s[t] for s in streams if len(s) > t]]
                for t in range(len(streams[0]))]

    def _rank_batches(self, epoch: int) -> list[np.ndarray]:
        if not self.shuffle:
            return self._eval_batches()
        rows, loads = self._row_documents(epoch)
        if not loads or loads[0] == 0:
            return []
        world = self.num_replicas
        own = (self._stream_batches(rows[self.rank::world])
               or self._stream_batches(rows[::world]))  # fewer documents than ranks: rank 0's
        return [own[i % len(own)] for i in range(loads[0])]  # every rank: the busiest one's count


def longest_first(sizes: list[int], n_bins: int) -> tuple[list[list[int]], list[int]]:
    """Longest-processing-time scheduling of items that come longest first (`sizes`, in order):
    each goes to the bin with the least load so far (ties: the lowest bin). Returns every bin's
    items (indices into `sizes`, in the order assigned) and every bin's load."""
    bins: list[list[int]] = [[] for _ in range(n_bins)]
    heap = [(0, b) for b in range(n_bins)]  # (load, bin), least loaded first
    for item, size in enumerate(sizes):
        load, b = heapq.heappop(heap)
        bins[b].append(item)
        heapq.heappush(heap, (load + size, b))
    loads = [0] * n_bins
    for load, b in heap:
        loads[b] = load
    return bins, loads
