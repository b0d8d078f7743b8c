"""The settings of an encoder pretrained in the project (`docmt pretrain FILE`, `lightning_docmt/pretraining/`),
and where it lands.

Donato et al. 2021 read BERT and PEGASUS encoders pretrained elsewhere; no offline package ships
Chinese, multilingual or PEGASUS weights, so they are pretrained here on the Bible's training books
(docs/papers/donato2021.md, readings D20, D21, D23). A pretraining file is a YAML mapping of the
keys of `PretrainConfig`. Its output is a Hugging Face BERT directory (`config.json`,
`model.safetensors`, the WordPiece tokenizer's files) under
`<cache_dir>/pretrained/<objective>-<lang>-<key>/`, where the key hashes every setting that can
change the weights (not `cache_dir`) and `PRETRAIN_FORMAT`: a table names it as
`pretrain:FILE` wherever a checkpoint is named (`config/pretrained_files.pretrained_dir`). Its sizes
come from the file (`config/pretrained_files.encoder_settings`), so a table composes before the
encoder exists; reading its tokenizer or its weights is what needs it pretrained.

Unlike a training stage's key, this key leaves the code's fingerprint out: an encoder costs hours
and is an input of the tables, as a downloaded checkpoint would be, so `PRETRAIN_FORMAT` is raised
by hand whenever a change to the pretraining code changes what it computes. The stages that read
an encoder key on the digest of its weights, so a retrained encoder is never mistaken for the last.

An encoder is looked for in the cache, then in the archive of measured runs
(`experiments/measured/pretrained/<objective>-<lang>-<key>/`, written by `docmt archive FILE`): a
checkout then runs the tables on any machine without pretraining again, bit for bit the encoder the
archived numbers read. The key is in the folder's name, so a pretraining file whose settings changed
never finds an encoder pretrained under the old ones.

Torch-free: composing a config resolves `pretrain:FILE` without loading a model.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from lightning_docmt.config.yaml_file import YamlFile
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.resources import shipped_dir

PRETRAIN_FORMAT = 2  # 2: the training stages' schedule (one update later to 0)
OBJECTIVES = ("mlm", "gap_sentence")
PRECISIONS = ("32", "bf16", "fast")  # fast: bf16 autocast where the CPU computes bf16 natively, else float32
DONE_FILE = "pretraining.json"  # written last: a directory without it is not finished
ARCHIVED_ENCODERS = shipped_dir("experiments") / "measured" / "pretrained"
"""A checkout's archived encoders (`docmt archive FILE`); an installed package has none."""


@dataclass
class PretrainConfig:
    """An encoder pretrained on the Bible's training books (`data/pretraining_text.py`), or on the
    training documents of a synthetic corpus (`corpus`)."""

    objective: str = "mlm"  # mlm: BERT's masked LM on verse pairs | gap_sentence: PEGASUS's, one verse per window
    lang: str = "en"  # the Bible's language (with `corpus`: only a label in the output's name)
    versions: Optional[list[str]] = None  # None: every version of the language
    # `synthetic:NAME?...`: its training documents' `side` instead of the Bible (the learning tests'
    # encoders). Only synthetic corpora: their text is a function of the spec, so this key, which
    # reads no corpus (config is below data), cannot go stale; a file's content could change unseen.
    corpus: Optional[str] = None
    side: str = "source"  # with `corpus`: source | target
    lowercase: bool = False  # the WordPiece tokenizer lower-cases (and strips accents)
    vocab_size: int = 8000
    width: int = 256
    heads: int = 4
    ffn_dim: int = 1024
    layers: int = 4
    decoder_layers: int = 2  # gap_sentence: the decoder that writes the masked verse (dropped after)
    max_tokens: int = 256  # a row's cap (learned positions)
    batch_rows: int = 64
    steps: int = 20000
    lr: float = 5.0e-4  # peak; linear warm-up, then linear decay to 0 at `steps`
    warmup_steps: int = 1000
    dropout: float = 0.1
    held_out: float = 0.02  # share of the chapters held out to measure the encoder (never trained on)
    val_every_steps: int = 1000
    precision: str = "32"  # 32 | bf16 (autocast) | fast (bf16 on a CPU with native bf16, else 32)
    seed: int = 1
    cache_dir: str = ".cache/docmt"


