"""A pretrained checkpoint's identity: `fingerprint` (in the composed config) and `weights_digest`
(the contents of its weights, in the stage cache's key)."""

from __future__ import annotations

import json
import os

from omegaconf import OmegaConf

from lightning_docmt.config.pretrained_files import fingerprint, weights_digest
from lightning_docmt.training import stages


def checkpoint(directory, weights: bytes):
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    (directory / "vocab.txt").write_text("[PAD]\n[UNK]\nthe\n")
    (directory / "model.safetensors").write_bytes(weights)
    return directory


def test_weights_of_the_same_size_with_other_values_have_another_digest(tmp_path):
    first = checkpoint(tmp_path / "a", b"\x00" * 4096)
    retrained = checkpoint(tmp_path / "b", b"\x00" * 4095 + b"\x01")
    same = checkpoint(tmp_path / "c", b"\x00" * 4096)
    assert weights_digest(first) != weights_digest(retrained)
    assert fingerprint(first) == fingerprint(retrained)  # the config's fingerprint reads names and sizes only
    assert weights_digest(first) == weights_digest(same)  # content, not the directory's name


def test_weights_rewritten_in_place_change_the_digest(tmp_path):
    """The per-process digest cache is keyed by size and modification time as well as the path."""
    directory = checkpoint(tmp_path / "a", b"\x00" * 4096)
    before = weights_digest(directory)
    weights = directory / "model.safetensors"
    weights.write_bytes(b"\x02" * 4096)
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a later write, same size
    assert weights_digest(directory) != before


def test_a_stage_over_a_retrained_encoder_of_the_same_size_is_another_stage(tmp_path, monkeypatch):
    directory = checkpoint(tmp_path / "a", b"\x00" * 4096)
    cfg = OmegaConf.create({"model": {"pretrained_encoder": str(directory)}})
    before = stages.pretrained_weights(cfg)
    (directory / "model.safetensors").write_bytes(b"\x03" * 4096)
    stat = (directory / "model.safetensors").stat()
    os.utime(directory / "model.safetensors", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert stages.pretrained_weights(cfg) != before
    assert stages.pretrained_weights(OmegaConf.create({"model": {"pretrained_encoder": None}})) == ""
