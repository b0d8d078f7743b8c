"""Stand-in architectures for config and table tests: registry entries with config dataclasses only.

Import the fixture into a test module (`from tests.helpers.stand_in_archs import stand_in_archs`); the
entries are removed again after each test, so the real registry is untouched.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from lightning_docmt.registry import ARCHS, ArchEntry
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


@pytest.fixture
def stand_in_archs(monkeypatch: pytest.MonkeyPatch) -> dict[str, ArchEntry]:
    entries = {SENT: ArchEntry(SENT, SentConfig, StandInModel),
               CTX: ArchEntry(CTX, CtxConfig, StandInModel)}
    for name, entry in entries.items():
        monkeypatch.setitem(ARCHS, name, entry)
    return entries
