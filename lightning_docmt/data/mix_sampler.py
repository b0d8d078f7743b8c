"""Training batches that mix two corpora at a set share (`data.mix`, docs/design.md section 5).

Donato, Yu & Dyer 2021, Table 6 (docs/papers/donato2021.md, reading D25): IWSLT+ adds News
Commentary documents to IWSLT'14, "~50% IWSLT per batch". Here `share` is the in-domain part of
every batch's target tokens, the tokens the loss is summed over and divided by (docs/design.md
section 7): the weight the in-domain data has in each update. Whether the paper's share counts
sentences or tokens is not stated (NOT IN PAPER).

An epoch is one pass over the in-domain candidates, as without mixing. The out-of-domain ones are
read as an endless stream, seeded permutations of them one after another (one per pass); epoch e
takes the stream's next (1 - share) / share x (the in-domain target tokens) target tokens, so that
over the epochs every out-of-domain sentence is read equally often (an epoch whose slice spans the
end of one pass and the start of the next may read a sentence twice), and a corpus smaller than
that is read more than once in an epoch. Both sides are sorted by their row lengths (equal keys:
the in-domain ones in an order drawn per epoch, the others in stream order) and interleaved by
their cumulative share of their own side's target tokens, so that any run of consecutive sentences
holds about `share` in-domain target tokens, and sentences of like lengths from both sides; the
sequence is packed greedily within `max_tokens` (`sampler.pack_greedy`, the same budget rule).

Every epoch has epoch 0's number of batches (Lightning fixes an epoch's length when it first builds
the loader, and DDP ranks must agree on it): an epoch that packs into fewer splits its largest
batches (both halves keep the interleaving), one that needs more leaves the last sentences of its
draw (in stream order: whatever their length) out until it fits. `in_domain_share` measures what
the batches hold. The batches are then shuffled and sharded across DDP ranks as
`TokenBudgetBatchSampler`'s (`sampler.shard`), and resume mid-epoch from the same state
(`ShardedBatchSampler`).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from lightning_docmt.data.sampler import (
    ShardedBatchSampler,
    bucketed,
    key_ranks,
    pack_greedy,
    shard,
    split_largest,
)

STREAM = 1  # pass c of the out-of-domain stream is drawn from default_rng([seed, c, STREAM])


def token_midpoints(tokens: np.ndarray) -> np.ndarray:
    """Where each of a sequence of sentences stands in its side's target tokens, in [0, 1]."""
    ends = np.cumsum(tokens)
    return (ends - tokens / 2) / max(int(ends[-1:].sum()), 1)


class MixedBatchSampler(ShardedBatchSampler):
    """Token-budget batches of `in_domain` and `out_of_domain` candidates at `share` (see the
    module docstring); sizes are (n_tensors, n) row lengths as `TokenBudgetBatchSampler`'s, row 1
    the target's (`collate.row_lengths`)."""

    def __init__(self, in_domain: np.ndarray, in_sizes: np.ndarray, out_of_domain: np.ndarray,
                 out_sizes: np.ndarray, share: float, max_tokens: int, *, bucket_width: int = 0,
                 **kwargs):
        super().__init__(**kwargs)
        if not 0.0 < share < 1.0:
            raise ValueError(f"a mixed batch needs an in-domain share in (0, 1), got {share}")
        if len(in_domain) == 0 or len(out_of_domain) == 0:
            raise ValueError("a mixed batch needs candidates of both corpora")
        self.share, self.max_tokens = share, max_tokens
        self._n_in = len(in_domain)
        self._indices = np.concatenate([in_domain, out_of_domain])  # position -> dataset index
        sizes = np.concatenate([in_sizes, out_sizes], axis=1)
        self._keys = bucketed(sizes, bucket_width)  # what the budget counts
        self._ranks = key_ranks(self._keys)
        self._tokens = sizes[1].astype(np.int64)  # target tokens (the `tgt_out` row)
        self._quota = round((1.0 - share) / share * int(self._tokens[:self._n_in].sum()))
        self._counts: dict[int, int] = {}  # seed -> batches per epoch

    def _draw(self, epoch: int) -> np.ndarray:
        """`epoch`'s slice of the out-of-domain stream, in stream order (positions): the sentences
        whose first target token lies in [epoch, epoch + 1) x the quota."""
        tokens = self._tokens[self._n_in:]
        per_pass = int(tokens.sum())
        start, stop = epoch * self._quota, (epoch + 1) * self._quota
        parts = [np.empty(0, dtype=np.int64)]
        for cycle in range(start // per_pass, -(-stop // per_pass)):
            order = np.random.default_rng([self.seed, cycle, STREAM]).permutation(len(tokens))
            begins = cycle * per_pass + np.cumsum(tokens[order]) - tokens[order]
            parts.append(order[(begins >= start) & (begins < stop)])
        return np.concatenate(parts) + self._n_in

    def _packed(self, own: np.ndarray, draw: np.ndarray) -> list[np.ndarray]:
        """The batches of the in-domain positions `own` (by length) and the positions `draw`
        (stream order), interleaved and packed (see the module docstring)."""
        draw = draw[np.lexsort((np.arange(len(draw)), self._ranks[draw]))]
        place = np.concatenate([token_midpoints(self._tokens[own]), token_midpoints(self._tokens[draw])])
        merged = np.concatenate([own, draw])[np.argsort(place, kind="stable")]
        bounds = pack_greedy(self._keys[:, merged], self.max_tokens)
        return [merged[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def _in_domain(self, rng: np.random.Generator) -> np.ndarray:
        """Every in-domain position by length, equal keys in an order drawn from `rng`."""
        noise = rng.random(self._n_in, dtype=np.float32)
        return np.lexsort((noise, self._ranks[:self._n_in]))

    def _count(self) -> int:
        """Batches per epoch: epoch 0's as packed (for the current seed)."""
        if self.seed not in self._counts:
            own = self._in_domain(np.random.default_rng([self.seed, 0]))
            self._counts[self.seed] = len(self._packed(own, self._draw(0)))
        return self._counts[self.seed]

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """All ranks' batches of `epoch` as positions (in-domain ones below `len(in_domain)`), in
        the order they are handed out, before sharding."""
        rng = np.random.default_rng([self.seed, epoch])
        own, draw, count = self._in_domain(rng), self._draw(epoch), self._count()
        batches = self._packed(own, draw)
        while len(batches) > count and len(draw):  # leave the draw's last sentences out
            draw = draw[:len(draw) - max(1, (len(batches) - count) * len(draw) // len(batches))]
            batches = self._packed(own, draw)
        while len(batches) < count and split_largest(batches):
            pass
        return [batches[b] for b in rng.permutation(len(batches))]

    def _rank_batches(self, epoch: int) -> list[np.ndarray]:
        return shard([self._indices[b] for b in self.epoch_batches(epoch)], self.rank, self.num_replicas)

    def in_domain_share(self, epochs: Iterable[int]) -> float:
        """The in-domain part of the target tokens of the given epochs' batches."""
        own = total = 0
        for epoch in epochs:
            for batch in self.epoch_batches(epoch):
                tokens = self._tokens[batch]
                own += int(tokens[batch < self._n_in].sum())
                total += int(tokens.sum())
        return own / total
