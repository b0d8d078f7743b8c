"""Checks of a finished run's records, shared by the end-to-end and DDP tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from lightning_docmt.data.corpora import read_corpus
from lightning_docmt.data.languages import bleu_tokenizer
from lightning_docmt.evaluation.metrics import corpus_bleu


def assert_test_bleu_rescores(run_dir: Path, corpus: str) -> None:
    """`metrics.json`'s test BLEU is sacreBLEU of the written test hypotheses against the corpus's
    test references, with the run's own BLEU settings, and the stored signature is that setting's."""
    cfg = OmegaConf.load(run_dir / "config.yaml")
    tokenize = bleu_tokenizer(cfg.eval, cfg.data)
    hyps = (run_dir / "test.hyp.txt").read_text(encoding="utf-8").split("\n")[:-1]
    refs = [t for d in read_corpus(corpus).documents if d.split == "test" for t in d.tgt]
    assert len(hyps) == len(refs) and any(hyps)
    score = corpus_bleu(hyps, refs, tokenize=tokenize, lowercase=cfg.eval.lowercase)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["test/bleu"] == pytest.approx(score.score, abs=1e-4)  # logged as float32
    assert json.loads((run_dir / "test.signature.json").read_text())["bleu"] == score.signature
