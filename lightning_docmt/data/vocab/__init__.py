"""Vocabularies: sentencepiece subwords (BPE or unigram, `sentencepiece.py`), whitespace words
(`words.py`), and a pretrained encoder's WordPiece vocabulary (`wordpiece.py`), one module per
kind on the base class of `base.py`; `building.py` trains, keys and caches a run's pair
(docs/design.md section 5).

Every vocabulary shares the special ids of the batch contract (`batch.py`): `<pad>`=0,
`<unk>`=1, `<s>`=2, `</s>`=3, `<sep>`=4. `encode` never adds `<s>`/`</s>`; the collator does.
Word vocabularies serve the word-unit rows of Li & Feng (2019), Table 2 (30K words per side).
The paper segments Chinese with ICTCLAS, which is unavailable: `vocab.word_split=han` makes every
Han character a word of its own and splits other scripts on whitespace (reading L17 of
docs/papers/lifeng2019.md), so those rows are not comparable to the paper's word rows.
WordPiece vocabularies are the source side of a model whose encoder starts from a pretrained
BERT-style checkpoint (`vocab.src_pretrained`, Ma et al. 2020's "+BERT" rows, reading F11 of
docs/papers/ma2020.md); the target side then has a vocabulary of its own.
"""

from lightning_docmt.data.vocab.base import Vocabulary, sample_sentences
from lightning_docmt.data.vocab.building import (
                                                 VOCAB_TYPES,
                                                 build_vocabularies,
                                                 check_vocab_config,
                                                 load_vocabularies,
                                                 train_vocabulary,
                                                 vocab_dir,
                                                 vocab_key,
)
from lightning_docmt.data.vocab.sentencepiece import SentencePieceVocab
from lightning_docmt.data.vocab.wordpiece import SRC_PRETRAINED_KEY, WordPieceVocab
from lightning_docmt.data.vocab.words import WORD_SPLITS, WordVocab, split_words

__all__ = ["SRC_PRETRAINED_KEY", "VOCAB_TYPES", "WORD_SPLITS", "SentencePieceVocab", "Vocabulary",
           "WordPieceVocab", "WordVocab", "build_vocabularies", "check_vocab_config", "load_vocabularies",
           "sample_sentences", "split_words", "train_vocabulary", "vocab_dir", "vocab_key"]
