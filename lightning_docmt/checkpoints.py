"""Reading and writing lightning_docmt checkpoints, in one place for training and inference.

What a checkpoint carries besides the weights: `DocMTModule.on_save_checkpoint` packs the
vocabularies into every checkpoint (`VOCAB_KEY`), so that `docmt translate` / `docmt contrastive`
need nothing but the checkpoint file; the resolved config travels as Lightning's
`hyper_parameters` (plain dicts, lists, strings and numbers).

Loading never executes code: `read_checkpoint` unpickles with `weights_only=True`, which admits
only tensors and plain containers and refuses any other object (a tampered file that would run
code on load is one error line, before anything from it is used). Everything our checkpoints hold
is of those types, so no class needs allow-listing. `load_state` puts weights into a model
strictly: every key and shape must match, so a mismatched checkpoint is an error, never a model
with some parameters left at their random initialisation.
"""

from __future__ import annotations

import io
import pickle
import re
import tempfile
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from lightning_docmt.atomic_files import write_atomically
from lightning_docmt.data.vocab import Vocabulary, load_vocabularies
from lightning_docmt.errors import DocMTInputError

MAX_KEYS_SHOWN = 3  # offending keys named in a mismatch error
EXPORT_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# What an exported checkpoint keeps: what `load_checkpoint` and a stage's `init_from` read.
EXPORTED_KEYS = ("hyper_parameters", "global_step", "epoch")
UNSAFE_GLOBAL = re.compile(r"Unsupported global: GLOBAL (\S+)")  # torch's weights_only refusal


def read_checkpoint(path: str | Path, *, mmap: bool = False) -> dict[str, Any]:
    """The checkpoint dict in `path`, loaded without executing code; bad files are `DocMTInputError`."""
    path = Path(path)
    if not path.is_file():
        raise DocMTInputError("no such checkpoint", path=path)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        refused = UNSAFE_GLOBAL.search(str(err))
        if refused is None:  # the restricted unpickler met bytes that are no pickle at all
            raise DocMTInputError("not a checkpoint (unreadable pickle)", path=path) from None
        raise DocMTInputError(f"refused: the file would call {refused.group(1)} when loaded (only "
                              f"tensors and plain data are read)", path=path) from None
    except Exception as err:  # a truncated archive, random bytes: not a checkpoint
        raise DocMTInputError(f"not a checkpoint ({type(err).__name__})", path=path) from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise DocMTInputError("not a Lightning checkpoint (no state_dict)", path=path)
    return checkpoint


def load_state(module: nn.Module, state: dict[str, torch.Tensor], path: str | Path, *,
               allow_missing: bool = False, key: str | None = None) -> list[str]:
    """Load `state` into `module`: every key of `state` must exist in `module` with the same shape,
    and every key of `module` must be in `state` unless `allow_missing` (a stage initialised from
    an earlier stage's checkpoint gets new parameters, e.g. Zhang et al.'s theta_d). Returns the
    missing keys; any mismatch is one `DocMTInputError` naming the file and the first keys."""
    missing = check_state(module.state_dict(), state, path, allow_missing=allow_missing, key=key)
    module.load_state_dict(state, strict=not allow_missing)
    return missing


def check_state(own: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor], path: str | Path, *,
                allow_missing: bool = False, key: str | None = None) -> list[str]:
    """`load_state`'s checks of `state` against a module's state dict `own` (which may live on the
    meta device: only names and shapes are read), loading nothing; returns the missing keys."""
    problems = []
    unexpected = [k for k in state if k not in own]
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected keys ({', '.join(unexpected[:MAX_KEYS_SHOWN])})")
    mismatched = [f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}"
                  for k in state if k in own and state[k].shape != own[k].shape]
    if mismatched:
        problems.append(f"{len(mismatched)} shape mismatches ({', '.join(mismatched[:MAX_KEYS_SHOWN])})")
    missing = [k for k in own if k not in state]
    if missing and not allow_missing:
        problems.append(f"{len(missing)} missing keys ({', '.join(missing[:MAX_KEYS_SHOWN])})")
    if problems:
        raise DocMTInputError(f"checkpoint does not fit the configured model: {'; '.join(problems)}",
                              path=path, key=key)
    return missing

VOCAB_KEY = "docmt_vocab"


def pack_vocabularies(src: Vocabulary, tgt: Vocabulary) -> dict[str, bytes]:
    """The files of `load_vocabularies`' directory layout, as {relative path: bytes}."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if src is tgt:
            src.save(root / "joint")
        else:
            src.save(root / "src")
            tgt.save(root / "tgt")
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def unpack_vocabularies(packed: dict[str, bytes]) -> tuple[Vocabulary, Vocabulary]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel, blob in packed.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(blob)
        return load_vocabularies(root)


def save_atomically(obj: Any, path: Path) -> None:
    """`torch.save` through a temporary file of this process beside `path`, renamed over it: `path`
    appears complete or not at all (a kill or a full disk mid-write leaves the previous file as it
    was), also when two processes write it at once (locks.py: an owner presumed dead may still
    publish). Serialised in memory first, so that a failed write is Python's `OSError` (ENOSPC
    for a full disk) rather than torch's writer error; the temporary file never outlives a failure."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    write_atomically(path, lambda tmp: write_bytes(tmp, buffer.getbuffer()))


def write_bytes(path: Path, data: memoryview) -> None:
    """Write `data` to `path` (the one place checkpoints meet the disk)."""
    with open(path, "wb") as f:
        f.write(data)


def export_weights(path: str | Path, out: Path, dtype: str = "float32") -> dict[str, Any]:
    """A checkpoint to ship (`docmt export`): the weights, their floating tensors cast to `dtype`
    (bfloat16 or float16 halve the file), the config, the vocabularies and the step; no optimizer,
    scheduler, callback or loop state, which only a resumed fit needs. `translate`, `contrastive`
    and a stage's `init_from` read it like any checkpoint (a stage casts it back to its own precision)."""
    checkpoint = read_checkpoint(path)
    if VOCAB_KEY not in checkpoint or "hyper_parameters" not in checkpoint:
        raise DocMTInputError("not a lightning_docmt checkpoint (no config or vocabulary inside)", path=path)
    cast = EXPORT_DTYPES[dtype]
    exported = {key: checkpoint[key] for key in (*EXPORTED_KEYS, VOCAB_KEY) if key in checkpoint}
    exported["state_dict"] = {name: tensor.to(cast) if tensor.is_floating_point() else tensor
                              for name, tensor in checkpoint["state_dict"].items()}
    exported.update(exported_from=Path(path).name, exported_dtype=dtype)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_atomically(exported, out)
    return {"out": str(out), "bytes": out.stat().st_size, "tensors": len(exported["state_dict"]), "dtype": dtype}

