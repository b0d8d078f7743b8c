"""`DocumentWindowDataModule`: corpora -> vocab + memory-mapped splits -> document-window batches.

docs/design.md sections 5 and 7; batch layout in `batch.py`. `prepare_data` builds the caches
(Lightning runs it on one process per node; concurrent calls are safe), `setup` only opens memory
maps (and builds what is missing, under the same locks, when `prepare_data` did not run), so every
DDP rank and DataLoader worker shares the page cache instead of holding the corpus.

Samplers: training uses `TokenBudgetBatchSampler` (or `DocumentOrderBatchSampler` with
`data.document_order`, or `MixedBatchSampler` with `data.mix.share` below 1), evaluation the
same classes unshuffled and without repeats. With `data.mix.corpus` the training split holds the
out-of-domain documents after the in-domain ones; only the mixed sampler reads them. Ranks come
from the attached trainer, else from the constructor. The samplers shard by themselves, and being
`DistributedSampler`s they are left in place by Lightning whatever `use_distributed_sampler` says.

Resuming: `state_dict()` (saved by Lightning in every checkpoint) holds the training sampler's
state with its position taken from the trainer's count of processed batches, not from the
sampler, which DataLoader prefetching runs ahead of; `load_state_dict` makes the next training
loader continue the interrupted epoch with exactly the batches it would have produced.
"""

from __future__ import annotations

import os
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch.utils.data import DataLoader

from lightning_docmt.config.schema import ContextConfig, DataConfig, VocabConfig
from lightning_docmt.data.cache import BinarizedSplit, load_cache
from lightning_docmt.data.collate import WindowDataset, row_lengths
from lightning_docmt.data.doc_sampler import DocumentOrderBatchSampler
from lightning_docmt.data.mix_sampler import MixedBatchSampler
from lightning_docmt.data.prepare import IN_DOMAIN_DOCUMENTS, build_caches, cache_layout
from lightning_docmt.data.sampler import ShardedBatchSampler, TokenBudgetBatchSampler
from lightning_docmt.data.streams import retokenised_arrays
from lightning_docmt.data.tokenizers import ExternalTokenizer, external_tokenizer, stream_tokenizers
from lightning_docmt.data.vocab import Vocabulary, load_vocabularies
from lightning_docmt.data.windows import WindowSpec


