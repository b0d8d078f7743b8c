"""The synthetic context-phenomena generator and its contrastive suite."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from lightning_docmt.data import synthetic
from lightning_docmt.data.contrastive_suites import context_free_ceiling, read_suite
from lightning_docmt.data.corpora import corpus_fingerprint, read_corpus
from lightning_docmt.errors import DocMTInputError

# A test split large enough for rates to be measured to about +-2.5% per phenomenon.
LARGE = "tiny?test_docs=1500"


@pytest.fixture(scope="module")
def suite() -> list[dict]:
    return synthetic.contrastive_suite(LARGE)


@pytest.fixture(scope="module")
def lexicon() -> synthetic.Lexicon:
    return synthetic.build_lexicon(2)


def test_tiny_preset_sizes_and_splits():
    corpus = read_corpus("synthetic:tiny")
    assert [len(corpus.split(s)) for s in ("train", "valid", "test")] == [200, 20, 40]
    assert all(8 <= len(d) <= 16 for d in corpus.documents)
    assert len({d.doc_id for d in corpus.documents}) == len(corpus.documents)


def test_same_seed_same_corpus_other_seed_other_corpus():
    first, again = synthetic.generate("tiny"), synthetic.generate("synthetic:tiny?seed=1")
    other = synthetic.generate("tiny?seed=2")
    assert [(d.src, d.tgt) for d in first.documents] == [(d.src, d.tgt) for d in again.documents]
    assert [d.src for d in first.documents] != [d.src for d in other.documents]
    assert corpus_fingerprint("synthetic:tiny") != corpus_fingerprint("synthetic:tiny?seed=2")


def test_test_split_does_not_depend_on_train_size():
    small, large = synthetic.generate("tiny?docs=10"), synthetic.generate("tiny?docs=300")
    assert len(small.split("train")) == 10 and len(large.split("train")) == 300
    assert [d.src for d in small.split("test")] == [d.src for d in large.split("test")]
    assert [d.src for d in small.split("valid")] == [d.src for d in large.split("valid")]


def test_sentences_option_sets_the_train_size():
    corpus = synthetic.generate("tiny?sentences=3000&valid_docs=1&test_docs=1")
    train = corpus.split("train")
    total = sum(len(d) for d in train)
    assert 3000 <= total < 3000 + 16  # stops after the document that reaches the target
    assert sum(len(d) for d in train[:-1]) < 3000


@pytest.mark.parametrize("name, match", [
    ("huge", "unknown preset"),
    ("tiny?doc=3", "did you mean docs"),
    ("tiny?docs=three", "must be an integer"),
    ("tiny?docs=0", "docs must be >= 1"),
    ("tiny?topics=1", "topics must be in 2..8"),
    ("tiny?min_len=3", "min_len"),
    ("tiny?min_len=12&max_len=10", "min_len"),
    ("tiny?docs=5&sentences=100", "either docs or sentences"),
    ("tiny?local_cues=101", "local_cues must be in 0..100"),
    ("tiny?gendered_articles=2", "gendered_articles must be 0 or 1"),
])
def test_bad_names(name, match):
    with pytest.raises(DocMTInputError, match=match):
        synthetic.parse_name(name)


def test_sentences_are_short_and_vocabulary_small():
    corpus = synthetic.generate("tiny")
    lengths = [len(s.split()) for d in corpus.documents for s in d.src + d.tgt]
    assert min(lengths) >= 5 and max(lengths) <= 12
    for side in ("src", "tgt"):
        vocabulary = {w for d in corpus.documents for s in getattr(d, side) for w in s.split()}
        assert 150 <= len(vocabulary) <= 400


def test_translation_is_word_by_word_outside_the_phenomena(lexicon):
    """Every source word has one translation, except `the` (le/la), `it` (il/elle), the ambiguous
    verbs (one sense per topic) and `near` (two target words)."""
    corpus = synthetic.generate("tiny")
    src_words = Counter(w for d in corpus.documents for s in d.src for w in s.split())
    tgt_words = Counter(w for d in corpus.documents for s in d.tgt for w in s.split())
    ambiguous = {src for src, _ in lexicon.ambiguous}
    # Each unambiguous source word is translated by exactly one target word with the same count.
    dictionary = dict(lexicon.nouns + lexicon.adjectives + lexicon.verbs + lexicon.adverbs
                      + lexicon.times + tuple(p for topic in lexicon.cues for p in topic))
    dictionary |= {"we": "nous", "then": "puis", "very": "très", "and": "et", ".": "."}
    for word, count in src_words.items():
        if word in dictionary:
            assert tgt_words[dictionary[word]] == count
        else:
            assert word in ambiguous | {"the", "it", "near"}
    assert tgt_words["le"] + tgt_words["la"] == src_words["the"]
    assert tgt_words["il"] + tgt_words["elle"] == src_words["it"]
    assert tgt_words["près"] == tgt_words["de"] == src_words["near"]


def test_lexicon_genders_balanced_and_arbitrary(lexicon):
    genders = Counter(lexicon.genders)
    assert genders == {"m": 12, "f": 12}
    # The form does not give the gender away: guessing a noun's gender from the other nouns that
    # end in the same letter (leave-one-out) does no better than chance allows.
    for side in (0, 1):
        hits = 0.0
        for i, (noun, gender) in enumerate(zip(lexicon.nouns, lexicon.genders)):
            same_ending = Counter(g for j, (other, g) in enumerate(zip(lexicon.nouns, lexicon.genders))
                                  if j != i and other[side][-1] == noun[side][-1])
            hits += 0.5 if same_ending["m"] == same_ending["f"] else \
                float(same_ending.most_common(1)[0][0] == gender)
        assert hits / len(lexicon.nouns) < 0.5 + 2 * math.sqrt(0.25 / len(lexicon.nouns))


def test_context_is_the_whole_document_before_the_item(suite):
    document = {d.doc_id: d for d in synthetic.generate(LARGE).split("test")}
    for example in suite:
        doc_id, index = example["id"].rsplit(".", 1)
        doc = document[doc_id]
        assert example["src_context"] == doc.src[:int(index)]
        assert example["tgt_context"] == doc.tgt[:int(index)]
        assert example["src"] == doc.src[int(index)]


def test_antecedent_is_exactly_d_sentences_back(suite):
    pronoun_items = [e for e in suite if e["phenomenon"].startswith("pronoun_d")]
    assert pronoun_items
    for example in pronoun_items:
        distance = int(example["phenomenon"][-1])
        context = example["tgt_context"]
        assert distance <= len(context) == len(example["src_context"])
        antecedent = context[-distance].split()
        article = next(w for w in antecedent if w in ("le", "la"))
        expected = {"le": "il", "la": "elle"}[article]
        assert example["candidates"][example["label"]].split()[:2].count(expected) == 1
        between = [s.split() for s in example["src_context"][len(context) - distance + 1:]]
        assert len(between) == distance - 1
        assert not [s for s in between if "the" in s or "it" in s]  # fillers only


def test_distance_is_uniform_over_one_to_three(suite):
    counts = Counter(e["phenomenon"] for e in suite if e["phenomenon"].startswith("pronoun"))
    assert set(counts) == {"pronoun_d1", "pronoun_d2", "pronoun_d3"}
    n = sum(counts.values())
    chi2 = sum((c - n / 3) ** 2 / (n / 3) for c in counts.values())
    assert chi2 < 13.8  # chi-square, 2 degrees of freedom, p = 0.001


def test_sense_is_set_by_a_cue_in_the_previous_sentence_only(suite, lexicon):
    cue_topic = lexicon.cue_topic()
    senses = dict(lexicon.ambiguous)
    sense_items = [e for e in suite if e["phenomenon"] == "sense"]
    assert len(sense_items) > 500
    for example in sense_items:
        assert not set(example["src"].split()) & set(cue_topic)
        topics = {cue_topic[w] for w in example["src_context"][-1].split() if w in cue_topic}
        assert len(topics) == 1
        verb = next(w for w in example["src"].split() if w in senses)
        assert senses[verb][topics.pop()] in example["candidates"][example["label"]].split()


def test_local_cues_put_the_topic_cue_into_that_share_of_sense_sentences(lexicon):
    """`local_cues=40`: about 40% of the sense sentences hold a cue of their document's topic, and
    their verb takes that topic's sense; they are not items. The others are items as before."""
    name = "tiny?docs=1&valid_docs=1&test_docs=1500&local_cues=40"
    items = {e["id"] for e in synthetic.contrastive_suite(name)}
    senses, cue_topic = dict(lexicon.ambiguous), lexicon.cue_topic()
    local = total = 0
    for doc in synthetic.generate(name).split("test"):
        for index, (src, tgt) in enumerate(zip(doc.src, doc.tgt)):
            verbs = [w for w in src.split() if w in senses]
            if not verbs:
                continue
            total += 1
            topics = {cue_topic[w] for w in src.split() if w in cue_topic}
            assert (f"{doc.doc_id}.{index}" in items) == (not topics)
            if topics:
                local += 1
                (topic,) = topics
                assert senses[verbs[0]][topic] in tgt.split()
    assert total > 2000
    assert abs(local / total - 0.4) < 4 * math.sqrt(0.24 / total)