def is_pretraining_file(file: YamlFile) -> bool:
    """Whether a YAML file is a pretraining file (it sets `objective`), not a run or table file."""
    return "objective" in file.data


def load_pretrain_config(path: str | Path) -> PretrainConfig:
    """The settings of pretraining file `path`; a bad key or value is one error naming it."""
    file = YamlFile.load(path)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(PretrainConfig), file.data)
    except OmegaConfBaseException as err:
        dotted = getattr(err, "full_key", None) or ""
        line = file.line_of(dotted.split(".")) if dotted else None
        raise DocMTInputError(str(err).splitlines()[0], path=file.path, line=line, key=dotted or None) from None
    cfg = PretrainConfig(**OmegaConf.to_container(merged, resolve=True))
    checks = {"objective": cfg.objective in OBJECTIVES, "held_out": 0.0 < cfg.held_out < 0.5,
              "precision": cfg.precision in PRECISIONS, "steps": cfg.steps > cfg.warmup_steps >= 0,
              "corpus": cfg.corpus is None or (cfg.corpus.startswith("synthetic:") and cfg.versions is None),
              "side": cfg.side in ("source", "target")}
    checks.update({key: getattr(cfg, key) > 0 for key in ("vocab_size", "width", "heads", "ffn_dim", "layers",
                                                           "max_tokens", "batch_rows", "val_every_steps", "lr")})
    for key, ok in checks.items():
        if not ok:
            raise DocMTInputError(f"invalid value {getattr(cfg, key)!r}", path=file.path, line=file.line_of([key]),
                                  key=key)
    if cfg.width % cfg.heads:
        raise DocMTInputError(f"width {cfg.width} is not a multiple of heads {cfg.heads}", path=file.path,
                              line=file.line_of(["heads"]), key="heads")
    return cfg


def pretrain_key(cfg: PretrainConfig) -> str:
    settings = {k: v for k, v in asdict(cfg).items() if k != "cache_dir"}
    text = json.dumps({"format": PRETRAIN_FORMAT, **settings}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def output_dir(cfg: PretrainConfig) -> Path:
    """Where the pretrained encoder of `cfg` lands."""
    return Path(cfg.cache_dir) / "pretrained" / f"{cfg.objective}-{cfg.lang}-{pretrain_key(cfg)}"


def archived_dir(cfg: PretrainConfig, archive: Path | None = None) -> Path:
    """Where `docmt archive` keeps the pretrained encoder of `cfg`: in the checkout's archive of
    measured runs, or in the archive rooted at `archive` (`docmt archive --to`)."""
    encoders = ARCHIVED_ENCODERS if archive is None else archive / ARCHIVED_ENCODERS.name
    return encoders / output_dir(cfg).name


def finished_output(cfg: PretrainConfig) -> Path | None:
    """The finished encoder of `cfg`: the cache's, else the archived one, else None."""
    return next((d for d in (output_dir(cfg), archived_dir(cfg)) if (d / DONE_FILE).is_file()), None)


def pretrained_output(path: str, key: str) -> Path:
    """The finished output directory of pretraining file `path` (named `pretrain:<path>`); an
    encoder not pretrained yet is an error naming `key` and the command that makes it."""
    cfg = load_pretrain_config(path)
    directory = finished_output(cfg)
    if directory is None:
        raise DocMTInputError(f"the encoder of '{path}' is not pretrained yet ({output_dir(cfg)}): run "
                              f"`docmt pretrain {path}`", key=key)
    return directory
