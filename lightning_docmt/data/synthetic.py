"""A seeded generator of parallel documents whose translation is decidable only from context
(docs/design.md section 6), and its contrastive suite.

Language. Pseudo-English -> pseudo-French with a closed vocabulary of ~180 words per side (made-up
word forms, fixed by `LEXICON_SEED`), translated word by word except for the adjective, which follows
its noun in the target, and for two context-dependent words:

- Pronoun gender (phenomena `pronoun_d1`, `pronoun_d2`, `pronoun_d3`). An *introduction* sentence
  names a noun ("the NOUN ..." -> "le|la NOUN' ..."); 1, 2 or 3 sentences later (uniformly) a
  *pronoun* sentence says "it ..." whose target pronoun is `il` or `elle` after the grammatical gender
  of that noun, the most recent one named. The sentences in between are fillers, which name no noun
  and hold no pronoun. Genders are lexical and arbitrary: 12 masculine and 12 feminine nouns, assigned
  by a random draw, so neither the source noun's form nor its target form predicts the gender.
- Word sense (phenomenon `sense`). Every document has a topic (uniform over `topics`). Filler
  sentences carry a topic cue word ("... near CUE"); a *sense* sentence, right after a filler, holds
  an ambiguous verb whose target form is the sense of the document's topic. The sense sentence itself
  contains no cue: the topic is only in earlier sentences. Option `local_cues=P` makes P% of the
  sense sentences carry a cue of their own ("we VERB ADV near CUE ."), as real text often
  disambiguates a word within its sentence; those are decidable without context and are not items.
  A sentence-level model learns from them which cues select which sense, which a frozen sentence
  model needs before a context model on top of it can use a cue read from the context (Zhang et al.
  2018's two-step training; tests/learning/test_learning.py). The pronoun phenomenon has its in-sentence
  analogue built in: the article `le|la` agrees with the noun in the introduction sentence.
  Option `gendered_articles=1` gives the source that agreement too: an introduction sentence says
  `thi NOUN` (masculine) or `tha NOUN` (feminine) instead of `the NOUN`, so the antecedent sentence
  states the gender in a word of its own, as a sense cue states the topic. A model whose context
  features come from encoders apart from the Transformer (Donato et al. 2021's frozen stack) can
  only learn a made-up noun's arbitrary target gender noun by noun from pronoun sentences; with the
  marked article it has one word pair to read (docs/papers/donato2021.md section 8). The pronoun
  sentence stays unmarked, so the context-free bounds below do not change.

Sentences are 5-12 tokens: `[then] SUBJECT VERB [very] ADV (TIME | near CUE) [and VERB ADV] .`, with
the optional parts drawn independently of everything else.

What a sentence-level model can reach at best (`expected_context_free_accuracy`): on pronoun items,
the source sentence ("it" plus words drawn independently of the antecedent) carries no information
about the antecedent's gender, so the best it can do is always choose the more frequent gender: 50%,
since half the nouns are feminine and antecedents are drawn uniformly. On sense items the sentence
carries nothing about the topic, so the best is the most frequent topic: 1/`topics` (50% by default).
A model that reads k previous sentences can resolve every pronoun at distance <= k and every sense
item (the cue is one sentence back), i.e. ~100% with k >= 3. `contrastive_suites.context_free_ceiling`
measures the context-free bound empirically (a rule learned on the train split's suite, applied to
the test split's suite); the tests check that it matches these rates.

Corpus names (`synthetic:NAME` specs): a preset, optionally with options as a query string:

| preset  | train docs | valid docs | test docs |
|---------|-----------:|-----------:|----------:|
| `tiny`  | 200        | 20         | 40        |
| `small` | 2,000      | 100        | 200       |
| `base`  | 20,000     | 200        | 500       |
| `big`   | 170,000 (~2M sentences) | 500 | 1,000 |

Options: `docs` (train documents), `valid_docs`, `test_docs`, `sentences` (instead of `docs`: make
train documents until they hold at least this many sentences), `min_len` / `max_len` (sentences per
document, default 8 / 16), `topics` (2-8, default 2), `local_cues` (0-100, default 0),
`gendered_articles` (0 or 1, default 0), `seed` (default 1). Example:
`synthetic:small?docs=5000&seed=3`, `synthetic:big?sentences=2000000`. Each split is drawn from its
own random stream (seeded by `seed` and the split name), so the valid and test documents do not
depend on the train size.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
from dataclasses import dataclass
from pathlib import Path

from lightning_docmt.data.contrastive_suites import write_suite
from lightning_docmt.data.corpora import split_query
from lightning_docmt.data.types import Corpus, Document
from lightning_docmt.errors import DocMTInputError

GENERATOR_VERSION = "synthetic-v1"
LEXICON_SEED = 20180601
MAX_DISTANCE = 3  # antecedents are 1..3 sentences back
# Words per class (cues: per topic). The classes the phenomena hinge on (nouns and their genders,
# cues and their topics, ambiguous verbs and their senses) are kept small so that a tiny model
# learns them from few examples; the other classes only add variety.
N_NOUNS = 24  # half masculine, half feminine
CLASS_SIZES = {"adjectives": 30, "verbs": 40, "adverbs": 30, "times": 12, "cues": 8, "ambiguous": 8}
MAX_TOPICS = 8

PRESETS: dict[str, dict[str, int]] = {
    "tiny": {"docs": 200, "valid_docs": 20, "test_docs": 40},
    "small": {"docs": 2_000, "valid_docs": 100, "test_docs": 200},
    "base": {"docs": 20_000, "valid_docs": 200, "test_docs": 500},
    "big": {"docs": 170_000, "valid_docs": 500, "test_docs": 1_000},
}

# Episode mix (a document is a first filler then a sequence of episodes) and optional parts.
P_PRONOUN, P_SENSE = 0.50, 0.35
P_THEN, P_VERY, P_ADJ, P_TAIL = 0.25, 0.25, 0.5, 0.25
PRONOUNS = {"m": "il", "f": "elle"}
GENDERED_ARTICLES = {"m": "thi", "f": "tha"}  # source articles under `gendered_articles=1`


@dataclass(frozen=True)
class SyntheticConfig:
    """Resolved generator settings (see the module docstring for their meaning)."""

    preset: str
    docs: int
    valid_docs: int
    test_docs: int
    sentences: int = 0
    min_len: int = 8
    max_len: int = 16
    topics: int = 2
    local_cues: int = 0  # percent of sense sentences that hold their own topic cue
    gendered_articles: int = 0  # 1: the source article of an introduction sentence marks the gender
    seed: int = 1


def parse_name(name: str) -> SyntheticConfig:
    """`small?docs=5000&seed=3` (or `synthetic:small?...`) -> SyntheticConfig."""
    name = name.removeprefix("synthetic:")
    spec = f"synthetic:{name}"
    fields = [f.name for f in dataclasses.fields(SyntheticConfig) if f.name != "preset"]
    preset, options = split_query(name, spec=spec, allowed=fields)
    if preset not in PRESETS:
        raise DocMTInputError(f"'{spec}': unknown preset '{preset}'; presets: {', '.join(PRESETS)}")
    if "docs" in options and "sentences" in options:
        raise DocMTInputError(f"'{spec}': give either docs or sentences, not both")
    values: dict[str, int] = dict(PRESETS[preset])
    for key, text in options.items():
        try:
            values[key] = int(text)
        except ValueError:
            raise DocMTInputError(f"'{spec}': option '{key}' must be an integer, got '{text}'") from None
    config = SyntheticConfig(preset=preset, **values)
    checks = [
        (config.docs >= 1, "docs must be >= 1"),
        (config.valid_docs >= 1 and config.test_docs >= 1, "valid_docs and test_docs must be >= 1"),
        (config.sentences >= 0, "sentences must be >= 0"),
        (MAX_DISTANCE + 1 <= config.min_len <= config.max_len,
         f"need {MAX_DISTANCE + 1} <= min_len <= max_len"),
        (2 <= config.topics <= MAX_TOPICS, f"topics must be in 2..{MAX_TOPICS}"),
        (0 <= config.local_cues <= 100, "local_cues must be in 0..100 (a percentage)"),
        (config.gendered_articles in (0, 1), "gendered_articles must be 0 or 1"),
    ]
    for ok, message in checks:
        if not ok:
            raise DocMTInputError(f"'{spec}': {message}")
    return config


@dataclass(frozen=True)
class Lexicon:
    """Word pairs (source, target) by class; `genders[i]` is "m" or "f" for `nouns[i]`."""

    nouns: tuple[tuple[str, str], ...]
    genders: tuple[str, ...]
    adjectives: tuple[tuple[str, str], ...]
    verbs: tuple[tuple[str, str], ...]
    adverbs: tuple[tuple[str, str], ...]
    times: tuple[tuple[str, str], ...]
    cues: tuple[tuple[tuple[str, str], ...], ...]  # per topic
    ambiguous: tuple[tuple[str, tuple[str, ...]], ...]  # source verb, target sense per topic

    def cue_topic(self) -> dict[str, int]:
        """Source cue word -> topic."""
        return {src: t for t, words in enumerate(self.cues) for src, _ in words}


_SRC_FUNCTION = {"the", *GENDERED_ARTICLES.values(), "it", "we", "then", "very", "and", "near"}
_TGT_FUNCTION = {"le", "la", "il", "elle", "nous", "puis", "très", "et", "près", "de"}


@functools.lru_cache(maxsize=MAX_TOPICS)
def build_lexicon(topics: int) -> Lexicon:
    """The fixed vocabulary (depends only on `LEXICON_SEED` and the number of topics)."""
    rng = random.Random(LEXICON_SEED)
    used_src, used_tgt = set(_SRC_FUNCTION), set(_TGT_FUNCTION)

    def word(consonants: str, vowels: str, ending: str, used: set[str]) -> str:
        while True:
            syllables = rng.randint(2, 3)
            form = "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(syllables))
            form += rng.choice(ending)
            if form not in used:
                used.add(form)
                return form

    def src_word() -> str:
        return word("bdgkmnpstvz", "aeiou", ["", "", "n", "k"], used_src)

    def tgt_word() -> str:
        return word("bcdfjlmnprstv", "aeiouy", ["", "r", "l", "s"], used_tgt)

    def pairs(n: int) -> tuple[tuple[str, str], ...]:
        return tuple((src_word(), tgt_word()) for _ in range(n))

    nouns = pairs(N_NOUNS)
    genders = ["m"] * (N_NOUNS // 2) + ["f"] * (N_NOUNS // 2)
    rng.shuffle(genders)
    adjectives, verbs = pairs(CLASS_SIZES["adjectives"]), pairs(CLASS_SIZES["verbs"])
    adverbs, times = pairs(CLASS_SIZES["adverbs"]), pairs(CLASS_SIZES["times"])
    cues = tuple(pairs(CLASS_SIZES["cues"]) for _ in range(topics))
    ambiguous = tuple((src_word(), tuple(tgt_word() for _ in range(topics)))
                      for _ in range(CLASS_SIZES["ambiguous"]))
    return Lexicon(nouns, tuple(genders), adjectives, verbs, adverbs, times, cues, ambiguous)


@dataclass(frozen=True)
class Item:
    """A context-dependent target word: sentence `index` of its document, token `slot` of the
    target sentence, the possible words `options` and the correct one `answer` (an index)."""

    index: int
    slot: int
    options: tuple[str, ...]
    answer: int
    phenomenon: str


class _DocumentWriter:
    """Builds one document sentence by sentence (see the module docstring for the templates)."""

    def __init__(self, rng: random.Random, lexicon: Lexicon, topic: int, local_cues: int,
                 gendered_articles: bool):
        self.rng, self.lex, self.topic, self.local_cues = rng, lexicon, topic, local_cues
        self.gendered_articles = gendered_articles
        self.src: list[str] = []
        self.tgt: list[str] = []
        self.items: list[Item] = []

    def _sentence(self, subject: tuple[list[str], list[str]], verb: tuple[str, str],
                  ending: tuple[list[str], list[str]]) -> tuple[int, int]:
        """Append one sentence; returns the target positions of its subject and of its verb."""
        rng, lex = self.rng, self.lex
        src, tgt = [], []
        if rng.random() < P_THEN:
            src += ["then"]
            tgt += ["puis"]
        subject_at = len(tgt)
        src += subject[0] + [verb[0]]
        tgt += subject[1] + [verb[1]]
        verb_at = len(tgt) - 1
        if rng.random() < P_VERY:
            src += ["very"]
            tgt += ["très"]
        adverb = rng.choice(lex.adverbs)
        src += [adverb[0]] + ending[0]
        tgt += [adverb[1]] + ending[1]
        if rng.random() < P_TAIL:
            verb2, adverb2 = rng.choice(lex.verbs), rng.choice(lex.adverbs)
            src += ["and", verb2[0], adverb2[0]]
            tgt += ["et", verb2[1], adverb2[1]]
        self.src.append(" ".join(src + ["."]))
        self.tgt.append(" ".join(tgt + ["."]))
        return subject_at, verb_at

    def _time(self) -> tuple[list[str], list[str]]:
        time = self.rng.choice(self.lex.times)
        return [time[0]], [time[1]]

    def _cue(self) -> tuple[list[str], list[str]]:
        cue = self.rng.choice(self.lex.cues[self.topic])
        return ["near", cue[0]], ["près", "de", cue[1]]

    def filler(self) -> None:
        ending = self._cue()  # drawn before the verb (the order of draws fixes the corpus)
        self._sentence((["we"], ["nous"]), self.rng.choice(self.lex.verbs), ending)

    def pronoun_episode(self, distance: int) -> None:
        rng, lex = self.rng, self.lex
        noun_index = rng.randrange(len(lex.nouns))
        noun, gender = lex.nouns[noun_index], lex.genders[noun_index]
        article = "le" if gender == "m" else "la"
        source_article = GENDERED_ARTICLES[gender] if self.gendered_articles else "the"
        if rng.random() < P_ADJ:
            adjective = rng.choice(lex.adjectives)
            subject = ([source_article, adjective[0], noun[0]], [article, noun[1], adjective[1]])
        else:
            subject = ([source_article, noun[0]], [article, noun[1]])
        self._sentence(subject, rng.choice(lex.verbs), self._time())
        for _ in range(distance - 1):
            self.filler()
        pronoun = PRONOUNS[gender]
        slot, _ = self._sentence((["it"], [pronoun]), rng.choice(lex.verbs), self._time())
        options = tuple(PRONOUNS.values())
        self.items.append(Item(len(self.src) - 1, slot, options, options.index(pronoun),
                               f"pronoun_d{distance}"))

    def sense_episode(self) -> None:
        self.filler()
        source, senses = self.rng.choice(self.lex.ambiguous)
        # No draw at local_cues=0, so that the default corpus is unchanged by the option.
        local = self.local_cues > 0 and self.rng.random() * 100 < self.local_cues
        ending = self._cue() if local else self._time()
        _, slot = self._sentence((["we"], ["nous"]), (source, senses[self.topic]), ending)
        if not local:
            self.items.append(Item(len(self.src) - 1, slot, senses, self.topic, "sense"))


def _document(rng: random.Random, lexicon: Lexicon, config: SyntheticConfig) -> _DocumentWriter:
    length = rng.randint(config.min_len, config.max_len)
    writer = _DocumentWriter(rng, lexicon, rng.randrange(config.topics), config.local_cues,
                             bool(config.gendered_articles))
    writer.filler()
    while len(writer.src) < length:
        # A phenomenon starts only where the longest episode fits, so that the distance
        # distribution is not bent by the end of the document.
        room = length - len(writer.src) >= MAX_DISTANCE + 1
        draw = rng.random()
        if room and draw < P_PRONOUN:
            writer.pronoun_episode(rng.randint(1, MAX_DISTANCE))
        elif room and draw < P_PRONOUN + P_SENSE:
            writer.sense_episode()
        else:
            writer.filler()
    return writer


def _split_documents(config: SyntheticConfig, split: str) -> list[tuple[Document, list[Item]]]:
    rng = random.Random(f"{GENERATOR_VERSION}:{config.seed}:{split}")
    lexicon = build_lexicon(config.topics)
    out: list[tuple[Document, list[Item]]] = []
    n_docs = {"train": config.docs, "valid": config.valid_docs, "test": config.test_docs}[split]
    by_sentences = split == "train" and config.sentences > 0
    n_sentences = 0
    while (n_sentences < config.sentences) if by_sentences else (len(out) < n_docs):
        writer = _document(rng, lexicon, config)
        out.append((Document(f"syn-{split}-{len(out):06d}", writer.src, writer.tgt, split),
                    writer.items))
        n_sentences += len(writer.src)
    return out


def generate(name: str) -> Corpus:
    """The corpus `synthetic:NAME`: train, valid and test documents."""
    config = parse_name(name)
    documents = [doc for split in ("train", "valid", "test")
                 for doc, _ in _split_documents(config, split)]
    return Corpus(spec=f"synthetic:{name.removeprefix('synthetic:')}", documents=documents)


def config_fingerprint(name: str) -> str:
    """The resolved settings and generator version (the corpus is a pure function of them)."""
    return json.dumps({"version": GENERATOR_VERSION, **dataclasses.asdict(parse_name(name))},
                      sort_keys=True)


def contrastive_suite(name: str, split: str = "test") -> list[dict]:
    """The contrastive examples of a split, in the generic format of `data/contrastive_suites.py`.

    One example per context-dependent word; candidates are the target sentence with each possible
    word (`il`/`elle`, or one sense per topic), `label` the correct one; the context is every
    previous sentence of the document (source, and reference target), so that a model reading k
    sentences of context reads the same k as in training for any k (contrastive evaluation keeps
    the last k). With only the `MAX_DISTANCE` sentences the items need, a model trained with 4
    lost its fourth sentence at test time and dropped to 66% on `pronoun_d3` (Table 1, row k4).
    """
    config = parse_name(name)
    examples = []
    for doc, items in _split_documents(config, split):
        for item in items:
            tokens = doc.tgt[item.index].split(" ")
            candidates = []
            for option in item.options:
                tokens[item.slot] = option
                candidates.append(" ".join(tokens))
            examples.append({
                "id": f"{doc.doc_id}.{item.index}",
                "src": doc.src[item.index],
                "src_context": doc.src[:item.index],
                "tgt_context": doc.tgt[:item.index],
                "candidates": candidates,
                "label": item.answer,
                "phenomenon": item.phenomenon,
            })
    return examples


def write_contrastive_suite(name: str, path: str | Path, split: str = "test") -> int:
    """Write `contrastive_suite(name, split)` as JSONL; returns the number of examples."""
    examples = contrastive_suite(name, split)
    write_suite(examples, path)
    return len(examples)


def expected_context_free_accuracy(name: str) -> dict[str, float]:
    """Best accuracy per phenomenon without context, from the generator's distributions.

    Pronouns: the antecedent noun is uniform over the lexicon, so P(gender) is the share of nouns
    of that gender and the best context-free choice scores the larger share. Sense: the topic is
    uniform, so the best is 1/topics.
    """
    config = parse_name(name)
    genders = build_lexicon(config.topics).genders
    pronoun = max(genders.count(g) for g in PRONOUNS) / len(genders)
    rates = {f"pronoun_d{d}": pronoun for d in range(1, MAX_DISTANCE + 1)}
    rates["sense"] = 1.0 / config.topics
    return rates
