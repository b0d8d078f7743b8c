"""Stand-in architectures that use the models' training hooks (`nn/model_hooks.py`), for tests.

- `PhasedTransformer` (`PHASED`): the Transformer trained in two optimizer phases that alternate
  every `PHASE_STEPS` updates, phase "a" over `encoder.*`, phase "b" over `decoder.*`; it records
  the phase of every training loss it computes.
- `CarryingTransformer` (`CARRYING`): the Transformer whose encoder output is shifted by a
  projection of the carried state, the mean encoder output of the previous sentence of the same
  document (`RESET` everywhere for a document's first sentence); it records what it received
  and what it handed on, per sentence.

`register(name)` adds one to the registry; the module-scoped `hook_archs` fixture
(tests/conftest.py) adds both for the tests of a module and removes them again. `PhaseRecorder`
records a phased fit update by update.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor, nn

from lightning_docmt.config.registry import ARCHS, ArchEntry
from lightning_docmt.models.transformer import TransformerConfig, TransformerSeq2Seq
from lightning_docmt.nn.model_hooks import CARRY_KEY, LossTerms, OptimizerPhase, OutputLoss
from tests.helpers.stage_fits import weights

PHASED, CARRYING = "phased_stand_in", "carrying_stand_in"
PHASE_STEPS = 2
PHASE_GLOBS = {"a": ("encoder.*",), "b": ("decoder.*",)}
RESET = -3.0  # every value of the carried state of a document's first sentence


@dataclass
class PhasedConfig(TransformerConfig):
    arch: str = PHASED


class PhasedTransformer(TransformerSeq2Seq):
    def __init__(self, cfg: PhasedConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__(cfg, src_vocab_size, tgt_vocab_size)
        self.phases_seen: list[str | None] = []  # the phase of every training loss

    @classmethod
    def optimizer_phases(cls, cfg: Any) -> list[OptimizerPhase]:
        return [OptimizerPhase(name, globs, PHASE_STEPS) for name, globs in PHASE_GLOBS.items()]

    def loss_terms(self, batch: dict[str, Tensor], output_loss: OutputLoss,
                   phase: str | None = None) -> LossTerms:
        if torch.is_grad_enabled():
            self.phases_seen.append(phase)
        return super().loss_terms(batch, output_loss, phase)


@dataclass
class CarryingConfig(TransformerConfig):
    arch: str = CARRYING


@dataclass
class Sentence:
    """One sentence as the carrying stand-in saw it."""

    doc: int
    pos: int
    row: int  # in its batch
    training: bool
    received: Tensor  # (D,) the carried state it was given
    received_requires_grad: bool
    handed_on: Tensor  # (D,) the state it produced for the next sentence


class CarryingTransformer(TransformerSeq2Seq):
    carries_state = True

    def __init__(self, cfg: CarryingConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__(cfg, src_vocab_size, tgt_vocab_size)
        self.carry_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.sentences: list[Sentence] = []

    def initial_carry(self, batch: dict[str, Tensor]) -> Tensor:
        return torch.full((batch["src"].size(0), self.cfg.d_model), RESET)  # (B, D)

    def encode(self, batch: dict[str, Tensor]):
        state = super().encode(batch)
        state.memory = state.memory + self.carry_proj(batch[CARRY_KEY])[:, None]  # (B, S, D)
        return state

    def loss_terms(self, batch: dict[str, Tensor], output_loss: OutputLoss,
                   phase: str | None = None) -> LossTerms:
        state = self.encode(batch)
        real = (~state.memory_pad).unsqueeze(-1).float()  # (B, S, 1)
        handed_on = (state.memory * real).sum(1) / real.sum(1)  # (B, D): mean over real positions
        for row, (doc, pos) in enumerate(zip(batch["doc_index"].tolist(), batch["pos_in_doc"].tolist())):
            self.sentences.append(Sentence(doc, pos, row, self.training, batch[CARRY_KEY][row].clone(),
                                           batch[CARRY_KEY].requires_grad,
                                           handed_on[row].detach().clone()))
        hidden = self.decode_hidden(batch["tgt_in"], state)  # (B, T, D)
        return LossTerms(*output_loss(hidden, batch["tgt_out"]), carry=handed_on)


def phase_of(name: str) -> str | None:
    """The phase of the phased stand-in that trains parameter `name` (None: no phase does)."""
    return next((p for p, globs in PHASE_GLOBS.items() if any(fnmatchcase(name, g) for g in globs)), None)


class PhaseRecorder(pl.Callback):
    """Per update (by global step): the phase, the weights before it, whether no parameter holds a
    gradient then (none left over from an earlier update), the 2-norm of the current phase's
    gradients before and after clipping, and every optimizer's parameter names and lr."""

    def __init__(self) -> None:
        self.steps: dict[int, dict[str, Any]] = {}
        self.end: dict[str, torch.Tensor] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        names = {id(p): n for n, p in pl_module.model.named_parameters()}
        self.steps[trainer.global_step] = {
            "phase": pl_module.phases.current.name, "weights": weights(pl_module.model),
            "no_gradients": all(p.grad is None for p in pl_module.model.parameters()),
            "optimizers": [([names[id(p)] for g in o.param_groups for p in g["params"]],
                            o.param_groups[0]["lr"]) for o in trainer.optimizers]}

    def _phase_grad_norm(self, pl_module) -> float:
        grads = [p.grad for n, p in pl_module.model.named_parameters()
                 if p.grad is not None and phase_of(n) == pl_module.phases.current.name]
        return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))

    def on_after_backward(self, trainer, pl_module) -> None:
        self.steps[trainer.global_step]["norm_before_clip"] = self._phase_grad_norm(pl_module)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.steps[trainer.global_step]["norm_after_clip"] = self._phase_grad_norm(pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        self.end = weights(pl_module.model)


ENTRIES = {PHASED: ArchEntry(PHASED, PhasedConfig, PhasedTransformer),
           CARRYING: ArchEntry(CARRYING, CarryingConfig, CarryingTransformer)}


def register(name: str) -> None:
    """Add a stand-in to the registry of this process (e.g. in a DDP script)."""
    ARCHS[name] = ENTRIES[name]
