"""`DocMTModule`: the one LightningModule that drives every architecture (docs/design.md section 7).

An architecture file registers its `Seq2SeqModel` (the interface of `nn/seq2seq.py`, plain
PyTorch) with its config dataclass (`registry.register_arch`); `DocMTModule` builds it from
`model.arch` and owns everything Lightning does with it.

The shared recipe: label-smoothed cross entropy, Adam with the schedules of `schedules.py`
(continuable across stages), validation loss and BLEU over the *whole* validation set with
hypotheses gathered from every rank before scoring (per-rank BLEU averaged is not corpus BLEU,
DESIGN.md section 12), test metrics (BLEU with its sacreBLEU signature, chrF, document BLEU), and
the speed figures of `speed.py` (training throughput stored with every checkpoint, test decoding
speed).
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import Any, Callable

import lightning.pytorch as pl
import torch
from lightning.pytorch.trainer.states import TrainerFn
from omegaconf import DictConfig, OmegaConf

from lightning_docmt.inference import decoding

from lightning_docmt.evaluation import metrics
from lightning_docmt.data.batch import PAD_ID
from lightning_docmt.training.output_loss import output_label_smoothed_nll
from lightning_docmt.checkpoints import VOCAB_KEY, pack_vocabularies
from lightning_docmt.nn.seq2seq import Seq2SeqModel
from lightning_docmt.registry import get_arch
from lightning_docmt.training.schedules import lr_lambda
from lightning_docmt.training.speed import DECODE_SPEED_METRIC, TRAIN_SPEED_KEY, Stopwatch, rate


RNG_KEY = "docmt_rng"  # the random states in a checkpoint (torch CPU and CUDA, python)


class DocMTModule(pl.LightningModule):
    """Training and evaluation of the registered model named by `config["model"]["arch"]`."""

    def __init__(self, config: dict[str, Any], src_vocab_size: int, tgt_vocab_size: int,
                 step_offset: int = 0, lr_override: float | None = None):
        super().__init__()
        self.save_hyperparameters()
        self.cfg: DictConfig = OmegaConf.create(config)
        self.model = self.build_model(self.cfg.model, src_vocab_size, tgt_vocab_size)
        self.step_offset = step_offset
        self.lr_override = lr_override
        # (params, lr) of the optimizer groups split off from group 0 (see `add_param_group`)
        self.extra_param_groups: list[tuple[list[torch.nn.Parameter], float]] = []
        self.output_dir: Path | None = None  # where test hypotheses and signatures are written
        self._eval_records: list[tuple[int, int, str]] = []  # (sent_index, doc_index, hypothesis)
        self._eval_sums = torch.zeros(3)  # loss sum, nll sum, target tokens
        self._train_clock = Stopwatch()  # training time of this fit, validation left out
        self._train_tokens: torch.Tensor | int = 0  # this rank's trained target tokens (on device)
        self._decode_stats = torch.zeros(2, dtype=torch.float64)  # beam-search seconds, sentences

    @staticmethod
    def build_model(model_cfg: DictConfig, src_vocab_size: int, tgt_vocab_size: int) -> Seq2SeqModel:
        """The registered model of `model_cfg.arch`, built from its typed config dataclass."""
        entry = get_arch(model_cfg.arch)
        typed = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(entry.config_class), model_cfg))
        model = entry.model_class(typed, src_vocab_size, tgt_vocab_size)
        if model.output.bias is not None:  # the fused output loss (`output_loss.py`) has no bias term
            raise TypeError(f"{entry.model_class.__name__}.output has a bias; the output projection "
                            f"must be bias-free (nn.Linear(..., bias=False))")
        return model

    # ------------------------------------------------------------------ training
    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(batch)

    def loss_terms(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(label-smoothed loss sum, NLL sum, target tokens) of a batch (teacher forcing).

        The loss is computed together with the output projection (`output_loss.py`).
        """
        hidden = self.model.decode_hidden(batch["tgt_in"], self.model.encode(batch))  # (B, T, D)
        return output_label_smoothed_nll(hidden, self.model.output.weight, batch["tgt_out"],
                                         self.cfg.train.optim.label_smoothing, PAD_ID)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss_sum, nll_sum, ntok = self.loss_terms(batch)
        ntok_f = ntok.clamp(min=1).float()
        bsz = int(batch["src"].size(0))
        self.log("train/loss", loss_sum.detach() / ntok_f, prog_bar=True, batch_size=bsz)
        self.log("train/nll", nll_sum / ntok_f, batch_size=bsz)
        self.log("train/tokens", ntok_f, reduce_fx="sum", batch_size=bsz)
        self._train_tokens = self._train_tokens + ntok.detach()  # no host sync per step
        return self.normalised_loss(loss_sum, ntok)

    def normalised_loss(self, loss_sum: torch.Tensor, ntok: torch.Tensor) -> torch.Tensor:
        """The loss whose gradient is the per-token gradient over the whole step, on every rank.

        fairseq's normalisation: the summed loss over the number of target tokens of the step on
        ALL ranks. DDP averages gradients over the W ranks, so each rank returns
        W * loss_sum / global_tokens; the average is then sum_r loss_sum_r / global_tokens, the
        gradient of the union batch. Dividing by a rank's own count instead would weight a token on
        a rank with few tokens more than one on a rank with many. With gradient accumulation each
        micro-batch is normalised by its own step-wide count and Lightning averages the micro-batches.
        """
        world = self.trainer.world_size
        global_tokens = self.trainer.strategy.reduce(ntok.detach().float(), reduce_op="sum")
        return loss_sum * world / global_tokens.clamp(min=1.0)

    # The training clock runs from the start to the end of the training loop, stopped during
    # validation (which runs inside it); sanity checking happens before it starts.
    def on_train_start(self) -> None:
        self._train_clock.start()

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

    def lr_multiplier(self, lr: float) -> Callable[[int], float]:
        """The LambdaLR multiplier of a group trained at `lr` on the stage's schedule."""
        optim_cfg = self.cfg.train.optim
        return lr_lambda(schedule=optim_cfg.schedule, lr=lr, warmup=optim_cfg.warmup_steps,
                         d_model=self.cfg.model.d_model, step_offset=self.step_offset,
                         stage_steps=self.trainer.max_steps)

    def configure_optimizers(self):
        """Adam over the trainable parameters only, with one LambdaLR multiplier per group.

        Group 0 holds every trainable parameter at the stage's lr; each group split off by
        `add_param_group` (a milestone of `StagedUnfreezing`) follows with its own lr.
        """
        optim_cfg = self.cfg.train.optim
        split = {id(p) for params, _ in self.extra_param_groups for p in params}
        base = [p for p in self.parameters() if p.requires_grad and id(p) not in split]  # frozen params stay out
        groups = [(base, self.stage_lr), *self.extra_param_groups]
        optimizer = torch.optim.Adam([{"params": params} for params, _ in groups], lr=1.0,
                                     betas=tuple(optim_cfg.betas), eps=optim_cfg.eps,
                                     weight_decay=optim_cfg.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, [self.lr_multiplier(lr) for _, lr in groups])
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def add_param_group(self, params: list[torch.nn.Parameter], lr: float) -> None:
        """Train `params` (just made trainable) as an optimizer group of their own at `lr`.

        Before `configure_optimizers` runs the group is only recorded. During a fit it also joins the
        live optimizer, and the LambdaLR gets its multiplier evaluated at the scheduler's current step:
        the group then has the lr that `configure_optimizers` gives it when the fit is resumed.
        """
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
        """Checkpoints are self-contained: the vocabularies travel with the weights."""
        datamodule = self.trainer.datamodule
        checkpoint[VOCAB_KEY] = pack_vocabularies(datamodule.src_vocab, datamodule.tgt_vocab)
        # Every rank writes its checkpoint dict (only rank zero saves it), so the reduce is safe.
        tokens = torch.as_tensor(self._train_tokens, device=self.device).long()
        tokens = self.trainer.strategy.reduce(tokens, reduce_op="sum")
        checkpoint[TRAIN_SPEED_KEY] = {"target_tokens": int(tokens),
                                       "seconds": self._train_clock.seconds}
        checkpoint[RNG_KEY] = {"torch": torch.get_rng_state(), "python": random.getstate(),
                               "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """A resumed fit continues the random streams (dropout) where the checkpoint left them, so it
        ends with the weights of an uninterrupted fit. Lightning does not restore them itself."""
        state = checkpoint.get(RNG_KEY)
        if state is None:  # a checkpoint written before random states were stored
            return
        torch.set_rng_state(state["torch"])
        random.setstate(state["python"])
        if state["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])

    # ------------------------------------------------------------------ evaluation
    def on_validation_epoch_start(self) -> None:
        self._reset_eval()

    def on_test_epoch_start(self) -> None:
        self._reset_eval()

    def _reset_eval(self) -> None:
        self._eval_records = []
        self._eval_sums = torch.zeros(3, device=self.device)
        self._decode_stats.zero_()

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        beam = self.cfg.eval.valid_beam if self.cfg.eval.valid_bleu else 0
        self._eval_step(batch, beam=beam)

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch, beam=self.cfg.decode.beam)

    def _eval_step(self, batch: dict[str, torch.Tensor], beam: int) -> None:
        loss_sum, nll_sum, ntok = self.loss_terms(batch)
        self._eval_sums += torch.stack([loss_sum.detach(), nll_sum.detach(), ntok.float()])
        if beam <= 0:
            return
        vocab = self.trainer.datamodule.tgt_vocab
        started = time.perf_counter()
        hypotheses = self.translate_batch(batch, beam=beam)  # token lists: the device has finished
        self._decode_stats += torch.tensor([time.perf_counter() - started, len(hypotheses)],
                                           dtype=torch.float64)
        for sent, doc, ids in zip(batch["sent_index"].tolist(), batch["doc_index"].tolist(),
                                  hypotheses):
            self._eval_records.append((sent, doc, vocab.decode(ids)))

    @torch.no_grad()
    def translate_batch(self, batch: dict[str, torch.Tensor], beam: int) -> list[list[int]]:
        """Best hypothesis token ids (no bos/eos) for every sentence of the batch."""
        dec = self.cfg.decode
        if beam == 1:
            results = decoding.greedy_search(self.model, batch, max_len_a=dec.max_len_a,
                                             max_len_b=dec.max_len_b)
        else:
            results = decoding.beam_search(self.model, batch, beam=beam, len_penalty=dec.len_penalty,
                                           max_len_a=dec.max_len_a, max_len_b=dec.max_len_b)
        return [r.tokens for r in results]

    def on_validation_epoch_end(self) -> None:
        self._finish_eval("val", "valid", with_bleu=self.cfg.eval.valid_bleu)

    def on_test_epoch_end(self) -> None:
        self._finish_eval("test", "test", with_bleu=True)

    def _finish_eval(self, prefix: str, split: str, with_bleu: bool) -> None:
        sums = self.trainer.strategy.reduce(self._eval_sums, reduce_op="sum")
        loss_sum, nll_sum, ntok = sums.tolist()
        ntok = max(ntok, 1.0)
        log = {f"{prefix}/loss": loss_sum / ntok, f"{prefix}/nll": nll_sum / ntok,
               f"{prefix}/ppl": math.exp(min(nll_sum / ntok, 50.0))}
        if with_bleu and not self.trainer.sanity_checking:
            log.update(self._corpus_scores(prefix, split))
        if prefix == "test":
            log[DECODE_SPEED_METRIC] = self._decode_speed()
        for key, value in log.items():
            self.log(key, value, prog_bar=key.endswith(("bleu", "loss")), rank_zero_only=False,
                     sync_dist=False)

    def _decode_speed(self) -> float:
        """Sentences per second of beam search: all ranks' sentences over the slowest rank's time."""
        stats = self.all_gather(self._decode_stats.float().to(self.device)).reshape(-1, 2)
        return rate(float(stats[:, 1].sum()), float(stats[:, 0].max()))  # (world, [s, sents])

    def _gather_records(self) -> list[tuple[int, int, str]]:
        records = self._eval_records
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            gathered: list[Any] = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, records)
            records = [r for part in gathered for r in part]
        unique = {sent: (sent, doc, hyp) for sent, doc, hyp in records}  # eval shards are disjoint
        return [unique[k] for k in sorted(unique)]

    def _corpus_scores(self, prefix: str, split: str) -> dict[str, float]:
        records = self._gather_records()
        refs = self.trainer.datamodule.references(split)
        if len(records) != len(refs):
            raise RuntimeError(f"{split}: gathered {len(records)} hypotheses for {len(refs)} references")
        hyps = [hyp for _, _, hyp in records]
        docs = [doc for _, doc, _ in records]
        ev = self.cfg.eval
        bleu = metrics.corpus_bleu(hyps, refs, tokenize=ev.tokenize, lowercase=ev.lowercase)
        scores = {f"{prefix}/bleu": bleu.score}
        if prefix == "test":
            scores[f"{prefix}/chrf"] = metrics.corpus_chrf(hyps, refs).score
            scores[f"{prefix}/dbleu"] = metrics.doc_bleu(hyps, refs, docs, tokenize=ev.tokenize,
                                                         lowercase=ev.lowercase).score
            self._write_eval_outputs(split, hyps, bleu.signature)
        return scores

    def _write_eval_outputs(self, split: str, hyps: list[str], signature: str) -> None:
        if self.output_dir is None or not self.trainer.is_global_zero:
            return
        out_dir = Path(self.output_dir)
        (out_dir / f"{split}.hyp.txt").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        (out_dir / f"{split}.signature.json").write_text(json.dumps({"bleu": signature}) + "\n")
