"""Checks of a finished run's records, shared by the end-to-end and DDP tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from lightning_docmt.data.corpora import read_corpus
from lightning_docmt.data.languages import bleu_tokenizer
from lightning_docmt.evaluation.meteor import METEOR_NAME, corpus_meteor
from lightning_docmt.evaluation.metrics import corpus_bleu, corpus_chrf


def assert_test_bleu_rescores(run_dir: Path, corpus: str) -> None:
    """`metrics.json`'s test BLEU, chrF and METEOR (exact+stem) are those of the written test
    hypotheses against the corpus's test references, with the run's own settings (one case setting
    for all three, `eval.lowercase`), and the stored signatures are those settings'."""
    cfg = OmegaConf.load(run_dir / "config.yaml")
    tokenize = bleu_tokenizer(cfg.eval, cfg.data)
    hyps = (run_dir / "test.hyp.txt").read_text(encoding="utf-8").split("\n")[:-1]
    refs = [t for d in read_corpus(corpus).documents if d.split == "test" for t in d.tgt]
    assert len(hyps) == len(refs) and any(hyps)
    score = corpus_bleu(hyps, refs, tokenize=tokenize, lowercase=cfg.eval.lowercase)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["test/bleu"] == pytest.approx(score.score, abs=1e-4)  # logged as float32
    signatures = json.loads((run_dir / "test.signature.json").read_text())
    assert signatures["bleu"] == score.signature
    chrf = corpus_chrf(hyps, refs, lowercase=cfg.eval.lowercase)  # BLEU's case setting
    assert metrics["test/chrf"] == pytest.approx(chrf.score, abs=1e-4)
    assert signatures["chrf"] == chrf.signature and signatures["meteor"] == METEOR_NAME
    assert metrics["test/meteor"] == pytest.approx(100 * corpus_meteor(hyps, refs, cfg.eval.lowercase),
                                                   abs=1e-4)
