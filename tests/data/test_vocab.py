from __future__ import annotations

import random

import pytest

from lightning_docmt.batch import BOS_ID, EOS_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS, UNK_ID
from lightning_docmt.config.schema import VocabConfig
from lightning_docmt.data.vocab import (
    SentencePieceVocab,
    Vocabulary,
    WordVocab,
    build_vocabularies,
    sample_sentences,
)
from lightning_docmt.errors import DocMTInputError
from tests.helpers.corpus_fixtures import random_sentence

SRC = [random_sentence(random.Random(i)) for i in range(300)]
TGT = [s.upper() for s in SRC]


@pytest.fixture(scope="module")
def bpe() -> SentencePieceVocab:
    return SentencePieceVocab.train(SRC, model_type="bpe", size=120)


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_sentencepiece_special_ids_follow_the_batch_contract(model_type):
    vocab = SentencePieceVocab.train(SRC, model_type=model_type, size=80)
    assert [vocab.piece(i) for i in range(5)] == list(SPECIAL_TOKENS)
    assert (vocab.pad_id, vocab.unk_id, vocab.bos_id, vocab.eos_id, vocab.sep_id) == (0, 1, 2, 3, 4)
    assert len(vocab) <= 80
    assert SEP_ID not in vocab.encode("the cat <sep> the dog")  # a literal "<sep>" is plain text


def test_sentencepiece_vocabulary_smaller_than_its_characters_is_a_config_error():
    """300 distinct CJK characters, all kept at coverage 1.0, cannot fit 100 pieces: an error on
    vocab.size that names both numbers (not sentencepiece's internal RuntimeError)."""
    chars = [chr(0x4E00 + i) for i in range(300)]
    sentences = ["".join(chars[(7 * i + k) % 300] for k in range(20)) for i in range(200)]
    with pytest.raises(DocMTInputError, match=r"key 'vocab.size': 100 pieces cannot hold the 30\d "
                                              r"characters that character_coverage=1.0 keeps"):
        SentencePieceVocab.train(sentences, model_type="bpe", size=100, character_coverage=1.0)


def test_sentencepiece_round_trip_and_decode_rules(bpe):
    for s in SRC[:20]:
        ids = bpe.encode(s)
        assert BOS_ID not in ids and EOS_ID not in ids
        assert bpe.decode(ids) == s
    ids = bpe.encode(SRC[0])
    noisy = [BOS_ID] + ids[:1] + [SEP_ID, PAD_ID] + ids[1:] + [EOS_ID] + bpe.encode("river")
    assert bpe.decode(noisy) == SRC[0]  # specials dropped, everything after </s> ignored


def test_sentencepiece_save_load_gives_the_same_ids(bpe, tmp_path):
    bpe.save(tmp_path / "v")
    loaded = Vocabulary.load(tmp_path / "v")
    assert isinstance(loaded, SentencePieceVocab) and len(loaded) == len(bpe)
    assert loaded.encode_batch(SRC[:10]) == bpe.encode_batch(SRC[:10])


def test_lowercase_option_normalises_before_encoding():
    vocab = WordVocab.train(["The Cat", "the dog"], size=20, lowercase=True)
    assert vocab.encode("THE CAT") == vocab.encode("the cat")
    assert UNK_ID not in vocab.encode("THE CAT")


def test_word_vocab_cap_ranking_and_unk():
    sentences = ["b b b a a c", "a b d d", "e"]  # counts: b 4, a 3, d 2, c 1, e 1
    vocab = WordVocab.train(sentences, size=len(SPECIAL_TOKENS) + 3)
    assert [vocab.piece(i) for i in range(5, 8)] == ["b", "a", "d"]
    assert len(vocab) == 8
    assert vocab.encode("a c b zzz") == [6, UNK_ID, 5, UNK_ID]
    assert vocab.decode([6, UNK_ID, 5, EOS_ID, 7]) == "a <unk> b"


def test_word_vocab_ties_are_alphabetical_and_specials_excluded():
    vocab = WordVocab.train(["<s> zeta alpha mid <sep>"], size=100)
    assert [vocab.piece(i) for i in range(5, len(vocab))] == ["alpha", "mid", "zeta"]
    assert vocab.encode("<sep>") == [UNK_ID]


def test_sample_sentences_is_a_seeded_ordered_subset():
    pool = [f"s{i}" for i in range(100)] + ["", "  "]
    a = sample_sentences(pool, 10, seed=3)
    assert a == sample_sentences(pool, 10, seed=3)
    assert a != sample_sentences(pool, 10, seed=4)
    assert len(a) == 10 and a == sorted(a, key=pool.index) and set(a) <= set(pool[:100])
    assert sample_sentences(pool, 1000) == pool[:100]  # under the cap: all non-empty, in order


def test_joint_vocabulary_is_one_object_trained_on_both_sides(tmp_path):
    cfg = VocabConfig(type="bpe", size=150, joint=True)
    src, tgt = build_vocabularies(cfg, SRC, TGT, tmp_path, "fp")
    assert src is tgt
    assert UNK_ID not in src.encode(TGT[0]) and UNK_ID not in src.encode(SRC[0])


def test_separate_vocabularies_only_know_their_own_side(tmp_path):
    cfg = VocabConfig(type="bpe", size=150, joint=False)
    src, tgt = build_vocabularies(cfg, SRC, TGT, tmp_path, "fp")
    assert src is not tgt
    assert UNK_ID in tgt.encode(SRC[0])  # lower-case letters never occur on the target side
    assert UNK_ID not in tgt.encode(TGT[0])


def _must_not_be_read():
    raise AssertionError("a cached vocabulary must not read its training sentences")
    yield  # pragma: no cover  (makes this a generator)


def test_second_build_loads_from_cache_and_options_change_the_key(tmp_path):
    cfg = VocabConfig(type="word", size=30, joint=False)
    src, tgt = build_vocabularies(cfg, SRC, TGT, tmp_path, "fp1")
    again_src, again_tgt = build_vocabularies(cfg, _must_not_be_read(), _must_not_be_read(),
                                              tmp_path, "fp1")
    assert again_src.encode_batch(SRC[:5]) == src.encode_batch(SRC[:5])
    assert again_tgt.encode_batch(TGT[:5]) == tgt.encode_batch(TGT[:5])
    assert len(list((tmp_path / "vocab").iterdir())) == 2  # entry + its lock file
    with pytest.raises(AssertionError, match="must not read"):
        build_vocabularies(cfg, _must_not_be_read(), [], tmp_path, "fp2")  # new corpus
    with pytest.raises(AssertionError, match="must not read"):
        build_vocabularies(VocabConfig(type="word", size=31, joint=False), _must_not_be_read(), [],
                           tmp_path, "fp1")  # new option


@pytest.mark.parametrize("field,value", [("type", "chars"), ("size", 3),
                                         ("character_coverage", 0.0)])
def test_bad_vocab_options_name_their_key(tmp_path, field, value):
    with pytest.raises(DocMTInputError, match=f"vocab.{field}"):
        build_vocabularies(VocabConfig(**{field: value}), SRC, TGT, tmp_path, "fp")