def test_gendered_articles_mark_the_antecedent_gender_in_the_source_and_change_nothing_else(lexicon):
    """`gendered_articles=1`: every `the` of the source becomes `thi` before a masculine noun and `tha`
    before a feminine one; every other word, the target and the suite stay as without the option."""
    name = "tiny?docs=50&local_cues=40"
    plain, marked = synthetic.generate(name), synthetic.generate(f"{name}&gendered_articles=1")
    gender = dict(zip((src for src, _ in lexicon.nouns), lexicon.genders))
    articles = Counter()
    for before, after in zip(plain.documents, marked.documents):
        assert after.tgt == before.tgt
        for old, new in zip(before.src, after.src):
            old_words, new_words = old.split(), new.split()
            assert len(old_words) == len(new_words)
            for i, (o, n) in enumerate(zip(old_words, new_words)):
                if o != "the":
                    assert n == o
                    continue
                noun = next(w for w in old_words[i + 1:] if w in gender)  # "the [ADJ] NOUN"
                assert n == synthetic.GENDERED_ARTICLES[gender[noun]]
                articles[n] += 1
    assert articles["thi"] > 50 and articles["tha"] > 50
    unchanged = ("id", "src", "tgt_context", "candidates", "label", "phenomenon")  # not the source context
    suites = [synthetic.contrastive_suite(n) for n in (name, f"{name}&gendered_articles=1")]
    assert [[e[k] for k in unchanged] for e in suites[0]] == [[e[k] for k in unchanged] for e in suites[1]]


