"""What a lightning_docmt checkpoint carries besides the weights, in one place for training and inference.

`DocMTModule.on_save_checkpoint` packs the vocabularies into every checkpoint (`VOCAB_KEY`), so that
`docmt translate` / `docmt contrastive` need nothing but the checkpoint file; the resolved config
travels as Lightning's `hyper_parameters`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from lightning_docmt.data.vocab import Vocabulary, load_vocabularies

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
