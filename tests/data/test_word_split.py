"""`vocab.word_split=han`: one word per Han character for Chinese word vocabularies (reading L17 of
docs/papers/lifeng2019.md)."""

from __future__ import annotations

import pytest

from lightning_docmt.batch import SPECIAL_TOKENS, UNK_ID
from lightning_docmt.config.composition import compose, to_dataclass
from lightning_docmt.config.schema import DataConfig, VocabConfig
from lightning_docmt.data.prepare import cache_layout
from lightning_docmt.data.vocab import Vocabulary, WordVocab, build_vocabularies, split_words
from lightning_docmt.errors import DocMTInputError
from tests.helpers.corpus_fixtures import random_documents, write_jsonl

ZH = ["耶稣说：Hello world", "耶稣 又 说：「你们 来」", "Ｈｉ　世界。"]


def test_han_split_makes_every_han_character_a_word():
    assert split_words("耶稣说\uff1aHello world", "han") == ["耶", "稣", "说", "\uff1a", "Hello", "world"]
    assert split_words("耶稣说\uff1aHello world") == ["耶稣说\uff1aHello", "world"]  # whitespace
    # Extension A, compatibility ideographs, CJK punctuation, fullwidth forms; U+3000 separates.
    assert split_words("a\u3400b\uf900「x」\u3000ｙ。", "han") == [
        "a", "\u3400", "b", "\uf900", "「", "x", "」", "ｙ", "。"]


def test_han_vocabulary_unk_and_save_load_keep_the_split(tmp_path):
    vocab = WordVocab.train(ZH, size=100, word_split="han")
    assert "耶" in [vocab.piece(i) for i in range(len(vocab))] and len(vocab) < 100
    ids = vocab.encode("耶稣说：天地")
    assert len(ids) == 6 and ids[4:] == [UNK_ID, UNK_ID] and UNK_ID not in ids[:4]
    assert vocab.decode(ids) == "耶 稣 说 ： <unk> <unk>"  # words joined with spaces
    vocab.save(tmp_path / "v")
    loaded = Vocabulary.load(tmp_path / "v")
    assert isinstance(loaded, WordVocab) and loaded.word_split == "han"
    assert loaded.encode_batch(ZH + ["耶稣说：天地"]) == vocab.encode_batch(ZH + ["耶稣说：天地"])


def test_han_vocabulary_respects_the_size_cap():
    vocab = WordVocab.train(ZH, size=len(SPECIAL_TOKENS) + 2, word_split="han")
    assert len(vocab) == 7  # 耶 稣 说 ： twice each, ties by code point
    assert [vocab.piece(i) for i in range(5, 7)] == ["稣", "耶"]


def test_whitespace_vocabulary_saves_no_word_split(tmp_path):
    WordVocab.train(ZH, size=100).save(tmp_path / "v")
    assert "word_split" not in (tmp_path / "v" / "vocab.json").read_text()
    assert Vocabulary.load(tmp_path / "v").word_split == "whitespace"


@pytest.mark.parametrize("vocab_type", ["bpe", "unigram"])
def test_han_with_a_subword_vocabulary_names_the_key(tmp_path, vocab_type):
    with pytest.raises(DocMTInputError, match="vocab.word_split.*vocab.type=word"):
        build_vocabularies(VocabConfig(type=vocab_type, word_split="han"), ZH, ZH, tmp_path, "fp")


def test_unknown_word_split_names_the_key(tmp_path):
    with pytest.raises(DocMTInputError, match="vocab.word_split.*got 'chars'"):
        build_vocabularies(VocabConfig(type="word", word_split="chars"), ZH, ZH, tmp_path, "fp")


def test_word_split_is_part_of_the_cache_key(tmp_path):
    spec = write_jsonl(tmp_path / "c.jsonl", random_documents(6, seed=3, splits=("train", "valid", "test")))
    data = DataConfig(corpus=spec, cache_dir=str(tmp_path / "cache"))
    whitespace = cache_layout(data, VocabConfig(type="word", size=50))
    han = cache_layout(data, VocabConfig(type="word", size=50, word_split="han"))
    assert han.vocab_dir != whitespace.vocab_dir
    assert all(han.split_dirs[s] != whitespace.split_dirs[s] for s in whitespace.split_dirs)


def test_han_vocabularies_build_and_load_from_the_cache(tmp_path):
    cfg = VocabConfig(type="word", size=50, joint=False, word_split="han")
    src, tgt = build_vocabularies(cfg, ZH, ["Jesus said"], tmp_path, "fp")
    again, _ = build_vocabularies(cfg, [], [], tmp_path, "fp")
    assert src.word_split == tgt.word_split == again.word_split == "han"
    assert again.encode_batch(ZH) == src.encode_batch(ZH)


def test_word_split_is_a_config_key():
    cfg = to_dataclass(compose(None, ["vocab.type=word", "vocab.word_split=han"]))
    assert cfg.vocab.word_split == "han"
