"""One validation or test loop of `DocMTModule` (docs/design.md section 8): its sums, its decoded
records and, at the end, its scores, over the *whole* split with every rank's hypotheses gathered
before scoring (per-rank BLEU averaged is not corpus BLEU, docs/design.md section 12).

Per batch (`step`): the teacher-forced loss and NLL sums; when the loop decodes (a beam > 0), the
1-best hypotheses with the beam-search time. A model that reads what came before in the target
language walks the split in document order (`inference/document_order.DocumentOrderWalk`): when
the loop decodes, every sentence reads what was output for the one before it. The test loop of a
model that carries a state scores its context usage itself (`evaluation/carried_context.py`,
`eval.context_usage`): the CXMI passes of `evaluation/context_usage.py` would take its sentences
out of their documents.

The sums and counts go into the module's `EvaluationMetrics` (`metrics.py`, torchmetrics), which
the loop empties when it starts and which torchmetrics sums over the ranks at the end; the
hypotheses are gathered from every rank and scored once with sacreBLEU.

At the end (`scores`): `<prefix>/loss`, `/nll`, `/ppl` (token-weighted over the whole split: the
sums over every batch of every rank, divided by the target tokens of all of them); BLEU when asked
(the test loop also chrF, document BLEU and METEOR, and writes `test.hyp.txt`, `test.ref.txt` and
the metrics' signatures); the test decoding speed (`speed.py`); and the carried state's `cxmi`,
`random_ctx/*`. Computing the metrics and gathering the hypotheses are collectives: under DDP,
every rank must call `scores`.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from lightning_docmt.atomic_files import write_text_atomically
from lightning_docmt.data.context_anchors import document_groups
from lightning_docmt.data.languages import bleu_tokenizer
from lightning_docmt.distributed import gather_objects
from lightning_docmt.evaluation import metrics
from lightning_docmt.evaluation.carried_context import CarriedContextUsage
from lightning_docmt.evaluation.meteor import METEOR_NAME, corpus_meteor
from lightning_docmt.inference import decoding
from lightning_docmt.inference.document_order import DocumentOrderWalk
from lightning_docmt.inference.own_outputs import OutputTokens, gathered
from lightning_docmt.inference.reference_context import reads_reference_target
from lightning_docmt.nn.model_hooks import OutputLoss
from lightning_docmt.nn.seq2seq import Seq2SeqModel
from lightning_docmt.training.metrics import EvaluationMetrics
from lightning_docmt.training.speed import DECODE_SPEED_METRIC

Record = tuple[int, int, str]  # (sent_index, doc_index, detokenised hypothesis)


class EvaluationLoop:
    """The state of one evaluation loop over `split` of `datamodule` (see the module docstring);
    `metrics`: the module's, emptied here."""

    def __init__(self, model: Seq2SeqModel, cfg: DictConfig, datamodule: Any, split: str,
                 metrics: EvaluationMetrics):
        self.model, self.cfg, self.datamodule, self.split = model, cfg, datamodule, split
        self.metrics = metrics
        metrics.reset()
        walk = DocumentOrderWalk(model, datamodule.split(split), datamodule.window,
                                 own_targets=reads_reference_target(cfg))
        self.walk = walk if walk.needed else None
        self.records: list[Record] = []
        self.scores_carried_context = (type(model).carries_state and split == "test"
                                       and bool(cfg.eval.context_usage))
        groups = (torch.from_numpy(document_groups(datamodule.split(split).doc_ids))
                  if self.scores_carried_context else torch.zeros(0, dtype=torch.long))
        self.carried_usage = CarriedContextUsage(groups)

    def step(self, batch: dict[str, torch.Tensor], beam: int, output_loss: OutputLoss) -> None:
        """Score `batch` teacher-forced and, for `beam` > 0, decode it."""
        walk = self.walk
        if walk is not None:  # own previous translations (when decoding), carried state
            batch = walk.read(batch, decoding=beam > 0)
        terms = self.model.loss_terms(batch, output_loss)
        if walk is not None:  # teacher-forced; a decode below hands on its output's state instead
            walk.hand_on(batch, terms.carry)
        self.metrics.loss.update(loss=terms.loss_sum.detach(), nll=terms.nll_sum.detach(), tokens=terms.tokens)
        if self.scores_carried_context:
            self.metrics.carried.update(**self.carried_usage.nll_sums(self.model, batch, output_loss))
        if beam <= 0:
            return
        vocab = self.datamodule.tgt_vocab
        started = time.perf_counter()
        hypotheses = decoding.best_tokens(self.model, batch, self.cfg.decode, beam)  # the device has finished
        self.metrics.decode_speed.update(time.perf_counter() - started, len(hypotheses))
        if walk is not None:  # the next sentence reads what was output, not the reference
            walk.decoded(batch, hypotheses)
        for sent, doc, ids in zip(batch["sent_index"].tolist(), batch["doc_index"].tolist(), hypotheses):
            self.records.append((sent, doc, vocab.decode(ids)))
        if self.scores_carried_context:  # the random-context control and its floor; the real state is handed on
            self.carried_usage.add_control_hypotheses(self.model, batch, lambda other: [
                vocab.decode(ids) for ids in decoding.best_tokens(self.model, other, self.cfg.decode, beam)])

    def own_translations(self) -> OutputTokens | None:
        """Every rank's translations of the split (a collective under DDP), for a model with
        target-side context; None for the others."""
        return None if self.walk is None or self.walk.outputs is None else gathered(self.walk.outputs)

    def scores(self, prefix: str, with_bleu: bool, strategy: Any, output_dir: Path | None
               ) -> dict[str, float]:
        """The loop's metrics under `prefix` (`val` or `test`); `strategy`: the Lightning strategy,
        whose global rank zero writes the test outputs to `output_dir` (None: nowhere)."""
        sums = self.metrics.loss.compute()  # every rank's
        loss_sum, nll_sum, ntok = sums["loss"], sums["nll"], max(sums["tokens"], 1.0)
        scores = {f"{prefix}/loss": loss_sum / ntok, f"{prefix}/nll": nll_sum / ntok,
                  f"{prefix}/ppl": math.exp(min(nll_sum / ntok, 50.0))}
        if with_bleu:
            scores.update(self._corpus_scores(prefix, output_dir if strategy.is_global_zero else None))
        if prefix == "test":
            scores[DECODE_SPEED_METRIC] = self.metrics.decode_speed.compute()
        if self.scores_carried_context:
            scores.update(self._carried_usage_scores(nll_sum, ntok, scores["test/bleu"]))
        return scores

    def _carried_usage_scores(self, nll_sum: float, tokens: float, test_bleu: float) -> dict[str, float]:
        """`cxmi` and `random_ctx/cxmi` (nats per target token that the carried state adds over none
        and over another document's; `nll_sum` is the loop's own), the test BLEU with another
        document's state (`random_ctx/bleu`, `random_ctx/bleu_delta`: the same batches and
        precision as the test BLEU), its noise floor (`random_ctx/bleu_floor`: the real state
        decoded again, rows reversed) and the share of rows whose other state was of another
        collection (`random_ctx/other_collection`)."""
        sums = self.metrics.carried.compute()  # every rank's
        records, refs = self._gathered(self.carried_usage.random_records)
        random_bleu = self._bleu([hyp for _, _, hyp in records], refs).score
        records, _ = self._gathered(self.carried_usage.again_records)
        again_bleu = self._bleu([hyp for _, _, hyp in records], refs).score
        return {"cxmi": (sums["blank_nll"] - nll_sum) / tokens,
                "random_ctx/cxmi": (sums["other_nll"] - nll_sum) / tokens,
                "random_ctx/bleu": random_bleu, "random_ctx/bleu_delta": random_bleu - test_bleu,
                "random_ctx/bleu_floor": again_bleu - test_bleu,
                "random_ctx/other_collection": sums["other_collection"] / max(sums["rows"], 1.0)}

    def _gathered(self, own: list[Record]) -> tuple[list[Record], list[str]]:
        """Every rank's records, in sentence order, and the split's references, one per record."""
        records = [r for part in gather_objects(own) for r in part]
        unique = {sent: (sent, doc, hyp) for sent, doc, hyp in records}  # eval shards are disjoint
        refs = self.datamodule.references(self.split)
        if len(unique) != len(refs):
            raise RuntimeError(f"{self.split}: gathered {len(unique)} hypotheses for {len(refs)} references")
        return [unique[k] for k in sorted(unique)], refs

    def _bleu(self, hyps: list[str], refs: list[str]) -> Any:
        """sacreBLEU's corpus BLEU with the run's tokenizer and case setting (`eval.lowercase`)."""
        return metrics.corpus_bleu(hyps, refs, tokenize=bleu_tokenizer(self.cfg.eval, self.cfg.data),
                                   lowercase=self.cfg.eval.lowercase)

    def _corpus_scores(self, prefix: str, output_dir: Path | None) -> dict[str, float]:
        records, refs = self._gathered(self.records)
        hyps = [hyp for _, _, hyp in records]
        docs = [doc for _, doc, _ in records]
        ev, tokenize = self.cfg.eval, bleu_tokenizer(self.cfg.eval, self.cfg.data)
        bleu = self._bleu(hyps, refs)
        scores = {f"{prefix}/bleu": bleu.score}
        if prefix == "test":  # one case setting for every metric (eval.lowercase)
            chrf = metrics.corpus_chrf(hyps, refs, lowercase=ev.lowercase)
            scores[f"{prefix}/chrf"] = chrf.score
            scores[f"{prefix}/dbleu"] = metrics.doc_bleu(hyps, refs, docs, tokenize=tokenize,
                                                         lowercase=ev.lowercase).score
            scores[f"{prefix}/meteor"] = 100 * corpus_meteor(hyps, refs, lowercase=ev.lowercase)
            if output_dir is not None:
                write_outputs(Path(output_dir), self.split, hyps, refs,
                              {"bleu": bleu.signature, "chrf": chrf.signature, "meteor": METEOR_NAME})
        return scores


def write_outputs(out_dir: Path, split: str, hyps: list[str], refs: list[str], signatures: dict[str, str]) -> None:
    """`<split>.hyp.txt` and `<split>.ref.txt` (one sentence a line, so that the run can be re-scored
    and tested for significance on its own) and the metrics' signatures."""
    for kind, lines in (("hyp", hyps), ("ref", refs)):
        write_text_atomically(out_dir / f"{split}.{kind}.txt", "".join(t + "\n" for t in lines))
    write_text_atomically(out_dir / f"{split}.signature.json", json.dumps(signatures) + "\n")