def test_candidates_differ_only_in_the_context_dependent_word(suite):
    for example in suite:
        tokens = [c.split() for c in example["candidates"]]
        assert len({len(t) for t in tokens}) == 1
        differing = [i for i in range(len(tokens[0])) if len({t[i] for t in tokens}) > 1]
        assert len(differing) == 1


def test_no_source_word_predicts_the_answer(suite):
    """Within each phenomenon, the share of each answer among the items containing a given source
    word stays within 4.5 standard errors of its overall share."""
    for prefix in ("pronoun", "sense"):
        items = [e for e in suite if e["phenomenon"].startswith(prefix)]
        overall = sum(e["label"] for e in items) / len(items)
        by_word: dict[str, list[int]] = {}
        for example in items:
            for word in set(example["src"].split()):
                by_word.setdefault(word, []).append(example["label"])
        for word, labels in by_word.items():
            if len(labels) >= 50:
                stderr = math.sqrt(overall * (1 - overall) / len(labels))
                assert abs(sum(labels) / len(labels) - overall) < 4.5 * stderr, (prefix, word)


def test_context_free_ceiling_matches_the_documented_rate(suite):
    expected = synthetic.expected_context_free_accuracy(LARGE)
    assert expected == {"pronoun_d1": 0.5, "pronoun_d2": 0.5, "pronoun_d3": 0.5, "sense": 0.5}
    learned_on = synthetic.contrastive_suite("tiny?docs=2000", split="train")
    measured = context_free_ceiling(suite, reference=learned_on)
    for phenomenon, rate in expected.items():
        n = sum(e["phenomenon"] == phenomenon for e in suite)
        assert abs(measured[phenomenon] - rate) < 4 * math.sqrt(0.25 / n), phenomenon


def test_documented_rate_follows_the_number_of_topics():
    assert synthetic.expected_context_free_accuracy("tiny?topics=4")["sense"] == 0.25
    items = synthetic.contrastive_suite("tiny?topics=4&test_docs=400")
    sense = [e for e in items if e["phenomenon"] == "sense"]
    assert all(len(e["candidates"]) == 4 for e in sense)
    labels = Counter(e["label"] for e in sense)
    assert set(labels) == {0, 1, 2, 3}


def test_written_suite_is_valid_and_round_trips(tmp_path):
    path = tmp_path / "suite.jsonl"
    n = synthetic.write_contrastive_suite("tiny", path)
    examples = read_suite(path)
    assert len(examples) == n > 0
    assert examples == synthetic.contrastive_suite("tiny")
