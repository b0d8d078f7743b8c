"""Vocabulary + binarized splits of a config, built once and shared (`docmt prepare`, docs/design.md section 9).

Cache layout under `data.cache_dir`:
`vocab/<vocab key>/` (see `vocab/building.py`) and `bin/<split>-<split key>/` (see `cache.py`). The keys
are computed from corpus fingerprints and options alone, so `cache_layout` finds existing
entries without reading any corpus; `build_caches` reads each corpus at most once, and only when
something is missing. With an external tokenizer (`context.external`, docs/design.md section 5)
the split key also holds its fingerprint, so changing the tokenizer rebuilds the splits; without
one the keys are those of a pipeline that has no external stream. The same holds for the arrays of
the named streams (`context.streams`): the key holds each (side, tokenizer fingerprint), not the
streams' windows, which are cut when a batch is collated.

The vocabulary is learnt from the whole training split, whatever `data.train_fraction` keeps: the
stages of one run may train on different fractions (Zhang et al. 2018, Table 7: step 1 on
D_s u D_d, step 2 on the subset D_d) and must share token ids, since a stage starts from its
parent's embeddings. With `data.mix.corpus` the training split also holds that corpus' training
documents, after the in-domain ones (their count is `in_domain_documents` in its `meta.json`), and
the vocabulary is learnt from both, whatever `data.mix.share`: a stage on the in-domain documents
alone and one fine-tuned on the mixture share token ids (Donato et al. 2021, Table 6, reading D25).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from lightning_docmt.config.schema import DataConfig, VocabConfig
from lightning_docmt.data.cache import CACHE_FORMAT, LengthFilter, build_cache
from lightning_docmt.data.cachedir import build_once, content_key
from lightning_docmt.data.corpora import read_corpus
from lightning_docmt.data.first_pass import RetokenisedSide
from lightning_docmt.data.languages import character_coverages
from lightning_docmt.data.splits import SplitSource, split_sources
from lightning_docmt.data.streams import retokenised_arrays
from lightning_docmt.data.tokenizers import ExternalTokenizer, external_tokenizer, stream_tokenizers
from lightning_docmt.data.types import Corpus, Document
from lightning_docmt.data.vocab import build_vocabularies, load_vocabularies, vocab_dir
from lightning_docmt.data.windows import WindowSpec
from lightning_docmt.errors import DocMTInputError

Retokenised = Mapping[str, RetokenisedSide]
"""Array name -> what it holds: the streams' arrays of a split (`streams.retokenised_arrays`)."""

IN_DOMAIN_DOCUMENTS = "in_domain_documents"  # meta.json of a mixed training split: how many come first
TESTED_SPLIT = "test"  # the split a run is tested on (`data.report_split: valid` makes it the valid documents)
STAT_KEYS = ("documents", "sentences", "src_tokens", "tgt_tokens", "src_subwords", "tgt_subwords",
             "filtered", "targets")


@dataclass(frozen=True)
class CacheLayout:
    vocab_dir: Path
    split_dirs: dict[str, Path]


def check_data_config(data: DataConfig) -> None:
    for key in ("max_len", "max_tokens", "eval_max_tokens"):
        if getattr(data, key) < 1:
            raise DocMTInputError("must be positive", key=f"data.{key}")
    for key in ("max_len_ratio", "bucket_width", "num_workers"):
        if getattr(data, key) < 0:
            raise DocMTInputError("must be >= 0", key=f"data.{key}")


def _length_filter(data: DataConfig, split: str) -> LengthFilter | None:
    """Only the training split is filtered; valid/test keep every sentence."""
    return LengthFilter(data.max_len, data.max_len_ratio) if split == "train" else None


def vocabulary_source(sources: dict[str, SplitSource]) -> SplitSource:
    """The documents the vocabulary is learnt from: the training split before `train_fraction`."""
    return replace(sources["train"], fraction=1.0)


def cache_layout(data: DataConfig, vocab: VocabConfig, external: ExternalTokenizer | None = None,
                 retokenised: Retokenised | None = None) -> CacheLayout:
    """Where the vocabulary and the splits of `data` live (nothing is read or built);
    `retokenised`: the streams' arrays (`streams.retokenised_arrays`)."""
    check_data_config(data)
    sources = split_sources(data)
    vdir = vocab_dir(data.cache_dir, vocab, vocabulary_source(sources).fingerprint(),
                     character_coverages(vocab, data))
    split_dirs = {}
    for split, source in sources.items():
        lf = _length_filter(data, split)
        inputs = {"format": CACHE_FORMAT, "source": source.fingerprint(), "vocab": vdir.name,
                  "filter": lf and [lf.max_len, lf.max_len_ratio], "text": split != "train"}
        if external is not None:
            inputs["external"] = external.fingerprint
        if retokenised:  # the split whose first-pass file a target stream reads is `source.split`
            inputs["retokenised"] = sorted(r.fingerprint(source.split) for r in retokenised.values())
        key = content_key(inputs)
        split_dirs[split] = Path(data.cache_dir) / "bin" / f"{split}-{key}"
    return CacheLayout(vdir, split_dirs)


