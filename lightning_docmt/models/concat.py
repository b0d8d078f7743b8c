"""Concatenation baseline: one encoder over [previous source sentences; current sentence].

Tiedemann & Scherrer 2017 ("2-to-1"), the uni-encoder concatenation baseline (`model.arch=concat`).
A standard Transformer whose encoder reads the concatenation and whose decoder attends to every
encoded position; the target is the current sentence only. Only previous sentences are read. Ma
et al. 2020's "Uni Transformer" / "w/o Unified" row (reading F4 in docs/papers/ma2020.md) is not
this model but `flat` with `model.unified=false model.segment_embedding=false`
(`models/flat.py`): the same kind of encoder over the Flat-Transformer's own input (previous AND
next sentences, no `<sep>`, reading F3), so that the ablation changes nothing else.

Encoder input layout, per row, built from the batch contract (`batch.py`):
    ctx_src = c_1 ... c_M <eos>   (previous sentences, oldest first, as the DataModule joined them)
    src     = x_1 ... x_I <eos>
    input   = c_1 ... c_M <sep> x_1 ... x_I <eos>
i.e. the context's final `<eos>` becomes `<sep>`. An empty context (`ctx_src` = `<eos>` alone)
contributes nothing: the input is `src` unchanged. Positions run 0..M+I+1 over the whole
concatenation; no segment embedding (NOT IN PAPER for Tiedemann & Scherrer: the `<sep>` token
marks the boundary). Every module and parameter name is the Transformer's, so a sentence-level
Transformer checkpoint loads into this model as is.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from lightning_docmt.batch import PAD_ID, SEP_ID
from lightning_docmt.config.registry import register_arch
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.models.transformer import TransformerConfig, TransformerSeq2Seq
from lightning_docmt.nn.concatenation import join_rows


@dataclass
class ConcatConfig(TransformerConfig):
    """The Transformer's options; the context itself comes from `context.prev_sentences`."""

    arch: str = "concat"


def concatenate_context(ctx_src: Tensor, src: Tensor) -> Tensor:
    """Per row, `ctx_src` with its final `<eos>` replaced by `<sep>`, then `src`; right-padded (B, C + S)."""
    ctx_len = ctx_src.ne(PAD_ID).sum(1)  # (B,), the final <eos> included
    prefix = torch.where(ctx_len > 1, ctx_len, 0)  # context tokens + <sep>; 0 for an empty context
    last = (ctx_len - 1).clamp(min=0)[:, None]  # (B, 1) column of the context's final <eos>
    marked = ctx_src.scatter(1, last, torch.full_like(last, SEP_ID))  # (B, C), <eos> -> <sep>
    return join_rows([marked, src], [prefix, src.ne(PAD_ID).sum(1)]).tokens  # (B, L)


@register_arch("concat", ConcatConfig)
class ConcatSeq2Seq(TransformerSeq2Seq):
    """`TransformerSeq2Seq` whose encoder reads `concatenate_context(ctx_src, src)`."""

    reads_context = True

    def source_tokens(self, batch: dict[str, Tensor]) -> Tensor:
        if "ctx_src" not in batch:
            raise DocMTInputError("the concatenation model needs previous source sentences; set "
                                  "context.prev_sentences > 0", key="context.prev_sentences")
        return concatenate_context(batch["ctx_src"], batch["src"])

