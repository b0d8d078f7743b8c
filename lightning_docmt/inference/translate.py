"""Inference on raw documents with a loaded checkpoint (`docmt translate`, `docmt contrastive`;
`loaded_model.py`), in plain PyTorch: nothing here imports Lightning.

Raw documents are binarized into a temporary cache with the training code path
(`cache.build_cache`, the same windows and collation), so inference sees exactly the context layout
the model was trained on.

Translation streams (`translate_file`, `translate_documents`): the input is cut into chunks of
`CHUNK_SENTENCES` sentences (`chunks`), cutting documents wherever a chunk fills up, and each chunk
is binarized, translated and written before the next one is read. What a chunk keeps of the input
before it is only what its sentences read: the `WindowSpec.reach` previous sentences of the
document it starts in (`Chunk.before`), and for a model decoded in document order the translations
and the carried state of the sentences before it (`StreamingTranslator`); it reads the sentences
after its last one that the context windows reach (`Chunk.after`). Every sentence therefore
reads exactly what it reads when the whole input is translated at once (only the batches it is
decoded in differ, as they do between any two inputs), and memory is flat in the length of the
input and of each document (`benchmarks/translate_memory.py`). Source sentences keep at most `source_token_limit`
subwords (`cache.build_cache`'s `src_max_tokens`); the cut ones are counted.
"""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import tempfile
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from lightning_docmt.atomic_files import write_atomically
from lightning_docmt.data.cache import BinarizedSplit, build_cache, load_cache
from lightning_docmt.data.collate import collate, row_lengths
from lightning_docmt.data.context_anchors import ContextAnchors
from lightning_docmt.data.doc_sampler import DocumentOrderBatchSampler
from lightning_docmt.data.sampler import TokenBudgetBatchSampler
from lightning_docmt.data.types import Document
from lightning_docmt.data.windows import WindowSpec
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.inference import decoding
from lightning_docmt.inference.document_order import DocumentOrderWalk
from lightning_docmt.inference.documents_io import InputReader, Item, Sentence, format_translation
from lightning_docmt.inference.loaded_model import LoadedModel
from lightning_docmt.inference.reference_context import reads_reference_target
from lightning_docmt.nn.frozen import FrozenRowEncoder

DOCUMENTS_PER_BATCH = 128  # document-order translation: the documents decoded side by side

def check_sentence_by_sentence(model: LoadedModel, what: str) -> None:
    """A model that hands a state from each sentence to the next (`carries_state`) is run in
    document order only by the test loop (`docmt test`), `translate_documents` and contrastive
    scoring; `what` (the context-usage passes, explaining a selection) takes sentences out of their
    documents, so it is an error naming `model.arch`."""
    if type(model.model).carries_state:
        raise DocMTInputError(f"{what} of a model that carries state from sentence to sentence "
                              f"('{model.cfg.model.arch}') needs document-order decoding, which "
                              f"only the test loop does (docmt test)", key="model.arch")


def binarize_documents(documents: Sequence[Document], model: LoadedModel, directory: Path
                       ) -> BinarizedSplit:
    build_cache(documents, model.src_vocab, model.tgt_vocab, directory, external=model.external,
                retokenised={name: (r.side, r.tokenizer, None) for name, r in model.retokenised.items()})
    return load_cache(directory)


def batches(split: BinarizedSplit, indices: np.ndarray, window: WindowSpec, max_tokens: int,
            device: torch.device, anchors: ContextAnchors | None = None
            ) -> Iterator[dict[str, torch.Tensor]]:
    """Length-sorted token-budget batches of the given sentences (no shuffle, each once), on
    `device`, with the context of `anchors` (None: each sentence's own; `data/context_anchors.py`)."""
    sizes = row_lengths(split, window, indices, anchors)
    sampler = TokenBudgetBatchSampler(indices, sizes, max_tokens, shuffle=False)
    return collated(split, sampler, window, device, anchors)