class _CorpusReader:
    """Reads each spec at most once per build."""

    def __init__(self) -> None:
        self._corpora: dict[str, Corpus] = {}

    def corpus(self, spec: str) -> Corpus:
        if spec not in self._corpora:
            self._corpora[spec] = read_corpus(spec)
        return self._corpora[spec]

    def documents(self, source: SplitSource) -> list[Document]:
        """The split's documents: those `source` selects, then the training documents of its
        out-of-domain corpus (`data.mix.corpus`) when it has one."""
        mixed = source.out_of_domain()
        return source.select(self.corpus(source.spec)) + (self.documents(mixed) if mixed else [])


def build_caches(data: DataConfig, vocab: VocabConfig, external: ExternalTokenizer | None = None,
                 retokenised: Retokenised | None = None, needed: Sequence[str] = ()) -> CacheLayout:
    """Build whatever is missing of the vocabulary and the three splits (with the `external`
    stream and the `retokenised` arrays when given); safe to run concurrently (each entry is built
    under a lock and renamed into place). `needed`: splits that must hold documents (a run's test
    split, `TESTED_SPLIT`); one without any is an error before anything is built."""
    layout = cache_layout(data, vocab, external, retokenised)
    sources = split_sources(data)
    reader = _CorpusReader()
    train = vocabulary_source(sources)
    if not layout.vocab_dir.is_dir() and not reader.documents(train):
        which = "data.train" if train.override else "data.corpus"
        raise DocMTInputError(f"no training documents in '{train.spec}' to build a vocabulary from",
                              key=which)
    for split in needed:
        directory, source = layout.split_dirs[split], sources[split]
        count = read_meta(directory)["documents"] if directory.is_dir() else len(reader.documents(source))
        if not count:  # a run would train, then fail (or score nothing) at its test
            which = f"data.{source.split}" if source.override else "data.corpus"
            raise DocMTInputError(f"no documents of the {source.split} split in '{source.spec}' (the split "
                                  "a run is tested on)", key=which)

    def train_sentences(side: str) -> Iterator[str]:
        for doc in reader.documents(train):
            yield from getattr(doc, side)

    build_vocabularies(vocab, train_sentences("src"), train_sentences("tgt"), data.cache_dir,
                       train.fingerprint(), character_coverages(vocab, data))
    src_vocab, tgt_vocab = load_vocabularies(layout.vocab_dir)
    for split, directory in layout.split_dirs.items():
        source = sources[split]

        def build(tmp: Path, source: SplitSource = source) -> None:
            corpus = reader.corpus(source.spec)
            meta = {"split": source.split, "spec": source.spec, "reader_skipped": corpus.skipped}
            if source.mix is not None:  # the first documents are in-domain (data/mix_sampler.py)
                meta |= {"mix": source.mix, IN_DOMAIN_DOCUMENTS: len(source.select(corpus))}
            build_cache(reader.documents(source), src_vocab, tgt_vocab, tmp,
                        length_filter=_length_filter(data, source.split),
                        keep_text=source.split != "train", extra_meta=meta,
                        external=external,
                        retokenised={name: (r.side, r.tokenizer, r.replacement(source.split))
                                     for name, r in (retokenised or {}).items()})

        build_once(directory, build)
    return layout


def read_meta(directory: Path) -> dict[str, Any]:
    return json.loads((Path(directory) / "meta.json").read_text())


def prepare(cfg: Any, needed: Sequence[str] = ()) -> dict[str, Any]:
    """Build vocab + caches for `cfg.data` / `cfg.vocab` (and `cfg.context.external` and
    `cfg.context.streams`, when `cfg` has them); JSON-able stats. `needed`: as `build_caches`'.

    `{"train"|"valid"|"test": {documents, sentences, src_tokens, tgt_tokens (whitespace),
    src_subwords, tgt_subwords, filtered, targets[, ext_subwords][, <array>_subwords]},
    "vocab": {...}, "skipped": {spec: {...}}}` where `skipped` holds what the corpus readers left
    out by rule, `ext_subwords` counts the external stream's ids when there is one and
    `<array>_subwords` the ids of each streams' array (`streams.retokenised_name`).
    """
    context = getattr(cfg, "context", None)
    external = external_tokenizer(context)
    tokenizers = stream_tokenizers(context)
    retokenised = (retokenised_arrays(WindowSpec.from_config(context, external, tokenizers).streams, tokenizers)
                   if tokenizers else {})
    layout = build_caches(cfg.data, cfg.vocab, external, retokenised, needed)
    src_vocab, tgt_vocab = load_vocabularies(layout.vocab_dir)
    metas = {split: read_meta(d) for split, d in layout.split_dirs.items()}
    keys = (STAT_KEYS + (() if external is None else ("ext_subwords",))
            + tuple(f"{name}_subwords" for name in retokenised))
    stats: dict[str, Any] = {split: {k: m[k] for k in keys} for split, m in metas.items()}
    stats["vocab"] = {"type": cfg.vocab.type, "joint": src_vocab is tgt_vocab,
                      "src_size": len(src_vocab), "tgt_size": len(tgt_vocab),
                      "path": str(layout.vocab_dir)}
    stats["skipped"] = {m["spec"]: m["reader_skipped"] for m in metas.values()
                        if m["reader_skipped"]}
    return stats
