"""Small random models and hand-made batches for the model, decoding and DDP tests.

Batches follow `batch.py` over a vocabulary of `VOCAB` ids (the special ids first); `SIZES` are
the layer sizes of the small Transformers built here.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_docmt.batch import BOS_ID, EOS_ID, PAD_ID, SEP_ID
from lightning_docmt.models.concat import ConcatConfig, ConcatSeq2Seq
from lightning_docmt.models.transformer import TransformerConfig, TransformerSeq2Seq
from lightning_docmt.nn.seq2seq import Seq2SeqModel

VOCAB = 23
SIZES = {"d_model": 16, "heads": 2, "ffn_dim": 32, "enc_layers": 2, "dec_layers": 2}


def tiny_model(arch: str = "transformer", seed: int = 0, **overrides) -> Seq2SeqModel:
    """A small random model in eval mode."""
    torch.manual_seed(seed)
    config_class, model_class = {"transformer": (TransformerConfig, TransformerSeq2Seq),
                                 "concat": (ConcatConfig, ConcatSeq2Seq)}[arch]
    cfg = config_class(**{**SIZES, "dropout": 0.1, "attn_dropout": 0.1, "relu_dropout": 0.1, **overrides})
    return model_class(cfg, VOCAB, VOCAB).eval()


def padded(rows: list[list[int]], width: int | None = None) -> Tensor:
    width = width or max(len(r) for r in rows)
    return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows])


def sentence(length: int, generator: torch.Generator) -> list[int]:
    return torch.randint(SEP_ID + 1, VOCAB, (length,), generator=generator).tolist()


def random_batch(src_lengths: list[int], tgt_lengths: list[int], ctx_lengths: list[int] | None = None,
                 seed: int = 0) -> dict[str, Tensor]:
    """A batch following `batch.py`; a context length of 0 gives the empty context `<eos>`."""
    g = torch.Generator().manual_seed(seed)
    targets = [sentence(n, g) for n in tgt_lengths]
    batch = {"src": padded([sentence(n, g) + [EOS_ID] for n in src_lengths]),
             "tgt_in": padded([[BOS_ID] + t for t in targets]),
             "tgt_out": padded([t + [EOS_ID] for t in targets])}
    if ctx_lengths is not None:
        batch["ctx_src"] = padded([context(n, g) for n in ctx_lengths])
    return batch


def context(length: int, generator: torch.Generator) -> list[int]:
    """`length` tokens of two previous sentences joined by `<sep>`, then `<eos>` (0: the empty context)."""
    older, newer = sentence(length // 2, generator), sentence(length - length // 2, generator)
    return older + ([SEP_ID] if older else []) + newer + [EOS_ID]