def collated(split: BinarizedSplit, sampler: Iterable[Sequence[int]], window: WindowSpec,
             device: torch.device, anchors: ContextAnchors | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """The batch of each index list of `sampler`, on `device`, collated when it is asked for."""
    for batch_indices in sampler:
        yield {k: v.to(device) for k, v in collate(split, batch_indices, window, anchors).items()}


def document_order_batches(split: BinarizedSplit, window: WindowSpec, device: torch.device,
                           max_documents: int = DOCUMENTS_PER_BATCH) -> Iterator[dict[str, torch.Tensor]]:
    """Batches holding sentence j of up to `max_documents` documents, j = 0, 1, ... per group of
    documents (`data/doc_sampler.py`, unshuffled), on `device`."""
    sampler = DocumentOrderBatchSampler(split.doc_offsets, np.arange(split.n_sentences), max_documents,
                                        shuffle=False)
    return collated(split, sampler, window, device)



# ------------------------------------------------------------------------------- streaming

CHUNK_SENTENCES = 2048  # sentences translated per piece of the input (module docstring)


def source_token_limit(model: LoadedModel) -> int:
    """The most subwords a source sentence keeps (the rest are cut, `docmt translate` reports
    them): `model.max_positions` - 1, the rows of the positional table less the sentence's
    `<eos>`; no more than a learned (pretrained) table holds. Every architecture reads the same
    limit, those without positions (`yk_rnn`) too: it bounds the time and memory of one sentence."""
    limit = int(model.cfg.model.max_positions)
    positions = getattr(getattr(model.model, "src_embed", None), "positions", None)
    if isinstance(positions, torch.nn.Embedding):
        limit = min(limit, positions.num_embeddings)
    return max(1, limit - 1)


@contextlib.contextmanager
def no_feature_cache(network: torch.nn.Module) -> Iterator[None]:
    """Frozen encoders (`nn/frozen.FrozenRowEncoder`) keep no features while translating: a
    document's rows are each read once, so a cache would only grow with the document's length."""
    encoders = [m for m in network.modules() if isinstance(m, FrozenRowEncoder)]
    kept = [m.max_bytes for m in encoders]
    for m in encoders:
        m.max_bytes = 0
        m.reset()
    try:
        yield
    finally:
        for m, max_bytes in zip(encoders, kept):
            m.max_bytes = max_bytes


MMAP_THRESHOLD = 128 << 10  # glibc's initial M_MMAP_THRESHOLD, kept fixed while translating
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


def fixed_mmap_threshold() -> bool:
    """Keep glibc's mmap threshold at `MMAP_THRESHOLD` for the rest of the process (False where
    the C library is not glibc, which changes nothing). By default glibc raises the threshold to
    the size of every larger block freed, so later tensors of varying sizes come from the heap,
    which fragments and is never given back: translating with `pas` (MiniLM-sized encoders, rows
    of every length) grew its peak from 582 MiB at 1,000 sentences to 782 MiB at 10,000, and
    stayed flat at ~400 MiB with the threshold fixed, at the same speed. Blocks that large are
    then mapped and unmapped as the tensors come and go."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):
        return False


@contextlib.contextmanager
def native_recurrent_kernels(network: torch.nn.Module) -> Iterator[None]:
    """A network with recurrent layers (`yk_rnn`'s LSTMs, `lifeng_coattn`'s GRU tagger) runs them
    with PyTorch's own CPU kernels, not oneDNN's, while translating: oneDNN builds a primitive
    for every new (batch, length) shape and the process kept growing with the number of shapes
    seen (measured, `yk_rnn` on documents of 7 sentences: +11 MiB at 10,000 sentences, +31 MiB at
    40,000, +63 MiB at 100,000, even with its primitive cache cut to 64 entries; flat with the
    native kernels, at the same speed). The results agree to floating-point rounding with
    `docmt test`'s, which keeps oneDNN. Other networks are left as they are."""
    if not any(isinstance(m, torch.nn.RNNBase) for m in network.modules()):
        yield
        return
    enabled = torch.backends.mkldnn.enabled  # only this flag: `mkldnn.flags` also sets TF32's, with a warning
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = enabled


@dataclass
class Chunk:
    """A piece of the input: `items` in output order (`documents_io.Item`), and the sentences of
    the same documents just before its first sentence (`before`) and just after its last one
    (`after`), which its context windows read but which belong to the neighbouring pieces."""

    items: list[Item]
    before: list[Sentence]
    after: list[Sentence]

    @property
    def sentences(self) -> list[Sentence]:
        return [item for item in self.items if isinstance(item, Sentence)]


def chunks(items: Iterable[Item], size: int, reach: tuple[int, int]) -> Iterator[Chunk]:
    """The items cut into pieces of `size` sentences (or `4 * size` items): a piece ends after its
    `size`-th sentence, once the `reach[1]` sentences after it in its document are read (they
    start the next piece, and are this one's `after`); a piece that goes on with the document of
    the piece before it gets that document's last `reach[0]` sentences as `before`. Only these
    are kept besides the piece itself."""
    previous, following = reach
    tail: deque[Sentence] = deque(maxlen=previous)  # the last sentences of the last document so far
    source = iter(items)
    own: list[Item] = []
    count = 0

    def piece(own: list[Item], after: list[Sentence]) -> Chunk:
        first = next((x for x in own if isinstance(x, Sentence)), None)
        before = list(tail) if first is not None and tail and tail[-1].doc == first.doc else []
        for x in own:
            if isinstance(x, Sentence):
                if tail and tail[-1].doc != x.doc:
                    tail.clear()
                tail.append(x)
        return Chunk(own, before, after)

    for item in source:
        own.append(item)
        count += isinstance(item, Sentence)
        if count < size and len(own) < 4 * size:
            continue
        last = next((x for x in reversed(own) if isinstance(x, Sentence)), None)
        ahead: list[Item] = []
        after: list[Sentence] = []
        while last is not None and len(after) < following:
            item = next(source, None)
            if item is None:
                break
            ahead.append(item)
            if isinstance(item, Sentence):
                if item.doc != last.doc:
                    break
                after.append(item)
        yield piece(own, after)
        own, count = ahead, sum(isinstance(x, Sentence) for x in ahead)
    if own:
        yield piece(own, [])


@dataclass
class PreparedChunk:
    """A chunk binarized: its split (documents of `before` + the chunk's sentences + `after`),
    every sentence of it in split order, and the split indices of the chunk's own sentences."""

    chunk: Chunk
    split: BinarizedSplit
    sentences: list[Sentence]
    targets: np.ndarray

    @property
    def own(self) -> list[Sentence]:
        return self.sentences[self.targets[0]:self.targets[-1] + 1] if len(self.targets) else []


class StreamingTranslator:
    """Translates an input one `Chunk` at a time (`chunks`), each binarized into its own split
    under `directory` (removed when the next one comes), and keeps from one chunk to the next
    only what the next one reads of it: for a model decoded in document order
    (`document_order.DocumentOrderWalk`), the last `prev_tgt` translations of the document that
    goes on, and the state its last sentence hands on. Counts the sentences cut to
    `source_token_limit` among those it translated (`truncated`, the first `first_truncated`)."""

    def __init__(self, model: LoadedModel, directory: Path, *, beam: int = 1, len_penalty: float | None = None):
        self.model, self.directory = model, directory
        self.beam, self.len_penalty = beam, len_penalty
        self.window = model.window
        self.own_targets = reads_reference_target(model.cfg)
        self.ordered = type(model.model).carries_state or self.own_targets
        self.limit = source_token_limit(model)
        self.truncated = 0
        self.first_truncated: Sentence | None = None
        self._chunks = 0
        self._tail_doc: int | None = None  # the last translated document
        self._tail_outputs: dict[int, list[int]] = {}  # its last translations, by position
        self._tail_carry: tuple[int, Any] | None = None  # (position, state its sentence handed on)

    def prepare(self, chunk: Chunk) -> PreparedChunk:
        own = chunk.sentences
        sentences = [*chunk.before, *own, *chunk.after]
        documents: list[Document] = []
        for k, s in enumerate(sentences):
            if k == 0 or s.doc != sentences[k - 1].doc:
                documents.append(Document(s.doc_id, [], []))
            documents[-1].src.append(s.text)
            documents[-1].tgt.append("")
        directory = self.directory / f"chunk{self._chunks}"
        if self._chunks:
            shutil.rmtree(self.directory / f"chunk{self._chunks - 1}", ignore_errors=True)
        self._chunks += 1
        directory.mkdir(parents=True)
        build_cache(documents, self.model.src_vocab, self.model.tgt_vocab, directory,
                    external=self.model.external, src_max_tokens=self.limit,
                    retokenised={name: (r.side, r.tokenizer, None) for name, r in self.model.retokenised.items()})
        split = load_cache(directory)
        targets = np.arange(len(chunk.before), len(chunk.before) + len(own), dtype=np.int64)
        for i in split.meta["truncated"]:
            if targets[0] <= i <= targets[-1]:
                self.truncated += 1
                self.first_truncated = self.first_truncated or sentences[i]
        return PreparedChunk(chunk, split, sentences, targets)

    @torch.no_grad()
    def explain(self, prepared: PreparedChunk) -> list[dict]:
        """`explain_selection`'s lines for the chunk's own sentences, in order."""
        model = self.model
        check_sentence_by_sentence(model, "explaining the context selection")
        kept: dict[int, list[int]] = {}
        for batch in batches(prepared.split, prepared.targets, self.window,
                             model.cfg.decode.batch_max_tokens, model.device):
            rows = model.model.kept_context_tokens(batch)
            if rows is None:
                raise DocMTInputError(f"model.arch '{model.cfg.model.arch}' selects no context tokens; "
                                      f"--explain needs a model with a hard context selection "
                                      f"(lifeng_coattn)", key="--explain")
            kept.update(zip(batch["sent_index"].tolist(), rows))
        sentences, lines = prepared.sentences, []
        for i in prepared.targets.tolist():
            s = sentences[i]
            previous = [p.text for p in sentences[max(0, i - self.window.prev_src):i] if p.doc == s.doc]
            lines.append({"doc_id": s.doc_id, "sentence": s.position if s.index is None else s.index,
                          "context": previous, "kept": [model.src_vocab.piece(t) for t in kept[i]]})
        return lines

    @torch.no_grad()
    def translate(self, prepared: PreparedChunk) -> list[str]:
        """The detokenised translations of the chunk's own sentences, in order."""
        model, network = self.model, self.model.model
        split, targets, sentences = prepared.split, prepared.targets, prepared.sentences
        first = int(targets[0])
        hyps = [""] * len(targets)
        if not self.ordered:
            for batch in batches(split, targets, self.window, model.cfg.decode.batch_max_tokens, model.device):
                translated = decoding.best_tokens(network, batch, model.cfg.decode, self.beam, self.len_penalty)
                for i, ids in zip(batch["sent_index"].tolist(), translated):
                    hyps[i - first] = model.tgt_vocab.decode(ids)
            return hyps
        walk = DocumentOrderWalk(network, split, self.window, own_targets=self.own_targets)
        start = sentences[first]
        if start.doc == self._tail_doc:  # the document the last chunk stopped in goes on
            pos_in_doc = first - int(split.doc_offsets[0])
            outputs = {i: self._tail_outputs[s.position] for i, s in enumerate(sentences[:first])
                       if s.position in self._tail_outputs}
            carry = (self._tail_carry[1] if self._tail_carry is not None
                     and self._tail_carry[0] == start.position - 1 else None)
            walk.resume(0, pos_in_doc, carry, outputs)
        last = int(targets[-1])
        last_doc = int(split.doc_index(np.array([last]))[0])
        last_pos = last - int(split.doc_offsets[last_doc])
        carry = None
        sampler = DocumentOrderBatchSampler(split.doc_offsets, targets, DOCUMENTS_PER_BATCH, shuffle=False)
        for batch in collated(split, sampler, self.window, model.device):
            batch = walk.read(batch)
            translated = decoding.best_tokens(network, batch, model.cfg.decode, self.beam, self.len_penalty)
            if not walk.decoded(batch, translated):
                raise DocMTInputError(f"model.arch '{model.cfg.model.arch}' carries a state but "
                                      f"says nothing of what its output hands on (output_carry)",
                                      key="model.arch")
            rows = batch["sent_index"].tolist()
            for i, ids in zip(rows, translated):
                hyps[i - first] = model.tgt_vocab.decode(ids)
            if last in rows:
                carry = walk.handed_on(last_doc, last_pos)
        end = sentences[last]
        outputs = {} if end.doc != self._tail_doc else self._tail_outputs
        if walk.outputs is not None:
            outputs = {**outputs, **{sentences[i].position: walk.outputs[i].tolist()
                                     for i in range(first, last + 1) if sentences[i].doc == end.doc}}
            outputs = {p: ids for p, ids in outputs.items() if p >= end.position - self.window.prev_tgt}
        self._tail_doc, self._tail_outputs = end.doc, outputs
        self._tail_carry = None if carry is None else (end.position, carry)
        return hyps


@dataclass
class TranslationSummary:
    """What `translate_file` did: the sentences and documents it translated, the sentences it cut
    to `limit` subwords (`truncated`, the first at `first_truncated`, "file:line"), and the input
    lines whose control characters became spaces (`control_lines`, the first at `first_control`)."""

    sentences: int
    documents: int
    limit: int
    truncated: int
    first_truncated: str | None
    control_lines: int
    first_control: str | None

    def report_lines(self) -> list[str]:
        """One line per rule that changed the input (nothing when none did), for stderr."""
        lines = []
        if self.truncated:
            lines.append(f"translate: {self.truncated} sentence{'s' if self.truncated > 1 else ''} longer "
                         f"than {self.limit} tokens {'were' if self.truncated > 1 else 'was'} truncated "
                         f"to {'their' if self.truncated > 1 else 'its'} first {self.limit} "
                         f"(first: {self.first_truncated})")
        if self.control_lines:
            lines.append(f"translate: {self.control_lines} line{'s' if self.control_lines > 1 else ''} "
                         f"held control characters, replaced by spaces (first: {self.first_control})")
        return lines


def translate_file(model: LoadedModel, source: str | Path, output: str | Path, *, beam: int,
                   len_penalty: float | None, explain: Callable[[dict], None] | None = None,
                   chunk_sentences: int = CHUNK_SENTENCES) -> TranslationSummary:
    """Translate the input file `source` (`documents_io`'s formats and rules) into `output`,
    `chunk_sentences` at a time (`chunks`): the input is read once to check it (a bad line is an
    error before anything is translated), then again as it is translated, and each chunk's
    translations go out before the next chunk is read. The output is written to a temporary file
    beside `output` and renamed over it at the end (`atomic_files.write_atomically`): an error or
    a kill leaves no half-written output. `explain` gets each `explain_selection` line first."""
    source, output = Path(source), Path(output)
    if not output.parent.is_dir():
        raise DocMTInputError("no such directory", path=output.parent, key="--output")
    reader = InputReader(source)
    reader.check()
    fixed_mmap_threshold()
    if explain is not None:
        check_sentence_by_sentence(model, "explaining the context selection")
    with (tempfile.TemporaryDirectory() as tmp, no_feature_cache(model.model),
          native_recurrent_kernels(model.model)):
        translator = StreamingTranslator(model, Path(tmp), beam=beam, len_penalty=len_penalty)

        def write(path: Path) -> None:
            with open(path, "w", encoding="utf-8", newline="") as out:
                for chunk in chunks(reader.items(), chunk_sentences, model.window.reach):
                    if not chunk.sentences:
                        out.write("".join(chunk.items))
                        continue
                    prepared = translator.prepare(chunk)
                    if explain is not None:
                        for line in translator.explain(prepared):
                            explain(line)
                    translations = iter(translator.translate(prepared))
                    out.write("".join(item if isinstance(item, str) else
                                      format_translation(item, next(translations), reader.jsonl)
                                      for item in chunk.items))

        write_atomically(output, write)
    first = translator.first_truncated
    return TranslationSummary(reader.sentences, reader.documents, translator.limit, translator.truncated,
                              None if first is None else reader.where(first), reader.control_lines,
                              reader.first_control)


def _document_items(documents: Sequence[Document]) -> Iterator[Sentence]:
    for d, doc in enumerate(documents):
        for j, text in enumerate(doc.src):
            yield Sentence(text, d, doc.doc_id, j, j + 1)


@torch.no_grad()
def translate_documents(model: LoadedModel, documents: Sequence[Document], *, beam: int,
                        len_penalty: float, chunk_sentences: int = CHUNK_SENTENCES) -> list[list[str]]:
    """Detokenised translations of every sentence, grouped by document, in input order (the
    sentences as given: no cleaning, no empty-line rule; `translate_file` reads files).

    A model that reads what came before in the target language translates each document in
    order, never reading a reference (`document_order.DocumentOrderWalk`): one with target-side
    context (`ctx_tgt`) reads its own previous translations there, and one that carries a state
    from sentence to sentence (`carries_state`, e.g. the shared-context RNN) reads the state that
    its own translation of sentence j - 1 handed on (`Seq2SeqModel.output_carry`). Other models
    translate length-sorted batches. Either way `chunk_sentences` at a time (`chunks`), which
    changes nothing in the translations: each chunk reads the context its sentences read."""
    translations: list[list[str]] = [[] for _ in documents]
    with (tempfile.TemporaryDirectory() as tmp, no_feature_cache(model.model),
          native_recurrent_kernels(model.model)):
        translator = StreamingTranslator(model, Path(tmp), beam=beam, len_penalty=len_penalty)
        for chunk in chunks(_document_items(documents), chunk_sentences, model.window.reach):
            own = chunk.sentences
            for s, hyp in zip(own, translator.translate(translator.prepare(chunk))):
                translations[s.doc].append(hyp)
    return translations


@torch.no_grad()
def explain_selection(model: LoadedModel, documents: Sequence[Document],
                      chunk_sentences: int = CHUNK_SENTENCES) -> list[dict]:
    """For every sentence, in input order, the context tokens the model's hard selection keeps
    (`Seq2SeqModel.kept_context_tokens`, e.g. Li & Feng's selector): `{"doc_id", "sentence" (its
    index in the document), "context" (the previous source sentences the model reads, as given),
    "kept" (the kept tokens as vocabulary pieces, in order)}`. A model without one is an error."""
    check_sentence_by_sentence(model, "explaining the context selection")
    lines: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        translator = StreamingTranslator(model, Path(tmp))
        for chunk in chunks(_document_items(documents), chunk_sentences, model.window.reach):
            lines.extend(translator.explain(translator.prepare(chunk)))
    return lines
