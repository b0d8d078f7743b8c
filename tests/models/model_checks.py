"""Checks shared by the per-architecture model tests."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from lightning_docmt.batch import PAD_ID


def assert_incremental_matches_full(model, batch: dict[str, torch.Tensor]) -> None:
    """Step-by-step decoding with the key/value cache gives the teacher-forced logits."""
    full = model(batch)
    state = model.encode(batch)
    cache = model.init_cache(state)
    steps = [model.decode_step(batch["tgt_in"][:, t:t + 1], state, cache)
             for t in range(batch["tgt_in"].size(1))]
    real = batch["tgt_out"].ne(PAD_ID)
    assert torch.allclose(torch.stack(steps, dim=1)[real], full[real], atol=1e-5)


def _widen(x: torch.Tensor, extra: int) -> torch.Tensor:
    return torch.cat([x, torch.full((x.size(0), extra), PAD_ID)], dim=1)


def assert_padding_and_batching_invisible(model, batch: dict[str, torch.Tensor],
                                          context_keys: tuple) -> None:
    """Extra padding on any input, or decoding a row alone, leaves every real position's logits.
    `context_keys`: the context keys, each a key or a tuple of keys padded together (a context and
    its segment ids)."""
    reference = model(batch)
    real = batch["tgt_out"].ne(PAD_ID)
    groups = [key if isinstance(key, tuple) else (key,) for key in context_keys]
    for keys in [("src",), ("tgt_in", "tgt_out"), *groups]:
        wider = {**batch, **{key: _widen(batch[key], 3) for key in keys}}
        assert torch.allclose(model(wider)[:, : real.size(1)][real], reference[real], atol=1e-5), keys
    for row in range(batch["src"].size(0)):
        alone = {key: value[row:row + 1] for key, value in batch.items()}
        # (segment ids of an empty context are all 0: keep one column of every key)
        alone = {key: value[:, : max(int(value.ne(PAD_ID).sum()), 1)] for key, value in alone.items()}
        length = int(alone["tgt_out"].size(1))
        assert torch.allclose(model(alone)[0], reference[row, :length], atol=1e-5)


def assert_beam_scores_are_log_probs_and_batching_invisible(model, batch: dict[str, torch.Tensor]) -> None:
    """Each of the 3 best hypotheses' log-probability is the teacher-forced one, and searching a
    row alone finds the same best hypothesis with the same score (`batch` has no target keys)."""
    from lightning_docmt.batch import BOS_ID, EOS_ID
    from lightning_docmt.inference.decoding import beam_search, beam_search_nbest
    from lightning_docmt.nn.scoring import sequence_log_probs

    def padded(rows: list[list[int]]) -> torch.Tensor:
        width = max(len(r) for r in rows)
        return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows])

    nbest = beam_search_nbest(model, batch, beam=3, len_penalty=0.6, max_len_a=1.0, max_len_b=3)
    for rank in range(3):
        hyps = [sentence_hyps[rank] for sentence_hyps in nbest]
        forced = {**batch, "tgt_in": padded([[BOS_ID] + h.tokens for h in hyps]),
                  "tgt_out": padded([h.tokens + [EOS_ID] for h in hyps])}
        assert [h.log_prob for h in hyps] == pytest.approx(sequence_log_probs(model, forced).tolist(), abs=1e-4)
    for row, sentence_hyps in enumerate(nbest):
        alone = {key: value[row:row + 1] for key, value in batch.items()}
        # (segment ids of an empty context are all 0: keep one column of every key)
        alone = {key: value[:, : max(int(value.ne(PAD_ID).sum()), 1)] for key, value in alone.items()}
        [single] = beam_search(model, alone, beam=3, len_penalty=0.6, max_len_a=1.0, max_len_b=3)
        assert single.tokens == sentence_hyps[0].tokens
        assert single.score == pytest.approx(sentence_hyps[0].score, abs=1e-4)


def sinusoid(length: int, d_model: int) -> Tensor:
    """PE(t) = [sin(t w_i)]_i ++ [cos(t w_i)]_i, w_i = 10000^(-i / (D/2 - 1)) (tensor2tensor layout)."""
    half = d_model // 2
    rows = [[math.sin(t * 10000 ** (-i / (half - 1))) for i in range(half)]
            + [math.cos(t * 10000 ** (-i / (half - 1))) for i in range(half)] for t in range(length)]
    return torch.tensor(rows)


def packed_and_padded(compute, monkeypatch) -> list:
    """`compute()` with every padded batch packed and with none (`nn/packing.py`), each from the same
    random state: [packed result, padded result]."""
    from lightning_docmt.nn import packing

    results = []
    for share in (0.0, math.inf):  # every batch packs / none does
        monkeypatch.setattr(packing, "MIN_PADDING_SHARE", share)
        torch.manual_seed(11)
        results.append(compute())
    return results


def gradients(model: torch.nn.Module) -> dict[str, Tensor]:
    """Every parameter's gradient by name (the parameters that have one)."""
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def assert_same_training(packed: tuple[Tensor, dict], padded: tuple[Tensor, dict]) -> None:
    """(loss or output, gradients by name) of a packed and a padded pass: equal to float rounding."""
    torch.testing.assert_close(packed[0], padded[0], rtol=1e-5, atol=1e-5)
    assert packed[1].keys() == padded[1].keys() and padded[1]
    for name, grad in padded[1].items():
        torch.testing.assert_close(packed[1][name], grad, rtol=1e-4, atol=1e-5, msg=name)


def assert_packing_changes_nothing(build, batch: dict[str, Tensor], monkeypatch) -> None:
    """A model from `build()` trains (loss and every gradient, dropout on) and translates (beam 3) `batch`
    the same with every padded batch packed as with none (`packed_and_padded`)."""
    from lightning_docmt.inference.decoding import beam_search
    from lightning_docmt.nn.output_loss import output_label_smoothed_nll

    def train_pass():
        model = build().train()
        terms = model.loss_terms(batch, lambda hidden, target: output_label_smoothed_nll(
            hidden, model.output.weight, target, 0.1, PAD_ID))
        terms.loss_sum.backward()
        return terms.loss_sum.detach(), gradients(model)

    assert_same_training(*packed_and_padded(train_pass, monkeypatch))
    packed, padded = packed_and_padded(lambda: beam_search(build().eval(), batch, beam=3), monkeypatch)
    assert packed == padded
