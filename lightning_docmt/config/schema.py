"""Configuration schema: the dataclasses behind every experiment YAML.

OmegaConf turns these into structured configs in struct mode, so an unknown key or a wrong type fails
at compose time (see `config.compose`). Architecture configs subclass `ModelConfig` inside their
`models/<arch>.py` and are merged in by the registry; the shared size names (`d_model`, `heads`,
`ffn_dim`, `enc_layers`, `dec_layers`, `dropout`) are the same in every arch so that a profile
can shrink any of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class VocabConfig:
    """Subword or word vocabulary (docs/design.md section 5)."""

    type: str = "bpe"  # bpe | unigram | word
    size: int = 8000  # sentencepiece vocab size, or the word-vocabulary cap (incl. specials)
    joint: bool = True  # one vocabulary for both sides (needed for tied src/tgt embeddings)
    character_coverage: Optional[float] = None  # sentencepiece; None: by language (data/languages.py)
    max_train_sentences: int = 2_000_000  # sentencepiece input_sentence_size (seeded sample)
    lowercase: bool = False
    word_split: str = "whitespace"  # type=word: whitespace | han (one word per Han character, data/vocab/words.py)
    # The source side is the WordPiece vocabulary of this pretrained encoder (a name or directory,
    # nn/pretrained.py), the target side its own vocabulary of `type`/`size` (so `joint` is false).
    # Set from model.pretrained_encoder when that is set (config/composition.py).
    src_pretrained: Optional[str] = None


@dataclass
class ExternalContextConfig:
    """The context sentences tokenised a second time, for a pretrained context encoder
    (docs/design.md section 5; batch keys `ctx_ext`, `ctx_ext_pad` in `batch.py`).

    A pretrained encoder (BERT-like, PEGASUS) reads its input in its own vocabulary, with its own
    special and padding ids, so its context cannot reuse `ctx_src`: `tokenizer` names the tokenizer
    of that stream (`data/tokenizers.py`).
    """

    tokenizer: str = ""  # vocab:DIR[?pad_id=N] (a saved Vocabulary) | hf:NAME (a BERT-style encoder's WordPiece)
    max_tokens: int = 512  # cap on ctx_ext tokens (specials included); the oldest context is cut first


@dataclass
class StreamConfig:
    """One named external stream (`context.streams.<name>`, docs/design.md section 5; batch keys
    `stream_<name>`, `stream_<name>_types`, `stream_<name>_pad` in `batch.py`): the sentences around
    sentence i of one side, in a pretrained encoder's own ids and layout (Donato et al. 2021,
    docs/papers/donato2021.md readings D5 and D22; `data/streams.py`).

    Under the no-context and random-context controls a stream keeps the current sentence; only its
    neighbours move. A `target` stream reads the reference translations of its neighbours.
    """

    tokenizer: str = ""  # vocab:DIR[?pad_id=N] | hf:NAME (data/tokenizers.py)
    side: str = "source"  # source | target
    prev: int = 0  # previous sentences read
    current: bool = True  # the current sentence itself
    next: int = 0  # next sentences read
    format: str = "pair"  # pair: [CLS] A [SEP] B [SEP] with token types (BERT) | concat: one sequence (PEGASUS)
    max_tokens: int = 512  # cap on a row (specials included); the farthest neighbours are cut first
    # A target stream at valid and test time: a first-pass run's directory whose <split>.hyp.txt it
    # reads instead of the references (data/first_pass.py); null: the references (an oracle).
    hypotheses: Optional[str] = None


@dataclass
class ContextConfig:
    """Document windows around sentence i (docs/design.md section 5)."""

    prev_sentences: int = 0  # k previous source sentences
    next_sentences: int = 0  # m next source sentences
    side: str = "source"  # source | target | mix  (target: k previous target sentences)
    max_tokens: int = 256  # cap on context tokens per side; the oldest context is cut first
    separator: bool = True  # <sep> between context sentences (Zhang's reference: False, reading Z4)
    external: Optional[ExternalContextConfig] = None  # ctx_ext: the k previous sentences; None = off
    streams: dict[str, StreamConfig] = field(default_factory=dict)  # named external streams


@dataclass
class MixConfig:
    """A second corpus whose training documents share every training batch with the training
    split (`data/mix_sampler.py`, docs/design.md section 5): Donato, Yu & Dyer 2021, Table 6, the
    out-of-domain News Commentary documents of IWSLT+ (docs/papers/donato2021.md, reading D25).

    `share` is the in-domain part of each batch's target tokens; 1 trains on the in-domain
    documents alone. Valid and test never read `corpus`. The vocabulary is learnt from the training
    documents of both corpora whatever the share, so that a stage at share 1 and one mixed can
    start from each other.
    """

    corpus: Optional[str] = None  # a corpus spec; its documents labelled train or unlabelled are read
    share: float = 1.0  # in (0, 1]


@dataclass
class DataConfig:
    """Corpora and batching.

    `corpus` is a corpus spec whose own split (train/valid/test) is used; `train`/`valid`/`test`
    override a split with another spec (e.g. Zhang two-step: step 1 on all pairs, step 2 on documents).
    """

    corpus: str = "bible:en-fr"
    train: Optional[str] = None
    valid: Optional[str] = None
    test: Optional[str] = None
    max_len: int = 250  # sentences with more subword tokens on either side are filtered and counted
    max_len_ratio: float = 0.0  # >0: also filter pairs whose length ratio exceeds it (counted)
    max_tokens: int = 4096  # token budget of one batch (padded source + context + target)
    eval_max_tokens: int = 8192
    bucket_width: int = 0  # 0 = sort exactly by length inside a pool; >0 = bucket granularity
    num_workers: int = 0
    document_order: bool = False  # yield the sentences of each document in order (target context)
    max_documents: int = 128  # document order: documents read at once per rank, i.e. sentences per batch
    cache_dir: str = ".cache/docmt"
    train_fraction: float = 1.0  # use only a fraction of the training documents (ablations)
    train_fraction_draw: str = "first"  # first (in corpus order) | random (seeded, corpus order kept)
    train_fraction_seed: int = 1  # the draw's seed (fixed across train.seed: one subset per table)
    # The split the test loop and its report read (tests/BLEU files, CXMI, the random-context
    # control, significance): `valid` reports on the valid split, as Donato et al.'s Tables 3-7 do,
    # and the test split is then neither binarized nor decoded (data/splits.py).
    report_split: str = "test"
    src_lang: Optional[str] = None  # ISO 639-1; None: the pair the corpus spec names (bible:zh-en)
    tgt_lang: Optional[str] = None
    mix: MixConfig = field(default_factory=MixConfig)  # out-of-domain documents in every training batch


@dataclass
class ModelConfig:
    """Shared size names; each architecture subclasses this with its own options."""

    arch: str = "transformer"
    d_model: int = 512
    heads: int = 8
    ffn_dim: int = 2048
    enc_layers: int = 6
    dec_layers: int = 6
    dropout: float = 0.1
    attn_dropout: float = 0.0
    relu_dropout: float = 0.0
    pre_norm: bool = False  # the papers are post-LN
    share_embeddings: bool = True  # tie source and target embeddings (needs a joint vocabulary)
    tie_output: bool = True  # tie the target embedding and the output projection W_o
    max_positions: int = 1024


@dataclass
class OptimConfig:
    """Adam + warmup schedule (docs/design.md section 7)."""

    optimizer: str = "adam"  # adam | adagrad (Yamagishi & Komachi; `betas` unused)
    lr: float = 1.0  # inverse_sqrt: multiplier of d_model^-0.5 * min(t^-0.5, t*w^-1.5); else peak lr
    schedule: str = "inverse_sqrt"  # inverse_sqrt | linear_warmup_inverse_sqrt | linear_warmup_linear_decay | constant
    warmup_steps: int = 4000
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    eps: float = 1e-9
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float = 0.0


@dataclass
class UnfreezeConfig:
    """A milestone of a stage's `StagedUnfreezing` (`callbacks/staged_unfreezing.py`).

    Once the stage has made `at_step` optimizer updates (counted from 0 in every stage, whatever
    `continue_schedule` says), or at the start of its epoch `at_epoch` (set exactly one), the
    still-frozen parameters matching `globs` start training, as an optimizer group of their own.
    `lr` is required (no silent lr/10 default, docs/design.md section 12) and is in the units of
    `train.optim.lr`: the group follows the stage's schedule with `lr` in place of the stage's lr.
    """

    globs: list[str] = field(default_factory=list)  # parameter-name globs (fnmatch)
    at_step: Optional[int] = None
    at_epoch: Optional[int] = None
    lr: Optional[float] = None


@dataclass
class StageConfig:
    """One stage of a multi-stage run: one `trainer.fit` (docs/design.md section 7)."""

    arch: Optional[str] = None  # None: model.arch; e.g. stage 1 of Zhang's two-step is a transformer
    data: dict[str, Any] = field(default_factory=dict)  # overrides of `data.*` for this stage
    optim: dict[str, Any] = field(default_factory=dict)  # overrides of `train.optim.*` for this stage
    model: dict[str, Any] = field(default_factory=dict)  # overrides of `model.*` for this stage (deep-merged)
    trainable: list[str] = field(default_factory=lambda: ["*"])  # parameter-name globs; the rest is frozen
    unfreeze: list[UnfreezeConfig] = field(default_factory=list)  # later unfreezing milestones
    init_from: Optional[str] = None  # a previous stage name or a checkpoint path
    max_steps: int = -1
    max_epochs: Optional[int] = None
    val_every_steps: Optional[int] = None  # None: train.val_every_steps; a short stage validates oftener
    lr: Optional[float] = None  # the stage's lr (shorthand of optim.lr; setting both is an error)
    continue_schedule: bool = False  # continue the lr schedule from init_from's step (reading Z9)


@dataclass
class AverageConfig:
    """Checkpoint averaging at the end of every stage (`callbacks/checkpoint_averaging.py`).

    `checkpoints` > 0 keeps the weights of every validation and, when the stage ends, averages the
    last N (`rule: last`) or the N contiguous ones with the best mean validation score
    (`rule: best_contiguous`, the 10-checkpoint rule of "Diverse Pretrained Context Encodings",
    docs/papers/donato2021.md section 4). The averaged model becomes the stage's final checkpoint.
    """

    checkpoints: int = 0  # N; 0 = off
    rule: str = "best_contiguous"  # best_contiguous | last


@dataclass
class TrainConfig:
    seed: int = 1
    stages: dict[str, StageConfig] = field(default_factory=lambda: {"main": StageConfig()})
    schedule: list[str] = field(default_factory=lambda: ["main"])
    max_steps: int = -1
    max_epochs: Optional[int] = None
    max_time_minutes: Optional[float] = None
    val_every_steps: Optional[int] = None
    # An upper bound on every step count of the run, applied after every layer (the `tiny` profile's:
    # a table's own stage lengths cannot make a test run long): train.max_steps (a run without a step
    # limit gets the cap), each stage's max_steps, the validation intervals, the warm-ups and the
    # unfreezing milestones (config/composition.py). null: no cap.
    step_cap: Optional[int] = None
    checkpoint_every_steps: int = 500  # a resumable `resume.ckpt` every N steps (0: only at validation)
    nonfinite_stop_after: int = 5  # updates in a row with a non-finite gradient that stop a stage
    # (1: the first); fewer are skipped, counted and logged (callbacks/nonfinite_guard.py)
    early_stop_patience: int = 0  # 0: off
    accumulate: int = 1  # batches per update; derived instead when tokens_per_update is set
    tokens_per_update: Optional[int] = None  # a paper's batch per update, in budget tokens (padded
    # source + contexts + target), over every device: accumulate = ceil(it / (world x max_tokens))
    # (training/update_size.py); null: `accumulate` as given
    precision: str = "auto"  # auto: bf16-mixed on CUDA with bf16 support, else 32-true; fast: also
    # bf16-mixed on CPUs with native bf16 (trainer_factory.resolve_precision); or any Lightning value
    optim: OptimConfig = field(default_factory=OptimConfig)
    average: AverageConfig = field(default_factory=AverageConfig)


@dataclass
class DecodeConfig:
    beam: int = 4
    len_penalty: float = 0.6  # GNMT alpha
    max_len_a: float = 1.2  # max target length = a * source length + b
    max_len_b: int = 10
    batch_max_tokens: int = 8192


@dataclass
class EvalConfig:
    tokenize: str = "auto"  # sacreBLEU tokenizer; auto: by target language (data/languages.py)
    lowercase: bool = False  # case-insensitive BLEU (Zhang, Li & Feng)
    valid_bleu: bool = True
    valid_beam: int = 1  # greedy validation BLEU by default (cheap); test uses decode.beam
    contrastive: list[str] = field(default_factory=list)  # contrastive suites evaluated at test
    suites_dir: Optional[str] = None  # holds the published suites' folders (evaluation/named_suites.py)
    context_usage: bool = True  # CXMI and the random-context control on the test split
    # (evaluation/context_usage.py)
    random_context_decodes: bool = True  # with context_usage, the random-context BLEU and its floor:
    # three more beam searches of the test split; false keeps the teacher-forced passes (CXMI and
    # random-context CXMI) only (`docmt demo`, for its budget)
    branch_usage: bool = True  # a model with a parallel attention stack (`model.arch=pas`): its test
    # split scored with every layer on one branch alone, two more beam searches
    # (evaluation/branch_usage.py)


@dataclass
class LoggingConfig:
    wandb: bool = True
    project: str = "lightning_docmt"
    group: Optional[str] = None
    name: Optional[str] = None
    tags: list[str] = field(default_factory=list)
    runs_dir: str = "runs"
    progress_every_steps: int = 100  # a progress line every N updates (0: none; callbacks/progress_line.py)


@dataclass
class RunConfig:
    """The root of every resolved config."""

    profile: Optional[str] = None
    data: DataConfig = field(default_factory=DataConfig)
    vocab: VocabConfig = field(default_factory=VocabConfig)
    context: ContextConfig = field(default_factory=ContextConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    trainer: dict[str, Any] = field(default_factory=dict)  # free dict passed to pl.Trainer


def inert_keys(cfg: Any) -> frozenset[str]:
    """The dotted keys of a resolved run config (a DictConfig or a plain dict) that cannot change
    what the run computes, given the rest of it: `data.max_documents` outside document order.
    Reuse checks and stage keys leave them out, so that a profile may set them for the models
    they concern without orphaning the runs of the others. `context.streams` when it names no
    stream is inert too: runs composed before streams existed then keep their keys."""
    inert = set() if cfg["data"].get("document_order", False) else {"data.max_documents"}
    if not cfg["context"].get("streams"):
        inert.add("context.streams")
    return frozenset(inert)
