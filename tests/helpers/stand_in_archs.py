"""Stand-in architectures for config and table tests: registry entries with config dataclasses only.

The `stand_in_archs` fixture (tests/conftest.py) registers them for one test; the entries are
removed again after it, so the real registry is untouched.
"""

from __future__ import annotations

from dataclasses import dataclass

from lightning_docmt.config.registry import ArchEntry
from lightning_docmt.config.schema import ModelConfig

SENT, CTX = "stand_in_sent", "stand_in_ctx"


@dataclass
class SentConfig(ModelConfig):
    pass


@dataclass
class CtxConfig(ModelConfig):
    context_layers: int = 1
    gating: bool = True


class StandInModel:
    """Never instantiated: composing a config needs only the registry entry."""


ENTRIES = {SENT: ArchEntry(SENT, SentConfig, StandInModel), CTX: ArchEntry(CTX, CtxConfig, StandInModel)}
