"""`BeamHistoryCache`: beam search's self-attention without reordering keys and values attends as a
reordered incremental cache does."""

from __future__ import annotations

import pytest
import torch

from lightning_docmt.nn.attention import AttentionCache, MultiHeadAttention
from lightning_docmt.nn.beam_history import INITIAL_CAPACITY, BeamHistoryCache

D, H = 16, 4


def within_sentence_reordering(sentences: int, beam: int, generator: torch.Generator) -> torch.Tensor:
    """(sentences * beam,) rows: every beam continues a random beam of its own sentence."""
    origin = torch.randint(0, beam, (sentences, beam), generator=generator)
    return (torch.arange(sentences)[:, None] * beam + origin).view(-1)


@pytest.mark.parametrize("steps", [5, INITIAL_CAPACITY + 3])  # the second grows the storage
def test_beams_attend_over_their_own_histories_as_with_reordered_copies(steps):
    torch.manual_seed(steps)
    generator = torch.Generator().manual_seed(steps)
    mha = MultiHeadAttention(D, H).eval()
    sentences, beam = 3, 4
    expand = torch.arange(sentences).repeat_interleave(beam)
    history = AttentionCache().select_rows(expand, shared=beam)
    copies = AttentionCache().select_rows(expand)
    assert isinstance(history, BeamHistoryCache) and isinstance(copies, AttentionCache)
    for step in range(steps):
        x = torch.randn(sentences * beam, 1, D)
        got, want = mha(x, None, cache=history), mha(x, None, cache=copies)
        assert torch.allclose(got, want, atol=1e-5), step
        reorder = within_sentence_reordering(sentences, beam, generator)
        history = history.select_rows(reorder, include_static=False)
        copies = copies.select_rows(reorder)
        if step == steps // 2 and sentences == 3:  # sentence 1 finishes and leaves the batch
            keep = torch.tensor([0, 2]).repeat_interleave(beam) * beam + torch.arange(beam).repeat(2)
            history, copies, sentences = history.select_rows(keep), copies.select_rows(keep), 2
    assert history.length == steps


def test_a_selection_must_keep_a_sentences_beams_together():
    mha = MultiHeadAttention(D, H).eval()
    history = AttentionCache().select_rows(torch.arange(2).repeat_interleave(3), shared=3)
    mha(torch.randn(6, 1, D), None, cache=history)
    with pytest.raises(ValueError, match="splits a group"):
        history.select_rows(torch.tensor([0, 1, 3]))
    with pytest.raises(ValueError, match="expanded into beams again"):
        history.select_rows(torch.arange(6), shared=2)


def test_a_beam_reads_nothing_outside_its_own_history():
    """Two beams of one sentence, then both continue beam 0: beam 1's first key no longer counts."""
    mha = MultiHeadAttention(D, H).eval()
    history = AttentionCache().select_rows(torch.zeros(2, dtype=torch.long), shared=2)
    first = torch.randn(2, 1, D)
    mha(first, None, cache=history)
    history = history.select_rows(torch.tensor([0, 0]), include_static=False)
    second = torch.randn(2, 1, D)
    got = mha(second, None, cache=history)
    for row in range(2):  # each as a sequence [beam 0's first step, its own second step]
        sequence = torch.cat([first[:1], second[row:row + 1]], dim=1)  # (1, 2, D)
        want = mha(sequence, None, causal=True)[:, 1:]
        assert torch.allclose(got[row:row + 1], want, atol=1e-5)
