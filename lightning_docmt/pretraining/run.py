"""`docmt pretrain FILE`: pretrain one encoder on the Bible's training books (or on a synthetic
corpus' training documents) and write it as a BERT directory (`config/pretraining.py` for the
settings and where it lands, `bert_files.py` for the files, docs/papers/donato2021.md readings
D20-D23).

The run: the training books' chapters of the language's versions (`data/pretraining_text.py`; valid
and test books of no version) or the training documents of `corpus`, a seeded share held out; a
WordPiece tokenizer learnt from the rest; `steps` updates of Adam (betas 0.9/0.999, weight decay
0.01 on matrices, BERT's) under a linear warm-up and linear decay to 0, on batches of `batch_rows`
rows drawn from a permutation of each epoch's rows (`examples.py`, corruption drawn per epoch).
Every `val_every_steps` the held-out rows (their corruption drawn once, seed 0) are scored, MLM
accuracy or gap-sentence loss and token accuracy. The state (model, optimizer, schedule, step,
random state) is saved in the work directory then, and at least every `SAVE_SECONDS` of wall time
between (validations can be an hour apart on a CPU), so an interrupted run resumes where it stopped
with the batches, masks and dropout it would have drawn: when it is saved does not change the
weights. The finished directory holds `pretraining.json` (settings, key, cost, the held-out scores
at every validation) and is renamed into place last.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import Tensor

from lightning_docmt.batch import pad
from lightning_docmt.checkpoints import save_atomically
from lightning_docmt.config.pretraining import (
    DONE_FILE,
    PretrainConfig,
    finished_output,
    output_dir,
    pretrain_key,
)
from lightning_docmt.cpu import cpu_has_native_bf16
from lightning_docmt.data.pretraining_text import pretraining_chapters
from lightning_docmt.logs import clock
from lightning_docmt.pretraining.bert_files import save_bert, save_tokenizer, train_wordpiece
from lightning_docmt.pretraining.examples import (
    Specials,
    gap_sentence_rows,
    held_out_split,
    masked_lm_rows,
    tokenised,
)
from lightning_docmt.pretraining.models import GapSentenceModel, MaskedLanguageModel, new_encoder
from lightning_docmt.schedules import lr_lambda

RESUME_FILE = "resume.pt"
HELD_OUT_SEED = 0  # the held-out rows' one corruption
PROGRESS_SECONDS = 60.0  # a progress line at most this often between validations (hours apart on a CPU)
SAVE_SECONDS = 600.0  # the resume state at least this often (wall time: not a setting, so not in the key)


def progress(message: str) -> None:
    print(f"[docmt pretrain] {message}", flush=True)


def progress_line(step: int, steps: int, loss: float, seconds_per_update: float) -> str:
    return (f"update {step:,}/{steps:,} · loss {loss:.3f} · {seconds_per_update:.2f} s/update · "
            f"eta {clock(seconds_per_update * (steps - step))}")


def masked_batch(rows: list) -> dict[str, Tensor]:
    tokens = pad([r.tokens for r in rows])
    return {"tokens": tokens, "types": pad([r.types for r in rows]), "pad": tokens.eq(0),
            "labels": pad([r.labels for r in rows], -1)}


def gap_batch(rows: list, specials: Specials) -> dict[str, Tensor]:
    source = pad([r.source for r in rows])
    return {"source": source, "source_pad": source.eq(0),
            "target_in": pad([[specials.cls, *r.target] for r in rows]),
            "target_out": pad([[*r.target, specials.sep] for r in rows])}


class Objective:
    """The model of `cfg.objective` and how it turns chapters into batches and batches into scores."""

    def __init__(self, cfg: PretrainConfig, vocab_size: int, specials: Specials):
        """`vocab_size`: the ids the tokenizer learnt (at most `cfg.vocab_size`, the table's rows)."""
        self.cfg, self.specials, self.vocab_size = cfg, specials, vocab_size
        self.bf16 = uses_bf16(cfg.precision)  # read off the CPU once, not at every update
        encoder = new_encoder(cfg)
        self.model = (MaskedLanguageModel(encoder) if cfg.objective == "mlm"
                      else GapSentenceModel(encoder, cfg.heads, cfg.ffn_dim, cfg.decoder_layers, cfg.dropout))

    def rows(self, chapters: list, seed: int) -> list:
        if self.cfg.objective == "mlm":
            return masked_lm_rows(chapters, self.specials, self.vocab_size, self.cfg.max_tokens, seed)
        return gap_sentence_rows(chapters, self.specials, self.cfg.max_tokens, seed)

    def batch(self, rows: list) -> dict[str, Tensor]:
        return masked_batch(rows) if self.cfg.objective == "mlm" else gap_batch(rows, self.specials)

    def loss(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, int]:
        return self.model(**batch)


def learning_rate(cfg: PretrainConfig) -> Callable[[int], float]:
    """Multiplier of `cfg.lr` after `done` updates: the training stages' linear warm-up and linear
    decay to 0 at `steps` (`lightning_docmt/schedules.py`)."""
    return lr_lambda(schedule="linear_warmup_linear_decay", lr=1.0, warmup=cfg.warmup_steps, d_model=cfg.width,
                     stage_steps=cfg.steps)


def optimizer(model: torch.nn.Module, cfg: PretrainConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                             lr=cfg.lr, betas=(0.9, 0.999), eps=1e-6)


def uses_bf16(precision: str) -> bool:
    """`bf16`: always; `fast`: where the CPU computes bf16 natively (elsewhere it is emulated, and
    twenty times slower than float32); `32`: never."""
    return precision == "bf16" or (precision == "fast" and cpu_has_native_bf16())


def autocast(objective: Objective):
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=objective.bf16)


