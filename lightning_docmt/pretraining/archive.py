"""`docmt archive FILE` for a pretraining file: its finished encoder is copied into the archive of
measured runs (`<archive>/pretrained/<objective>-<lang>-<key>/`), where a checkout's tables find it
when the cache lacks it (`config/pretraining.finished_output`). Pretraining takes hours; a table
run on another machine then reads, bit for bit, the encoder the archived numbers read.

The copy is written beside its place and renamed into it, so an interrupted archive leaves the
previous one or none, never half an encoder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from lightning_docmt.config.pretraining import DONE_FILE, PretrainConfig, archived_dir, output_dir
from lightning_docmt.errors import DocMTInputError


def archive_encoder(cfg: PretrainConfig, archive: Path, file: str) -> Path:
    """Copy the encoder pretrained by pretraining file `file` (settings `cfg`) from the cache into
    `archive`; returns the archived directory."""
    source = output_dir(cfg)
    if not (source / DONE_FILE).is_file():
        raise DocMTInputError(f"no finished encoder of it in the cache ({source}): run `docmt pretrain {file}` first",
                              path=file)
    target = archived_dir(cfg, archive)
    partial = target.parent / f".{target.name}.tmp"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source, partial)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target
