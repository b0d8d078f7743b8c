"""A pretrained checkpoint's fingerprint (`config/pretrained_files.fingerprint`): what keys the
stage cache and the WordPiece vocabulary of a run that reads it."""

from __future__ import annotations

import json
import os

from lightning_docmt.config.pretrained_files import fingerprint


def checkpoint(directory, weights: bytes):
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    (directory / "vocab.txt").write_text("[PAD]\n[UNK]\nthe\n")
    (directory / "model.safetensors").write_bytes(weights)
    return directory


def test_weights_of_the_same_size_with_other_values_are_another_checkpoint(tmp_path):
    first = checkpoint(tmp_path / "a", b"\x00" * 4096)
    retrained = checkpoint(tmp_path / "b", b"\x00" * 4095 + b"\x01")
    same = checkpoint(tmp_path / "c", b"\x00" * 4096)
    assert fingerprint(first) != fingerprint(retrained)
    assert fingerprint(first) == fingerprint(same)  # content, not the directory's name
    (same / "vocab.txt").write_text("[PAD]\n[UNK]\nthe\na\n")
    assert fingerprint(first) != fingerprint(same)


def test_weights_rewritten_in_place_change_the_fingerprint(tmp_path):
    """The per-process digest cache is keyed by size and modification time as well as the path."""
    directory = checkpoint(tmp_path / "a", b"\x00" * 4096)
    before = fingerprint(directory)
    weights = directory / "model.safetensors"
    weights.write_bytes(b"\x02" * 4096)
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a later write, same size
    assert fingerprint(directory) != before
