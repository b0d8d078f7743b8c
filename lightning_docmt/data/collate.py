"""Sentence indices -> the batch dict of `batch.py`.

`WindowDataset` is indexed by a whole batch (the list of sentence indices a batch sampler
yields): the DataLoader runs with `batch_size=None` and the batch sampler as its `sampler`, so
windows are cut and padded inside the workers and only finished tensors cross processes.
`row_lengths` gives the unpadded length of every tensor row, for token-budget batching.

The external stream (`ctx_ext`, docs/design.md section 5) is padded with its own tokenizer's pad
id and comes with `ctx_ext_pad`, the padding mask, so that no model needs to know that id; so is
each named stream (`stream_<name>`, with `stream_<name>_types` and `stream_<name>_pad`), whose
current sentence is always the batch's own (only its neighbours follow the anchors).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from lightning_docmt.batch import BOS_ID, EOS_ID, pad
from lightning_docmt.data.cache import BinarizedSplit
from lightning_docmt.data.context_anchors import ContextAnchors
from lightning_docmt.data.streams import StreamSpec
from lightning_docmt.data.windows import ExternalWindow, WindowSpec, context_lengths, context_window


def context_tokens(split: BinarizedSplit, side: str):
    """The token array a context side is cut from: the split's `context_<side>` where it has one
    (the model's own translations as the target-side context of reference targets,
    `inference/own_outputs.WithContextTargets`), else the side itself."""
    own = getattr(split, f"context_{side}", None)
    return getattr(split, side) if own is None else own


def external_context(split: BinarizedSplit, index: np.ndarray, doc_start: np.ndarray,
                     doc_end: np.ndarray, window: ExternalWindow
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """`ctx_ext` (B, E) int64 padded with `window.pad_id`, and `ctx_ext_pad` (B, E) bool (True =
    padding), built from the lengths: an id equal to the pad id never decides what is padding."""
    if split.ext is None:
        raise ValueError(f"split '{split.path}' was binarized without the external stream")
    rows = [window.window(split.ext.ids, split.ext.offsets, int(i), int(s), int(e))
            for i, s, e in zip(index, doc_start, doc_end)]
    tokens = pad(rows, window.pad_id)
    lengths = torch.tensor([len(r) for r in rows])
    return tokens, torch.arange(tokens.size(1))[None, :] >= lengths[:, None]  # (B, E)


def stream_tensors(split: BinarizedSplit, stream: StreamSpec, index: np.ndarray, anchor: np.ndarray,
                   start: np.ndarray, end: np.ndarray) -> dict[str, torch.Tensor]:
    """A named stream's three batch tensors, (B, S) each: ids padded with its pad id, token types
    padded with 0, and the padding mask from the lengths."""
    array = split.retokenised.get(stream.array)
    if array is None:
        raise ValueError(f"split '{split.path}' was binarized without the array of stream '{stream.name}'")
    rows = [stream.row(array.ids, array.offsets, int(i), int(a), int(s), int(e))
            for i, a, s, e in zip(index, anchor, start, end)]
    ids_key, types_key, pad_key = stream.keys
    tokens = pad([r[0] for r in rows], stream.pad_id)
    lengths = torch.tensor([len(r[0]) for r in rows])
    return {ids_key: tokens, types_key: pad([r[1] for r in rows], 0),
            pad_key: torch.arange(tokens.size(1))[None, :] >= lengths[:, None]}


def collate(split: BinarizedSplit, indices: Sequence[int], spec: WindowSpec,
            anchors: ContextAnchors | None = None) -> dict[str, torch.Tensor]:
    """The batch of the given sentences, in the given order; their context windows are those of
    `anchors` (`data/context_anchors.py`; None: each sentence's own)."""
    index = np.array(indices, dtype=np.int64)  # a contiguous copy, shared with `sent_index`
    doc = split.doc_index(index)
    doc_start, doc_end = split.doc_offsets[doc], split.doc_offsets[doc + 1]
    ctx_anchor, ctx_start, ctx_end = ((index, doc_start, doc_end) if anchors is None
                                      else anchors.rows(index))
    src = [np.append(split.src[i], EOS_ID) for i in index]
    tgt = [np.asarray(split.tgt[i], dtype=np.int64) for i in index]
    batch = {
        "src": pad(src),
        "tgt_in": pad([np.insert(t, 0, BOS_ID) for t in tgt]),
        "tgt_out": pad([np.append(t, EOS_ID) for t in tgt]),
        "sent_index": torch.from_numpy(index),
        "doc_index": torch.from_numpy(doc.astype(np.int64)),
        "pos_in_doc": torch.from_numpy(index - doc_start),
    }
    for key, (side, direction, size) in spec.sides().items():
        tokens = context_tokens(split, side)
        windows = [context_window(tokens.ids, tokens.offsets, int(i), int(s), int(e), direction,
                                  size, spec.max_tokens, spec.separator)
                   for i, s, e in zip(ctx_anchor, ctx_start, ctx_end)]
        batch[key] = pad([w[0] for w in windows])
        batch[f"{key}_seg"] = pad([w[1] for w in windows])
    if spec.external is not None:
        batch["ctx_ext"], batch["ctx_ext_pad"] = external_context(split, ctx_anchor, ctx_start,
                                                                  ctx_end, spec.external)
    for stream in spec.streams:
        batch.update(stream_tensors(split, stream, index, ctx_anchor, ctx_start, ctx_end))
    return batch


def row_lengths(split: BinarizedSplit, spec: WindowSpec, index: np.ndarray,
                anchors: ContextAnchors | None = None, chunk: int = 1 << 18) -> np.ndarray:
    """(n_tensors, len(index)) int32: the length of each given sentence's row in `src`, in
    `tgt_in` (= `tgt_out`), in each context tensor present, in `ctx_ext` when present and in each
    named stream, in that order, with the context of `anchors` (None: each sentence's own). Computed `chunk` sentences
    at a time so that temporaries stay small whatever the corpus size."""
    index = np.asarray(index, dtype=np.int64)
    sides = list(spec.sides().values())
    external = spec.external
    out = np.empty((2 + len(sides) + (external is not None) + len(spec.streams), len(index)), dtype=np.int32)
    for c in range(0, len(index), chunk):
        i = index[c:c + chunk]
        if anchors is None:
            doc = split.doc_index(i)
            ctx = (i, split.doc_offsets[doc], split.doc_offsets[doc + 1])
        else:
            ctx = anchors.rows(i)
        out[0, c:c + chunk] = split.src.offsets[i + 1] - split.src.offsets[i] + 1
        out[1, c:c + chunk] = split.tgt.offsets[i + 1] - split.tgt.offsets[i] + 1
        for r, (side, direction, size) in enumerate(sides, start=2):
            out[r, c:c + chunk] = context_lengths(context_tokens(split, side).offsets, *ctx, direction,
                                                  size, spec.max_tokens, spec.separator)
        if external is not None:
            out[2 + len(sides), c:c + chunk] = external.lengths(split.ext.offsets, *ctx)
        for r, stream in enumerate(spec.streams, start=2 + len(sides) + (external is not None)):
            out[r, c:c + chunk] = stream.lengths(split.retokenised[stream.array].offsets, i, *ctx)
    return out


class WindowDataset(Dataset):
    """`dataset[batch_indices]` -> batch dict, with the context of `anchors` (None: each
    sentence's own). Picklable: workers re-open the memory maps."""

    def __init__(self, split: BinarizedSplit, spec: WindowSpec, anchors: ContextAnchors | None = None):
        self.split, self.spec, self.anchors = split, spec, anchors

    def __len__(self) -> int:
        return self.split.n_sentences

    def __getitem__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        return collate(self.split, indices, self.spec, self.anchors)
