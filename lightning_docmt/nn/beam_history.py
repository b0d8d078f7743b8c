"""Self-attention keys and values of beam search that are never reordered (`BeamHistoryCache`).

In beam search every step reorders the hypotheses: beam b' of step t + 1 continues beam src(b') of
step t. An incremental cache then copies every beam's keys and values of every layer (fairseq's
`reorder_incremental_state`, our `AttentionCache.select_rows`), which on a CPU costs as much as the
attention that reads them (`benchmarks/RESULTS.md`). This cache copies nothing: the k beams of a
sentence own k fixed slots, the key and value a beam computes at step s are written to its slot at
position s, and each beam keeps a mask of the (slot, position) pairs that hold its own history:

    history[b, s, j] = True  iff  the key at position s of slot j of b's sentence is b's prefix at s.

Reordering selects rows of `history` ((B, L, k) booleans) instead of the keys and values; step s
sets history[b, s, b mod k]. A beam's query attends over all k x L keys of its sentence under its
mask: the same keys, values and weights as attending to its own reordered cache (the weights sum in
another order, so results agree to rounding). Beams are rows sentence-major (rows i * k .. i * k +
k - 1 are sentence i's), as `inference/decoding.beam_search_nbest` lays them out.

Dropping finished sentences selects whole sentences (their slots and masks); a selection that
splits a sentence's beams is an error (`one_row_per_group`).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

INITIAL_CAPACITY = 32  # positions allocated at first; doubled whenever a step needs more


def one_row_per_group(rows: Tensor, group: int) -> Tensor:
    """(B',) rows read by B' beam rows -> (B' / group,) one per `group` consecutive beam rows, which
    must all read the same row (a selection keeps a sentence's beams together)."""
    if rows.numel() % group:
        raise ValueError(f"{rows.numel()} rows do not split into groups of {group}")
    grouped = rows.view(-1, group)  # (B' / group, group)
    if not grouped.eq(grouped[:, :1]).all():
        raise ValueError(f"a selection of rows splits a group of {group} rows that share a sentence's cache")
    return grouped[:, 0]


class BeamHistoryCache:
    """The incremental self-attention cache of beam search with beam size `beam` (module docstring).

    Storage: keys and values (n, H, capacity, k, d_k), sentence i's slot j at position s at
    [i, :, s, j]; `history` (n * k, capacity, k) bool, history[b, s, j] as in the module docstring.
    Positions before slots, so that the first L positions of all slots are one (L * k) run of keys.
    A cache serves one search: `select_rows` hands its storage to the cache it returns, and this
    one must not be appended to afterwards.
    """

    static = False

    def __init__(self, beam: int):
        self.beam = beam
        self.length = 0  # positions written
        self._key: Optional[Tensor] = None
        self._value: Optional[Tensor] = None
        self._history: Optional[Tensor] = None

    def _moved(self, history: Tensor, key: Tensor, value: Tensor) -> BeamHistoryCache:
        cache = BeamHistoryCache(self.beam)
        cache.length, cache._key, cache._value, cache._history = self.length, key, value, history
        return cache

    def select_rows(self, index: Tensor, include_static: bool = True, shared: int = 1) -> BeamHistoryCache:
        """Beam rows `index`. Within sentences (beam reordering, `include_static` False): only the
        histories move. Whole sentences (dropping finished ones): their slots move too."""
        if shared != 1:
            raise ValueError("a beam search's self-attention cache cannot be expanded into beams again")
        if self._history is None:
            return BeamHistoryCache(self.beam)
        history = self._history.index_select(0, index)  # (B', capacity, k)
        if not include_static:
            return self._moved(history, self._key, self._value)
        sentences = one_row_per_group(torch.div(index, self.beam, rounding_mode="floor"), self.beam)
        return self._moved(history, self._key.index_select(0, sentences), self._value.index_select(0, sentences))

    def append(self, key: Tensor, value: Tensor) -> None:
        """Write the keys/values (B, H, 1, d_k) of one step, B = n * k, each row to its own slot."""
        rows, heads, steps, d_k = key.shape
        if steps != 1:
            raise ValueError("beam search appends one position a step")
        k, position = self.beam, self.length
        if self._key is None or position == self._key.size(2):
            self._grow(rows // k, heads, d_k, key)
        self._key[:, :, position] = key.view(rows // k, k, heads, d_k).transpose(1, 2)  # (n, H, k, d_k)
        self._value[:, :, position] = value.view(rows // k, k, heads, d_k).transpose(1, 2)
        beams = torch.arange(rows, device=key.device)
        self._history[:, position] = False
        self._history[beams, position, beams % k] = True  # each beam's own new position
        self.length += 1

    def _grow(self, sentences: int, heads: int, d_k: int, like: Tensor) -> None:
        """Room for twice the positions (or `INITIAL_CAPACITY`), keeping what is written."""
        capacity = INITIAL_CAPACITY if self._key is None else 2 * self._key.size(2)
        key = like.new_empty(sentences, heads, capacity, self.beam, d_k)
        value = like.new_empty(sentences, heads, capacity, self.beam, d_k)
        history = like.new_zeros(sentences * self.beam, capacity, self.beam, dtype=torch.bool)
        if self._key is not None:
            key[:, :, :self.length] = self._key[:, :, :self.length]
            value[:, :, :self.length] = self._value[:, :, :self.length]
            history[:, :self.length] = self._history[:, :self.length]
        self._key, self._value, self._history = key, value, history

    def histories(self) -> tuple[Tensor, Tensor, Tensor]:
        """What the beams of each sentence attend over: the keys and values of all its slots, (n, H,
        L * k, d_k) each (views, no copy), and the mask of each beam's own (n, 1, k, L * k), True = its history."""
        sentences, heads, _, k, d_k = self._key.shape
        length = self.length
        keys = self._key[:, :, :length].reshape(sentences, heads, length * k, d_k)  # (n, H, L * k, d_k)
        values = self._value[:, :, :length].reshape(sentences, heads, length * k, d_k)
        mask = self._history[:, :length].reshape(sentences, k, length * k).unsqueeze(1)  # (n, 1, k, L * k)
        return keys, values, mask
