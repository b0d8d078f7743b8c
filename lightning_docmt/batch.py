"""The batch contract between the DataModule and every model.

A batch is a `dict[str, Tensor]` (all int64, right-padded with `PAD_ID`, except the external
streams: `ctx_ext` and `stream_<name>` are padded with their own tokenizer's pad id, and the
`*_pad` masks are bool):

| key            | shape       | content |
|----------------|-------------|---------|
| `src`          | (B, S)      | current source sentence ids followed by `<eos>` |
| `tgt_in`       | (B, T)      | `<bos>` + target ids (teacher forcing input) |
| `tgt_out`      | (B, T)      | target ids + `<eos>` (loss targets; PAD is ignored) |
| `ctx_src`      | (B, C)      | the k previous source sentences, oldest first, joined by `<sep>` (or nothing when `context.separator=false`), always ending in `<eos>`; an empty context (first sentence of a document) is the single token `<eos>` (Zhang's reference pipeline, reading Z4) |
| `ctx_src_seg`  | (B, C)      | segment id of every `ctx_src` token: the distance of its sentence from the current one (1 = immediately previous, k = oldest); the final `<eos>` gets 1 (0 for an empty context); PAD positions are 0 |
| `ctx_next`     | (B, N)      | the m next source sentences, nearest first, same layout as `ctx_src` (segment ids in `ctx_next_seg`) |
| `ctx_tgt`      | (B, U)      | the k previous *reference* target sentences, same layout (segment ids in `ctx_tgt_seg`) |
| `ctx_ext`      | (B, E)      | the k previous source sentences (the window of `ctx_src`, whatever `context.side`), in the ids of the external tokenizer (`context.external`, `data/tokenizers.py`): `[bos] s_{i-k} sep ... s_{i-1} eos` with THAT tokenizer's specials (no `bos` or `sep` when it has none, no `sep` when `context.separator=false`), at most `context.external.max_tokens` ids, the oldest cut first; an empty context is `[bos] eos`; right-padded with THAT tokenizer's pad id |
| `ctx_ext_pad`  | (B, E) bool | True where `ctx_ext` is padding; the only way to tell padding, whatever the pad id (never all True in a row) |
| `stream_<name>` | (B, R)     | named stream `<name>` (`context.streams.<name>`, `data/streams.py`): the current sentence and/or its `prev` previous and `next` next sentences of its `side` (the references for `target`), in its tokenizer's ids and layout (`pair`: `[CLS] A [SEP] B [SEP]`; `concat`: one sequence), at most `max_tokens` ids, the farthest neighbours cut first; right-padded with its tokenizer's pad id |
| `stream_<name>_types` | (B, R) | token type of every `stream_<name>` id (`pair`: 0 over `[CLS] A [SEP]`, 1 over `B [SEP]`; `concat`: 0); padding 0 |
| `stream_<name>_pad` | (B, R) bool | True where `stream_<name>` is padding |
| `sent_index`   | (B,)        | global index of the sentence inside its split (for gathering hypotheses in order) |
| `doc_index`    | (B,)        | index of its document inside the split |
| `pos_in_doc`   | (B,)        | 0-based position of the sentence inside its document |

`ctx_*` keys are present only when the corresponding context size is > 0, `ctx_ext` and
`ctx_ext_pad` only when `context.external` is set, the `stream_<name>*` keys for each stream of
`context.streams` (docs/design.md section 5). Under a control (`data/context_anchors.py`) a
stream's neighbours move and its current sentence stays. In document-order mode
(`data.document_order=true`) a batch holds one sentence of each of up to `data.max_documents`
documents and a document's next sentence is in the next batch (`data/doc_sampler.py`), so a model
with target-side context can carry its state from batch to batch; `doc_index` tells which document
each row belongs to. For a model that carries a state (`Seq2SeqModel.carries_state`), `DocMTModule`
adds `carry`: what each row's previous sentence handed on, or the model's reset value
(`nn/model_hooks.py`; rows are matched by `doc_index`, `nn/carried_state.CarriedState`).

Context truncation: when a context side exceeds `context.max_tokens`, the oldest tokens are removed
first (from the left of `ctx_src` and `ctx_tgt`, from the right of `ctx_next`), the final `<eos>` kept;
`ctx_ext` loses the left of its sentences under `context.external.max_tokens`, its `bos`/`eos` kept.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
SEP_ID = 4
SPECIAL_TOKENS = ("<pad>", "<unk>", "<s>", "</s>", "<sep>")


def pad(rows: Sequence[np.ndarray], value: int = PAD_ID) -> torch.Tensor:
    """Right-pad 1-D int arrays with `value` into a (B, max_len) int64 tensor."""
    out = np.full((len(rows), max(len(r) for r in rows)), value, dtype=np.int64)
    for b, row in enumerate(rows):
        out[b, :len(row)] = row
    return torch.from_numpy(out)
