"""`DocMTModule`: the one LightningModule that drives every architecture (docs/design.md section 7).

An architecture file registers its `Seq2SeqModel` (the interface of `nn/seq2seq.py`, plain
PyTorch) with its config dataclass (`config/registry.register_arch`); `DocMTModule` builds it from
`model.arch` and owns everything Lightning does with it.

The shared recipe: label-smoothed cross entropy, Adam with the schedules of `schedules.py`
(continuable across stages), the training throughput of `speed.py` (stored with every
checkpoint), and one `EvaluationLoop` per validation or test loop (`evaluation_loop.py`: loss and
BLEU over the *whole* split with every rank's hypotheses gathered, the test metrics, the test
decoding speed). The states summed over batches and ranks are torchmetrics metrics (`metrics.py`),
attributes of the module: `eval_metrics`, emptied by each evaluation loop, and `train_tokens`, the
target tokens of the fit, which no validation resets.

Loss normalisation (`scaled_loss`, `normalise_gradients`): an update's gradient is that of the loss
summed over every rank and every accumulated batch, divided by all their target tokens together, as
fairseq does: the per-token loss of the union of the update's batches, whatever the world size and
the accumulation (`update_size.py`).

The model's training hooks (`nn/model_hooks.py`, the Lightning side here and in `optimizer_phases.py`):
- `loss_terms`: the loss of a batch, in the current optimizer phase during training.
- `optimizer_phases`: the module switches to manual optimisation with one optimizer per phase; each
  training step backpropagates, clips (`train.optim.clip_norm`), steps the current phase's
  optimizer and its scheduler, and discards every gradient (`phase_update`). The phase state
  travels in checkpoints.
- `carries_state`: a `CarriedState` (`nn/carried_state.py`) passes each training sentence's state
  to the next sentence of its document; it travels in checkpoints, per rank. Evaluation loops walk
  their split with `inference/document_order.DocumentOrderWalk`, as `docmt translate` does: when a
  loop decodes, the next sentence reads what was output (its own `ctx_tgt`, the `output_carry` of
  the 1-best hypotheses), so a document is translated from its own outputs; a loss-only validation
  hands on the teacher-forced state.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable, Iterable

import lightning.pytorch as pl
import torch
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_warn
from omegaconf import DictConfig, OmegaConf

from lightning_docmt.checkpoints import VOCAB_KEY, pack_vocabularies
from lightning_docmt.config.registry import build_model
from lightning_docmt.distributed import gather_objects, note_local_ranks
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.inference.own_outputs import OutputTokens
from lightning_docmt.nn.carried_state import CarriedState
from lightning_docmt.nn.frozen import unfrozen_modules_in_eval
from lightning_docmt.nn.model_hooks import LossTerms
from lightning_docmt.nn.output_loss import output_loss_of
from lightning_docmt.nn.seq2seq import Seq2SeqModel
from lightning_docmt.schedules import lr_lambda
from lightning_docmt.training.evaluation_loop import EvaluationLoop
from lightning_docmt.training.metrics import EvaluationMetrics, Sums
from lightning_docmt.training.optimizer_phases import (
    PhaseCycle,
    check_training_hooks,
    model_phases,
    phase_parameter_names,
)
from lightning_docmt.training.speed import TRAIN_SPEED_KEY, Stopwatch

PHASES_KEY = "docmt_optimizer_phases"  # checkpoint key of the PhaseCycle state
CARRY_STATE_KEY = "docmt_carried_state"  # checkpoint key of the training CarriedState, one per rank


RNG_KEY = "docmt_rng"  # the random states in a checkpoint (torch CPU and CUDA, python)


class DocMTModule(pl.LightningModule):
    """Training and evaluation of the registered model named by `config["model"]["arch"]`."""

    def __init__(self, config: dict[str, Any], src_vocab_size: int, tgt_vocab_size: int,
                 step_offset: int = 0, lr_override: float | None = None):
        super().__init__()
        self.save_hyperparameters()
        self.cfg: DictConfig = OmegaConf.create(config)
        self.model = self.build_model(self.cfg.model, src_vocab_size, tgt_vocab_size)
        phases = model_phases(self.cfg.model)
        check_training_hooks(type(self.model), phases, self.cfg)
        self.phases = PhaseCycle(phases) if phases else None
        self.automatic_optimization = self.phases is None
        self._train_carry = CarriedState() if type(self.model).carries_state else None
        self.step_offset = step_offset
        self.lr_override = lr_override
        # (params, lr) of the optimizer groups split off from group 0 (see `add_param_group`)
        self.extra_param_groups: list[tuple[list[torch.nn.Parameter], float]] = []
        # (params, lr) of a group at its own lr for the whole stage, set before the fit (the
        # pretrained encoder's tensors: `training/run.pretrained_lr_group`, reading F15)
        self.own_lr_group: tuple[list[torch.nn.Parameter], float] | None = None
        self.output_dir: Path | None = None  # where test hypotheses and signatures are written
        self._train_clock = Stopwatch()  # training time of this fit, validation left out
        self.train_tokens = Sums("tokens", dtype=torch.long)  # the fit's trained target tokens
        self.eval_metrics = EvaluationMetrics()  # of the current (or last) evaluation loop
        self._update_tokens: torch.Tensor | int = 0  # this rank's target tokens of the current update
        self._eval: EvaluationLoop | None = None  # the current (or last) validation or test loop

    @staticmethod
    def build_model(model_cfg: DictConfig, src_vocab_size: int, tgt_vocab_size: int) -> Seq2SeqModel:
        """The registered model of `model_cfg.arch`, built from its typed config dataclass.

        Its `output` must be bias-free: the training loss is fused with the output weight
        (`nn/output_loss.py`), which has no term for a bias.
        """
        model = build_model(model_cfg, src_vocab_size, tgt_vocab_size)
        if model.output.bias is not None:
            raise TypeError(f"{type(model).__name__}.output has a bias: the fused training loss "
                            f"(nn/output_loss.py) needs a bias-free output projection")
        return model

    # ------------------------------------------------------------------ training
    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(batch)

    def output_loss(self, hidden: torch.Tensor, target: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The `OutputLoss` handed to the model: label smoothing `train.optim.label_smoothing`,
        computed together with the output projection (`nn/output_loss.py`)."""
        return output_loss_of(self.model, self.cfg.train.optim.label_smoothing)(hidden, target)

    def loss_terms(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(label-smoothed loss sum, NLL sum, target tokens) of a batch (teacher forcing), outside
        any optimizer phase; a model with `carries_state` reads its state from `batch[CARRY_KEY]`."""
        terms = self.batch_terms(batch, carried=None)
        return terms.loss_sum, terms.nll_sum, terms.tokens

    def batch_terms(self, batch: dict[str, torch.Tensor], carried: CarriedState | None,
                    phase: str | None = None) -> LossTerms:
        """The model's loss terms of `batch` in `phase`; with `carried` (a carrying model), the batch
        gets the carried rows and `carried` keeps the rows the model hands to the next sentences."""
        if carried is not None:
            batch = carried.attach(batch, self.model)
        terms = self.model.loss_terms(batch, self.output_loss, phase)
        if carried is not None:
            carried.keep(batch, terms.carry)
        return terms

    def scaled_loss(self, terms: LossTerms) -> torch.Tensor:
        """The loss to backpropagate for one batch: this rank's loss sum over `data.max_tokens`.

        The exact per-token normalisation needs the target tokens of the whole update (every rank,
        every accumulated batch), known only after the last backward pass: `normalise_gradients`
        applies it then. The constant here only keeps the loss at the magnitude of a per-token
        loss (a loss sum in the tens of thousands would overflow fp16 gradient scaling).
        """
        self._update_tokens = self._update_tokens + terms.tokens.detach()
        return terms.loss_sum / self.cfg.data.max_tokens

    def normalise_gradients(self, parameters: Iterable[torch.nn.Parameter], divisor: int) -> None:
        """Make the accumulated gradients those of the per-token loss of the update.

        They are now (1 / (W * divisor * M)) * sum over ranks and batches of the gradient of the
        loss sum: `scaled_loss` divided by M = `data.max_tokens`, Lightning's accumulation by
        `divisor` (`accumulate_grad_batches`; 1 in manual optimisation), DDP's averaging by the
        world size W. Multiplying by W * divisor * M / T, T the update's target tokens summed over
        every rank (all-reduced), gives the gradient of the summed loss over T: the per-token loss
        of the union of the update's batches. Dividing by each batch's own tokens instead would
        weigh a token of a short batch (or rank) more than one of a long one.
        """
        tokens = self._update_tokens.to(torch.float32, copy=True)  # a copy: all_reduce is in place
        self._update_tokens = torch.zeros((), dtype=torch.long, device=tokens.device)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(tokens)  # the world group, that DDP averages over
        factor = self.trainer.world_size * divisor * self.cfg.data.max_tokens / tokens.clamp(min=1)
        for p in parameters:
            if p.grad is not None:
                p.grad.mul_(factor.to(p.grad.dtype))
        self.log("train/update_tokens", tokens, batch_size=1)  # every rank's, after the all-reduce

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Automatic optimisation: normalise once the update's batches are all backpropagated and
        DDP has averaged them, after the callbacks' hooks (StagedUnfreezing averages the gradients
        of parameters unfrozen after the DDP wrap there), before Lightning clips."""
        if self.automatic_optimization:
            self.normalise_gradients((p for group in optimizer.param_groups for p in group["params"]),
                                     self.trainer.accumulate_grad_batches)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor | None:
        phase = self.phases.current.name if self.phases is not None else None
        terms = self.batch_terms(batch, self._train_carry, phase)
        ntok_f = terms.tokens.clamp(min=1).float()
        bsz = int(batch["src"].size(0))
        self.log("train/loss", terms.loss_sum / ntok_f, prog_bar=True, batch_size=bsz)  # this rank's
        self.log("train/nll", terms.nll_sum / ntok_f, batch_size=bsz)
        self.log("train/tokens", ntok_f, reduce_fx="sum", batch_size=bsz)
        prefix = "train" if phase is None else f"train/{phase}"
        for name, value in (terms.stats or {}).items():
            self.log(f"{prefix}/{name}", value.detach().float(), batch_size=bsz)
        self.train_tokens.update(tokens=terms.tokens.detach())  # no host sync per step
        loss = self.scaled_loss(terms)
        if self.phases is None:
            return loss  # automatic optimisation
        self.phase_update(loss)
        return None

    def phase_update(self, loss: torch.Tensor) -> None:
        """One update of the current phase (manual optimisation): backward, per-token normalisation
        (`normalise_gradients`), clipping by
        `train.optim.clip_norm` over the phase's parameters (as Lightning's `gradient_clip_val`
        does over an optimizer's), the phase's optimizer step, every optimizer's gradients
        discarded (those of the other phases' parameters too, so that nothing carries over into
        their turn), the phase's scheduler step."""
        index = self.phases.index
        optimizers, schedulers = self.optimizers(), self.lr_schedulers()
        self.manual_backward(loss)
        self.normalise_gradients(self.model.parameters(), divisor=1)
        clip = self.cfg.train.optim.clip_norm
        if clip > 0:
            self.clip_gradients(optimizers[index], gradient_clip_val=clip,
                                gradient_clip_algorithm="norm")
        optimizers[index].step()
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        schedulers[index].step()
        self.phases.advance()

    # The training clock runs from the start to the end of the training loop, stopped during
    # validation (which runs inside it); sanity checking happens before it starts.
    def on_train_start(self) -> None:
        self._train_clock.start()
        left_in_eval = unfrozen_modules_in_eval(self.model)
        if left_in_eval:  # Lightning's own warning counts the frozen encoders too (logs.EVAL_MODE_WARNING)
            rank_zero_warn(f"{len(left_in_eval)} module(s) of the model in eval mode at the start of training "
                           f"that no Frozen wrapper holds (their dropout is off): {', '.join(left_in_eval[:5])}")
        if self.trainer.world_size > 1:  # the ranks Lightning started here, to name one that dies
            note_local_ranks()

    def on_train_end(self) -> None:
        self._train_clock.stop()

    def on_validation_start(self) -> None:
        self._train_clock.stop()

    def on_validation_end(self) -> None:
        if self.trainer.state.fn == TrainerFn.FITTING and not self.trainer.sanity_checking:
            self._train_clock.start()

    @property
    def stage_lr(self) -> float:
        """The stage's lr, in the units of `train.optim.lr` (`train.stages.<name>.lr` overrides it)."""
        return self.lr_override if self.lr_override is not None else self.cfg.train.optim.lr

    def lr_multiplier(self, lr: float, stage_steps: int | None = None) -> Callable[[int], float]:
        """The LambdaLR multiplier of a group trained at `lr` on the stage's schedule, over
        `stage_steps` updates of its optimizer (default: the stage's `max_steps`)."""
        optim_cfg = self.cfg.train.optim
        return lr_lambda(schedule=optim_cfg.schedule, lr=lr, warmup=optim_cfg.warmup_steps,
                         d_model=self.cfg.model.d_model, step_offset=self.step_offset,
                         stage_steps=self.trainer.max_steps if stage_steps is None else stage_steps)

    def build_optimizer(self, groups: list[tuple[list[torch.nn.Parameter], float]], stage_steps: int | None = None
                        ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
        """The `train.optim.optimizer` (Adam, or AdaGrad for Yamagishi & Komachi's RNN) over the
        (params, lr) `groups`, base lr 1.0, with one LambdaLR multiplier per group.

        Both update every parameter of a group at once (PyTorch's multi-tensor `foreach` kernels,
        its default on a GPU): on a CPU PyTorch would loop over the parameters one at a time, the same
        numbers bit for bit (tests/training/test_optimizer.py) at a cost per step that tiny models
        feel (an optimizer step a third shorter for the learning tests' 73 tensors)."""
        optim_cfg = self.cfg.train.optim
        params = [{"params": p} for p, _ in groups]
        if optim_cfg.optimizer == "adagrad":
            optimizer = torch.optim.Adagrad(params, lr=1.0, eps=optim_cfg.eps,
                                            weight_decay=optim_cfg.weight_decay, foreach=True)
        else:
            optimizer = torch.optim.Adam(params, lr=1.0, betas=tuple(optim_cfg.betas), eps=optim_cfg.eps,
                                         weight_decay=optim_cfg.weight_decay, foreach=True)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, [self.lr_multiplier(lr, stage_steps) for _, lr in groups])
        return optimizer, scheduler

    def configure_optimizers(self):
        """The optimizer (`build_optimizer`) over the trainable parameters only (frozen ones stay out).

        Without optimizer phases: one optimizer. Group 0 holds every trainable parameter at the stage's
        lr; then `own_lr_group` when set (trainable parameters at an lr of their own for the whole
        stage); then each group split off by `add_param_group` (a milestone of `StagedUnfreezing`),
        with its own lr.
        With phases: one optimizer per phase over its trainable parameters (`phase_parameter_names`),
        at the stage's lr times the phase's `lr_scale`. A phase's schedule counts the phase's own
        updates, so that each optimizer warms up over its first updates, and a decaying schedule ends
        at the phase's last update of the stage (its share of `max_steps`).
        """
        if self.phases is not None:
            named = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
            per_phase = phase_parameter_names(self.phases.phases, list(named), key="model.arch")
            built = [self.build_optimizer([([named[n] for n in names], self.stage_lr * phase.lr_scale)],
                               self.phases.updates_within(index, self.trainer.max_steps))
                     for index, (phase, names) in enumerate(zip(self.phases.phases, per_phase))]
            return ([optimizer for optimizer, _ in built],
                    [{"scheduler": scheduler, "interval": "step"} for _, scheduler in built])
        own = [self.own_lr_group] if self.own_lr_group is not None else []
        split = {id(p) for params, _ in [*own, *self.extra_param_groups] for p in params}
        base = [p for p in self.parameters() if p.requires_grad and id(p) not in split]  # frozen params stay out
        optimizer, scheduler = self.build_optimizer([(base, self.stage_lr), *own, *self.extra_param_groups])
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def add_param_group(self, params: list[torch.nn.Parameter], lr: float) -> None:
        """Train `params` (just made trainable) as an optimizer group of their own at `lr`.

        Before `configure_optimizers` runs the group is only recorded. During a fit it also joins the
        live optimizer, and the LambdaLR gets its multiplier evaluated at the scheduler's current step:
        the group then has the lr that `configure_optimizers` gives it when the fit is resumed.
        A model with optimizer phases has no such groups (`check_training_hooks`).
        """
        if self.phases is not None:
            raise DocMTInputError("unfreezing milestones do not combine with the optimizer phases of "
                                  f"model.arch '{self.cfg.model.arch}'", key="train.stages")
        self.extra_param_groups.append((params, lr))
        if self._trainer is None or not self.trainer.optimizers:
            return
        optimizer = self.trainer.optimizers[0]
        scheduler = self.trainer.lr_scheduler_configs[0].scheduler
        multiplier = self.lr_multiplier(lr)
        current = multiplier(scheduler.last_epoch)  # base lr 1.0, as for every group
        optimizer.add_param_group({"params": params, "lr": current, "initial_lr": 1.0})
        scheduler.base_lrs.append(1.0)
        scheduler.lr_lambdas.append(multiplier)
        scheduler._last_lr.append(current)  # what get_last_lr() reports until the next step

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Checkpoints are self-contained: the vocabularies travel with the weights. The phase
        state and every rank's carried training state go with them, for an exact resume."""
        datamodule = self.trainer.datamodule
        checkpoint[VOCAB_KEY] = pack_vocabularies(datamodule.src_vocab, datamodule.tgt_vocab)
        # Every rank writes its checkpoint dict (only rank zero saves it), so the collectives are safe.
        checkpoint[TRAIN_SPEED_KEY] = {"target_tokens": int(self.train_tokens.compute()["tokens"]),
                                       "seconds": self._train_clock.seconds}
        checkpoint[RNG_KEY] = {"torch": torch.get_rng_state(), "python": random.getstate(),
                               "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}
        if self.phases is not None:
            checkpoint[PHASES_KEY] = self.phases.state_dict()
        if self._train_carry is not None:
            checkpoint[CARRY_STATE_KEY] = gather_objects(self._train_carry.state_dict())

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Resume: the random streams (dropout) where the checkpoint left them, so that the fit ends
        with the weights of an uninterrupted one (Lightning does not restore them itself); the phase
        state; and this rank's carried training state (kept only when the world size is the one it
        was saved with; otherwise the batches differ and it starts over)."""
        rng = checkpoint.get(RNG_KEY)
        if rng is not None:  # absent from checkpoints written before random states were stored
            torch.set_rng_state(rng["torch"])
            random.setstate(rng["python"])
            if rng["cuda"] and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(rng["cuda"])
        if self.phases is not None:
            self.phases.load_state_dict(checkpoint[PHASES_KEY])
        if self._train_carry is not None:
            states = checkpoint[CARRY_STATE_KEY]
            self._train_carry.clear()
            if len(states) == self.trainer.world_size:
                self._train_carry.load_state_dict(states[self.global_rank])

    # ------------------------------------------------------------------ evaluation
    def on_validation_epoch_start(self) -> None:
        self._reset_eval("valid")

    def on_test_epoch_start(self) -> None:
        self._reset_eval("test")

    def _reset_eval(self, split: str) -> None:
        self._eval = EvaluationLoop(self.model, self.cfg, self.trainer.datamodule, split, self.eval_metrics)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        beam = self.cfg.eval.valid_beam if self.cfg.eval.valid_bleu else 0
        self._eval.step(batch, beam, self.output_loss)

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._eval.step(batch, self.cfg.decode.beam, self.output_loss)

    def own_translations(self) -> OutputTokens | None:
        """The model's own translations of the split its last evaluation loop decoded, every rank's
        (a collective under DDP: call it on every rank), for a model with target-side context
        (`reads_reference_target`); None for the others."""
        return self._eval.own_translations()

    def on_validation_epoch_end(self) -> None:
        self._log_scores(self._eval.scores("val", self.cfg.eval.valid_bleu and not self.trainer.sanity_checking,
                                           self.trainer.strategy, self.output_dir))

    def on_test_epoch_end(self) -> None:
        self._log_scores(self._eval.scores("test", True, self.trainer.strategy, self.output_dir))

    def _log_scores(self, scores: dict[str, float]) -> None:
        for key, value in scores.items():
            self.log(key, value, prog_bar=key.endswith(("bleu", "loss")), rank_zero_only=False,
                     sync_dist=False)
