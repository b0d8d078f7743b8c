"""Language-aware settings (`data/languages.py`): the BLEU tokenizer of `eval.tokenize: auto` and
sentencepiece's character coverage, by the languages of the run's data."""

from __future__ import annotations

import pytest

from lightning_docmt.config.schema import DataConfig, EvalConfig, VocabConfig
from lightning_docmt.data import vocab as vocab_lib
from lightning_docmt.data.languages import bleu_tokenizer, character_coverages, data_languages, spec_languages
from lightning_docmt.evaluation.metrics import corpus_bleu

AUTO = EvalConfig(tokenize="auto")


@pytest.mark.parametrize("spec, pair", [
    ("bible:zh-en?src=cnv", ("zh", "en")), ("bible:en-ja", ("en", "ja")), ("bible:en-fr", ("en", "fr")),
    ("synthetic:tiny", (None, None)), ("jsonl:zh-en.jsonl", (None, None)), (None, (None, None))])
def test_the_pair_a_corpus_spec_names(spec, pair):
    assert spec_languages(spec) == pair


def test_explicit_languages_win_over_the_spec_and_the_test_split_decides():
    assert data_languages(DataConfig(corpus="bible:en-fr", tgt_lang="de")) == ("en", "de")
    assert data_languages(DataConfig(corpus="synthetic:tiny", test="bible:zh-en")) == ("zh", "en")


@pytest.mark.parametrize("corpus, tokenizer, signature", [
    ("bible:en-zh?tgt=cnv", "zh", "tok:zh"),
    ("bible:en-ja", "ja-mecab", "tok:ja-mecab-0.996-IPA"),
    ("bible:zh-en?src=cnv", "13a", "tok:13a"),
    ("bible:en-fr", "13a", "tok:13a")])
def test_auto_bleu_tokenizer_by_target_language_is_in_the_signature(corpus, tokenizer, signature):
    chosen = bleu_tokenizer(AUTO, DataConfig(corpus=corpus))
    assert chosen == tokenizer
    assert signature in corpus_bleu(["他们都被圣灵充满。"], [["他们都被圣灵充满。"]], tokenize=chosen).signature


def test_the_chinese_and_japanese_tokenizers_count_words_not_sentences():
    hyp, ref = "他们都被圣灵充满", "他们都被圣灵所充满"  # one character more in the reference
    assert corpus_bleu([hyp], [[ref]], tokenize="13a").score == 0.0  # one "word" each, different
    assert corpus_bleu([hyp], [[ref]], tokenize="zh").score > 40
    hyp, ref = "みなが聖霊に満たされた", "みなが聖霊に満たされました"
    assert corpus_bleu([hyp], [[ref]], tokenize="13a").score == 0.0
    assert corpus_bleu([hyp], [[ref]], tokenize="ja-mecab").score > 40


def test_an_explicit_tokenizer_is_kept():
    assert bleu_tokenizer(EvalConfig(tokenize="char"), DataConfig(corpus="bible:en-ja")) == "char"


@pytest.mark.parametrize("corpus, joint, coverages", [
    ("bible:zh-en?src=cnv", True, (0.9995, 0.9995)), ("bible:zh-en?src=cnv", False, (0.9995, 1.0)),
    ("bible:en-ko", False, (1.0, 0.9995)), ("bible:en-fr", True, (1.0, 1.0)),
    ("synthetic:tiny", True, (1.0, 1.0))])
def test_character_coverage_by_language(corpus, joint, coverages):
    assert character_coverages(VocabConfig(joint=joint), DataConfig(corpus=corpus)) == coverages
    explicit = VocabConfig(joint=joint, character_coverage=0.98)
    assert character_coverages(explicit, DataConfig(corpus=corpus)) == (0.98, 0.98)


def test_each_side_is_trained_with_its_coverage_and_the_cache_key_follows(monkeypatch, tmp_path):
    seen = []
    train = vocab_lib.SentencePieceVocab.train

    def recording(sentences, **kwargs):
        seen.append(kwargs["character_coverage"])
        return train(sentences, **kwargs)

    monkeypatch.setattr(vocab_lib.SentencePieceVocab, "train", recording)
    cfg = VocabConfig(type="bpe", size=40, joint=False)
    sentences = ["他们都被圣灵充满", "the spirit filled them all"] * 20
    vocab_lib.build_vocabularies(cfg, sentences[::2], sentences[1::2], tmp_path, "fp", (0.9995, 1.0))
    assert seen == [0.9995, 1.0]
    keys = {vocab_lib.vocab_key(cfg, "fp", c) for c in [(0.9995, 1.0), (1.0, 1.0), (1.0, 0.9995)]}
    assert len(keys) == 3
