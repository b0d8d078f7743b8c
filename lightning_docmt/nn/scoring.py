"""Teacher-forced log-probabilities of given targets (contrastive evaluation, CXMI, rescoring).

`sequence_log_probs(model, batch)[b] = sum_j log P(tgt_out[b, j] | tgt_in[b, :j+1], source and context)`
over the non-pad positions of `tgt_out` (the target tokens and the final `<eos>`). It is the
quantity beam search scores a hypothesis with before length normalisation.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_docmt.batch import PAD_ID
from lightning_docmt.nn.seq2seq import Seq2SeqModel


def target_log_probs(logits: Tensor, target: Tensor) -> Tensor:
    """(B, T) log-probability of every `target` token (B, T) under `logits` (B, T, V), 0 at padding."""
    lprobs = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    picked = lprobs.gather(2, target.unsqueeze(2)).squeeze(2)  # (B, T)
    return picked.masked_fill(target.eq(PAD_ID), 0.0)


@torch.no_grad()
def token_log_probs(model: Seq2SeqModel, batch: dict[str, Tensor]) -> Tensor:
    """(B, T) log-probability of every `tgt_out` token, 0 at padding."""
    return target_log_probs(model(batch), batch["tgt_out"])


def sequence_log_probs(model: Seq2SeqModel, batch: dict[str, Tensor]) -> Tensor:
    """(B,) summed log-probabilities of `tgt_out` given the batch, padding ignored."""
    return token_log_probs(model, batch).sum(dim=1)