@torch.no_grad()
def held_out_scores(objective: Objective, rows: list) -> dict[str, float]:
    """Mean loss per predicted token and token accuracy over the held-out rows."""
    model = objective.model.eval()
    total = correct = count = 0.0
    for start in range(0, len(rows), objective.cfg.batch_rows):
        with autocast(objective):
            loss, right, n = objective.loss(objective.batch(rows[start:start + objective.cfg.batch_rows]))
        total += float(loss) * n
        correct += float(right)
        count += n
    model.train()
    name = "mlm" if objective.cfg.objective == "mlm" else "gap_sentence"
    return {f"{name}/loss": total / max(count, 1), f"{name}/accuracy": correct / max(count, 1), "tokens": count}


def pretrain(cfg: PretrainConfig, chapters_of: Callable = pretraining_chapters) -> Path:
    """Pretrain (or resume, or find finished) the encoder of `cfg`; returns its directory.
    `chapters_of(cfg)` gives the text (tests hand in a small one)."""
    finished = finished_output(cfg)
    if finished is not None:
        progress(f"already pretrained: {finished}")
        return finished
    final = output_dir(cfg)
    work = final.parent / f"{final.name}.work"
    work.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    chapters = chapters_of(cfg)
    train, held = held_out_split(chapters, cfg.held_out, cfg.seed)
    if not (work / "tokenizer.json").is_file():
        tokenizer = train_wordpiece((v for c in train for v in c.verses), cfg.vocab_size, cfg.lowercase)
        save_tokenizer(tokenizer, work, cfg.lowercase, cfg.max_tokens)
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(work / "tokenizer.json"))
    specials = Specials(*(tokenizer.token_to_id(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")))
    vocab_size = tokenizer.get_vocab_size()
    train, held = tokenised(train, tokenizer), tokenised(held, tokenizer)
    objective = Objective(cfg, vocab_size, specials)
    model = objective.model.train()
    optim = optimizer(model, cfg)
    schedule = torch.optim.lr_scheduler.LambdaLR(optim, learning_rate(cfg))
    step, history, spent = 0, [], 0.0
    if (work / RESUME_FILE).is_file():
        state = torch.load(work / RESUME_FILE, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        optim.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        step, history, spent = int(state["step"]), json.loads(state["history"]), float(state["seconds"])
        torch.set_rng_state(state["rng"])  # the dropout masks the uninterrupted run would draw
        progress(f"resuming at update {step} of {cfg.steps}")
    held_rows = objective.rows(held, HELD_OUT_SEED)
    progress(f"{cfg.objective} on {cfg.corpus or cfg.lang}: {len(train)} chapters, {len(held)} held out, "
             f"{vocab_size} WordPiece ids, {sum(p.numel() for p in model.parameters()):,} parameters")

    def epoch_rows(epoch: int) -> tuple[list, np.ndarray]:
        """The epoch's rows (its own corruption) and their order; an epoch has as many rows as any other."""
        rows = objective.rows(train, cfg.seed * 1_000_003 + epoch)
        return rows, np.random.default_rng([cfg.seed, epoch]).permutation(len(rows))

    rows, order = epoch_rows(0)
    per_epoch = max(1, len(rows) // cfg.batch_rows)  # updates per epoch (a last partial batch is left out)
    epoch = 0
    started = time.perf_counter()
    first_step, last_line, last_save = step, started, started

    def save_state() -> None:
        save_atomically({"model": model.state_dict(), "optimizer": optim.state_dict(),  # a kill mid-write
                         "schedule": schedule.state_dict(), "step": step, "history": json.dumps(history),
                         "seconds": spent + time.perf_counter() - started, "rng": torch.get_rng_state()},
                        work / RESUME_FILE)

    while step < cfg.steps:
        if step // per_epoch != epoch:
            epoch = step // per_epoch
            rows, order = epoch_rows(epoch)
        first = (step % per_epoch) * cfg.batch_rows
        batch = objective.batch([rows[i] for i in order[first:first + cfg.batch_rows]])
        with autocast(objective):
            loss, _, _ = objective.loss(batch)
        if not math.isfinite(loss.item()):
            raise FloatingPointError(f"pretraining loss {float(loss)} at update {step}")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        schedule.step()
        optim.zero_grad(set_to_none=True)
        step += 1
        now = time.perf_counter()
        if now - last_line >= PROGRESS_SECONDS:
            progress(progress_line(step, cfg.steps, loss.item(), (now - started) / (step - first_step)))
            last_line = now
        validating = step % cfg.val_every_steps == 0 or step == cfg.steps
        if validating:
            seconds = spent + time.perf_counter() - started
            history.append({"step": step, "train_loss": loss.item(), "seconds": round(seconds, 1),
                            **held_out_scores(objective, held_rows)})
            progress(json.dumps(history[-1]))
        if validating or now - last_save >= SAVE_SECONDS:
            save_state()
            last_save = time.perf_counter()
    out = final.parent / f".{final.name}.tmp"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(work / name, out / name)
    save_bert(model.encoder, out, cfg.heads)
    (out / DONE_FILE).write_text(json.dumps({"config": asdict(cfg), "key": pretrain_key(cfg), "chapters": len(train),
                                             "held_out_chapters": len(held), "vocab_size": vocab_size,
                                             "history": history}, indent=1))
    out.rename(final)
    shutil.rmtree(work)
    progress(f"done: {final}")
    return final
