"""Training, keying, caching and loading a run's (source, target) vocabularies (`vocab.*`)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from lightning_docmt.batch import SPECIAL_TOKENS
from lightning_docmt.config import pretrained_files
from lightning_docmt.config.schema import VocabConfig
from lightning_docmt.data.cachedir import build_once, content_key
from lightning_docmt.data.vocab.base import Vocabulary
from lightning_docmt.data.vocab.sentencepiece import SentencePieceVocab
from lightning_docmt.data.vocab.wordpiece import SRC_PRETRAINED_KEY, WordPieceVocab
from lightning_docmt.data.vocab.words import WORD_SPLITS, WordVocab
from lightning_docmt.errors import DocMTInputError

VOCAB_TYPES = ("bpe", "unigram", "word")
_FORMAT = 1  # bump when the trained artefact changes for the same inputs


def check_vocab_config(cfg: VocabConfig) -> None:
    if cfg.type not in VOCAB_TYPES:
        raise DocMTInputError(f"must be one of {', '.join(VOCAB_TYPES)}, got {cfg.type!r}",
                              key="vocab.type")
    if cfg.size <= len(SPECIAL_TOKENS):
        raise DocMTInputError(f"must exceed the {len(SPECIAL_TOKENS)} special tokens, "
                              f"got {cfg.size}", key="vocab.size")
    if cfg.character_coverage is not None and not 0.0 < cfg.character_coverage <= 1.0:
        raise DocMTInputError(f"must be in (0, 1], got {cfg.character_coverage}",
                              key="vocab.character_coverage")
    if cfg.max_train_sentences < 1:
        raise DocMTInputError("must be positive", key="vocab.max_train_sentences")
    if cfg.word_split not in WORD_SPLITS:
        raise DocMTInputError(f"must be one of {', '.join(WORD_SPLITS)}, got {cfg.word_split!r}",
                              key="vocab.word_split")
    if cfg.word_split != "whitespace" and cfg.type != "word":
        raise DocMTInputError(f"{cfg.word_split!r} applies to word vocabularies (vocab.type=word), "
                              f"not {cfg.type!r}", key="vocab.word_split")
    if cfg.src_pretrained is not None and cfg.joint:
        raise DocMTInputError("a pretrained encoder's WordPiece source vocabulary (vocab.src_pretrained) "
                              "leaves the target side a vocabulary of its own; set vocab.joint=false",
                              key="vocab.joint")


Coverages = tuple[float, float]  # sentencepiece character_coverage of the (source, target) side


def vocab_key(cfg: VocabConfig, fingerprint: str, coverages: Coverages) -> str:
    """Hash of the training data fingerprint and every option that changes the trained model
    (`coverages`: the resolved character coverage of each side, `data/languages.py`). With
    `src_pretrained`, the checkpoint's files are part of the key, and a `word_split` other than
    whitespace is too (without them the key is what it always was)."""
    inputs = {
        "format": _FORMAT, "fingerprint": fingerprint, "type": cfg.type, "size": cfg.size,
        "joint": cfg.joint, "character_coverage": list(coverages),
        "max_train_sentences": cfg.max_train_sentences, "lowercase": cfg.lowercase,
    }
    if cfg.word_split != "whitespace":
        inputs["word_split"] = cfg.word_split
    if cfg.src_pretrained is not None:
        inputs["src_pretrained"] = pretrained_files.fingerprint(pretrained_files.pretrained_dir(cfg.src_pretrained,
                                                                                            SRC_PRETRAINED_KEY))
    return content_key(inputs)


def train_vocabulary(cfg: VocabConfig, sentences: Iterable[str], character_coverage: float) -> Vocabulary:
    if cfg.type == "word":
        return WordVocab.train(sentences, size=cfg.size, lowercase=cfg.lowercase,
                               word_split=cfg.word_split)
    return SentencePieceVocab.train(
        sentences, model_type=cfg.type, size=cfg.size, character_coverage=character_coverage,
        max_train_sentences=cfg.max_train_sentences, lowercase=cfg.lowercase,
    )


def vocab_dir(cache_dir: str | Path, cfg: VocabConfig, fingerprint: str, coverages: Coverages) -> Path:
    return Path(cache_dir) / "vocab" / vocab_key(cfg, fingerprint, coverages)


def build_vocabularies(cfg: VocabConfig, src_sentences: Iterable[str], tgt_sentences: Iterable[str],
                       cache_dir: str | Path, fingerprint: str, coverages: Coverages = (1.0, 1.0)
                       ) -> tuple[Vocabulary, Vocabulary]:
    """(source, target) vocabularies, trained once per (fingerprint, options) and then loaded.

    Joint: one model trained on both sides, returned twice (the same object). The sentence
    iterables are consumed only when the vocabulary is not cached yet. `coverages`: sentencepiece's
    `character_coverage` of each side (a joint vocabulary uses the source side's; the caller gives
    both the same value then).
    """
    check_vocab_config(cfg)
    final = vocab_dir(cache_dir, cfg, fingerprint, coverages)

    def build(tmp: Path) -> None:
        if cfg.src_pretrained is not None:  # the checkpoint's WordPiece; the target side its own
            WordPieceVocab.from_pretrained(cfg.src_pretrained).save(tmp / "src")
            train_vocabulary(cfg, tgt_sentences, coverages[1]).save(tmp / "tgt")
        elif cfg.joint:
            both = (s for side in (src_sentences, tgt_sentences) for s in side)
            train_vocabulary(cfg, both, coverages[0]).save(tmp / "joint")
        else:
            train_vocabulary(cfg, src_sentences, coverages[0]).save(tmp / "src")
            train_vocabulary(cfg, tgt_sentences, coverages[1]).save(tmp / "tgt")

    build_once(final, build)
    return load_vocabularies(final)


def load_vocabularies(directory: str | Path) -> tuple[Vocabulary, Vocabulary]:
    directory = Path(directory)
    if (directory / "joint").is_dir():
        joint = Vocabulary.load(directory / "joint")
        return joint, joint
    return Vocabulary.load(directory / "src"), Vocabulary.load(directory / "tgt")