class DocumentWindowDataModule(pl.LightningDataModule):
    def __init__(self, data: DataConfig, vocab: VocabConfig, context: ContextConfig, *,
                 seed: int | None = None, rank: int = 0,
                 world_size: int = 1):
        """`seed` drives the per-epoch shuffles; None takes the seed of the last
        `pl.seed_everything` call (0 if none). `rank`/`world_size` apply without a trainer.
        The tokenizers of `context.external` (None when that stream is off) and of
        `context.streams` are loaded here."""
        super().__init__()
        self.data_cfg, self.vocab_cfg = data, vocab
        self.external: ExternalTokenizer | None = external_tokenizer(context)
        tokenizers = stream_tokenizers(context)
        self.window = WindowSpec.from_config(context, self.external, tokenizers)
        self.retokenised = retokenised_arrays(self.window.streams, tokenizers)
        self.seed = int(os.environ.get("PL_GLOBAL_SEED", 0)) if seed is None else seed
        self._rank, self._world_size = rank, world_size
        self._splits: dict[str, BinarizedSplit] = {}
        self._vocabs: tuple[Vocabulary, Vocabulary] | None = None
        self._train_sampler: ShardedBatchSampler | None = None
        self._pending_state: dict | None = None

    # ----------------------------------------------------------------- building and loading
    def prepare_data(self, needed: tuple[str, ...] = ()) -> None:
        """Build the caches (Lightning's hook); `needed`: splits that must hold documents (`build_caches`)."""
        build_caches(self.data_cfg, self.vocab_cfg, self.external, self.retokenised, needed)

    def setup(self, stage: str | None = None) -> None:
        layout = cache_layout(self.data_cfg, self.vocab_cfg, self.external, self.retokenised)
        if not (layout.vocab_dir.is_dir() and all(d.is_dir() for d in layout.split_dirs.values())):
            layout = build_caches(self.data_cfg, self.vocab_cfg, self.external, self.retokenised)
        self._vocabs = load_vocabularies(layout.vocab_dir)
        self._splits = {name: load_cache(d) for name, d in layout.split_dirs.items()}

    def split(self, name: str) -> BinarizedSplit:
        if not self._splits:
            self.setup()
        return self._splits[name]

    @property
    def src_vocab(self) -> Vocabulary:
        if self._vocabs is None:
            self.setup()
        return self._vocabs[0]

    @property
    def tgt_vocab(self) -> Vocabulary:
        if self._vocabs is None:
            self.setup()
        return self._vocabs[1]

    def references(self, split: str) -> list[str]:
        """Raw target sentences of `valid` or `test`, indexed by `sent_index`."""
        return self.split(split).references()

    def source_texts(self, split: str) -> list[str]:
        return self.split(split).source_texts()

    # ------------------------------------------------------------------------ dataloaders
    def _dist(self) -> tuple[int, int]:
        if self.trainer is not None:
            return self.trainer.global_rank, self.trainer.world_size
        return self._rank, self._world_size

    def _sampler(self, split: BinarizedSplit, indices: np.ndarray, *, train: bool, whole: bool = False
                 ) -> ShardedBatchSampler:
        rank, world = (0, 1) if whole else self._dist()
        common = dict(num_replicas=world, rank=rank, seed=self.seed, shuffle=train)
        if self.data_cfg.document_order:
            return DocumentOrderBatchSampler(split.doc_offsets, indices, self.data_cfg.max_documents,
                                             **common)
        budget = self.data_cfg.max_tokens if train else self.data_cfg.eval_max_tokens
        sizes = row_lengths(split, self.window, indices)
        return TokenBudgetBatchSampler(indices, sizes, budget,
                                       bucket_width=self.data_cfg.bucket_width, **common)

    def _mixed_sampler(self, split: BinarizedSplit, own: np.ndarray, other: np.ndarray
                       ) -> MixedBatchSampler:
        rank, world = self._dist()
        return MixedBatchSampler(own, row_lengths(split, self.window, own), other,
                                 row_lengths(split, self.window, other), self.data_cfg.mix.share,
                                 self.data_cfg.max_tokens, bucket_width=self.data_cfg.bucket_width,
                                 num_replicas=world, rank=rank, seed=self.seed)

    def training_targets(self) -> tuple[np.ndarray, np.ndarray]:
        """The training split's targets of the in-domain documents and of the out-of-domain ones
        (`data.mix.corpus`; none without it)."""
        split = self.split("train")
        first = split.doc_offsets[split.meta.get(IN_DOMAIN_DOCUMENTS, split.n_documents)]
        targets = np.asarray(split.targets)
        return targets[targets < first], targets[targets >= first]

    def mixed(self) -> bool:
        """Whether training batches draw out-of-domain documents (`data.mix.share` below 1)."""
        return self.data_cfg.mix.share < 1.0

    def training_pairs(self) -> dict[str, Any]:
        """What the training batches draw from: `train_pairs` (the sentence pairs) and, with
        `data.mix.corpus`, `mix`: the corpus, the share asked for, the in-domain share of the
        target tokens that the batches of the epochs begun so far hold (`realised_share`, 1
        unmixed) and each side's pairs."""
        own, other = self.training_targets()
        if self.data_cfg.mix.corpus is None:
            return {"train_pairs": len(own)}
        realised = self._train_sampler.in_domain_share(range(self._train_sampler.epoch + 1)) if self.mixed() else 1.0
        return {"train_pairs": len(own) + (len(other) if self.mixed() else 0),
                "mix": {"corpus": self.data_cfg.mix.corpus, "share": self.data_cfg.mix.share,
                        "realised_share": realised, "in_domain_pairs": len(own),
                        "out_of_domain_pairs": len(other)}}

    def _loader(self, split: BinarizedSplit, sampler: ShardedBatchSampler) -> DataLoader:
        workers = self.data_cfg.num_workers
        # A generator of its own: starting an iteration draws the workers' base seed from it, not
        # from the global RNG, so validating or resuming mid-epoch leaves the dropout stream alone.
        return DataLoader(WindowDataset(split, self.window), sampler=sampler, batch_size=None,
                          num_workers=workers, persistent_workers=workers > 0,
                          generator=torch.Generator().manual_seed(self.seed))

    def train_dataloader(self) -> DataLoader:
        split = self.split("train")
        own, other = self.training_targets()
        sampler = (self._mixed_sampler(split, own, other) if self.mixed()
                   else self._sampler(split, own, train=True))
        if self._pending_state is not None:
            sampler.load_state_dict(self._pending_state)
            self._pending_state = None
        self._train_sampler = sampler
        return self._loader(split, sampler)

    def _eval_loader(self, name: str) -> DataLoader | list:
        split = self.split(name)
        if split.n_documents == 0:
            return []  # no such split: Lightning skips the loop
        return self._loader(split, self._sampler(split, np.arange(split.n_sentences), train=False))

    def whole_eval_loader(self, name: str) -> DataLoader | list:
        """Split `name` batched as its evaluation loop batches it, but all of it in this process (no
        sharding by rank): for a pass that global rank zero makes alone (`training/stage_start.py`)."""
        split = self.split(name)
        return self._loader(split, self._sampler(split, np.arange(split.n_sentences), train=False, whole=True))

    def val_dataloader(self) -> DataLoader | list:
        return self._eval_loader("valid")

    def test_dataloader(self) -> DataLoader | list:
        return self._eval_loader("test")

    # ------------------------------------------------------------------------- resumption
    def state_dict(self) -> dict[str, Any]:
        if self._train_sampler is None:
            return {"train_sampler": self._pending_state} if self._pending_state else {}
        state = self._train_sampler.state_dict()
        trainer = self.trainer
        if trainer is not None and trainer.state.fn == TrainerFn.FITTING:
            state["epoch"] = trainer.current_epoch
            state["position"] = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        return {"train_sampler": state}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = state_dict.get("train_sampler")
        if state is None:
            return
        if self._train_sampler is not None:
            self._train_sampler.load_state_dict(state)
        else:
            self._pending_state = dict(state)
