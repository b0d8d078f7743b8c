"""Psalm superscriptions ("A Psalm of David.") at the start of a psalm's verse 1.

KJV, WEB, Darby, CNV, Almeida, ADB, ULB, Swahili, Hindi, OPV, NTB and the Vietnamese version print
them as headings outside the verse (WEB's leak is handled in `bible_cleanup.py`); the other 19
versions (`TITLED`) carry them inside verse 1. When exactly one side of a pair is titled, the reader
removes the superscription from that side where it can be found reliably, counted in
`Corpus.skipped["psalm_superscription_removed"]`. Only the 116 psalms that have a superscription in
the Hebrew text are touched (in the other 34 a leading "Hallelujah", Elberfelder's "(Lobet Jehova!)",
is verse text that the KJV has too). Four ways to find one, tried in order on the raw verse:

1. versification markers: verse 1 is `title (N:2) text`: everything before the last marker is title
   (Segond, Ostervald, Schlachter, Shinkaiyaku, Ogienko and Terjemahan Baru mark their longer titles
   so, Synodal about half);
2. a leading `(...)`: RVA 1989, Elberfelder, Cornilescu, the Bengali version (a few psalms only);
3. a capitalised first word: Diodati and RV1909 print the first word of every chapter in capitals
   ("Salmo di Davide IL Signore è il mio pastore"), so the title is what precedes it;
4. a closed list of title formulas per language, matched at the start as a run of whole units that
   each end in `.`, `,`, `;` or `:` (Italian also before a capitalised word) and are not followed by a
   lowercase word (`Au chef des chantres. Psaume de David.`).

Titles found (of 116), measured: Diodati, RV1909, RVA 1989, Terjemahan Baru 116; Ogienko, Segond,
Schlachter 115; Shinkaiyaku 114; Elberfelder, Ostervald, Cornilescu 113; BBE 111; Synodal 110; KJV
2000 104; Warszawska 103; Nuova Diodati 101; SVD 93; Bengali 5; Korean 0 (its titles have no
punctuation to find their end). The rest stay, as does the descriptive part of a title when only its
formulas are found ("To the Chief Musician. | A Psalm of David when Nathan..."), and a verse that is
nothing but a title (Psalm 13 in Segond, whose verses are offset by one against the KJV), so no verse
is emptied.
"""

from __future__ import annotations

import re

TITLED = frozenset("123689bdejlnorsuvyz")
UNTITLED_PSALMS = frozenset(
    (1, 2, 10, 33, 43, 71, 91, 93, 94, 95, 96, 97, 99, 104, 105, 106, 107, 111, 112, 113, 114, 115, 116,
     117, 118, 119, 135, 136, 137, 146, 147, 148, 149, 150))
PARENTHESISED = frozenset("9eub")

_MARKER = re.compile(r"\(\d+[:-]\d+[a-z]?\)")
_LEADING_PARENTHESES = re.compile(r"\s*\([^()]*\)\s*")
# Diodati and RV1909 print the first word of a chapter in capitals: "Salmo di Davide IL Signore".
CAPITALISED = frozenset("dv")
_CAPITALISED_OPENING = re.compile(r"[¿¡\xad]*(?:[A-ZÁÉÍÓÚÑ]’|[A-ZÁÉÍÓÚÑ]\s+)?[A-ZÁÉÍÓÚÑÀÈÌÒÙ]{2,}\b")

# Title units read off the verse 1s of the database, per language (closed lists); a unit ends in `.`,
# `,`, `;` or `:` (Italian: or before a capitalised word).
_UNITS = {
    "fr": ("Au chef des chantres", "Psaume de David", "Psaume d'Asaph", "Psaume de louange", "Psaume",
           "Cantique des degrés", "Cantique de David", "Cantique d'Asaph", "Cantique", "Hymne de David",
           "Prière de David", "Prière de Moïse, homme de Dieu", "Louange", "De David", "De Salomon",
           "Des fils de Koré", "Au maître-chantre", "Psaume des enfants de Coré", "Cantique de Maaloth",
           "de David", "de Salomon", "Mitcam (cantique) de David", "Maskil (cantique) de David",
           "Maskil (cantique) d'Asaph", "cantique des enfants de Coré", "Cantique des enfants de Coré",
           "Cantique de louange"),
    "de": ("Dem Vorsänger", "Ein Psalm Davids", "Von David", "von David", "Ein Wallfahrtslied",
           "Von den Kindern Korahs", "Ein Psalmlied", "Mit Saitenspiel", "Ein Psalm",
           "Ein Psalm Asaphs", "Eine Unterweisung von David", "Eine Unterweisung", "Ein Gebet Davids",
           "Eine Denkschrift von David", "Von Salomo", "Von Asaph", "von Asaph",
           "Ein Gebet Moses, des Mannes Gottes", "Ein Lobgesang", "Ein Loblied"),
    "it": ("Sul motivo", "»Non distruggere«", "»La morte del figlio«", "»La cerva dell'aurora«",
           "»I gigli«", "»Il giglio della testimonianza«", "»I gigli della testimonianza«",
           "Da cantarsi mestamente", "Per jeduthum", "Sui »Gigli«", "Su »I gigli«",
           "Un poema dei figli di Kore", "Un cantico d'amore", "Canto", "Poema dei figli di kore",
           "Salmo dei figli di kore", "Dei figli di Kore", "per voce di soprano",
           "Salmo dei figli del Kore", "Cantico per il giorno del sabato", "Preghiera",
           "Al maestro del coro", "Salmo di Davide", "Canto dei pellegrinaggi", "Cantico",
           "Salmo di Asaf", "Di Davide", "Per strumenti a corda", "Salmo dei figli di Kore",
           "Sulla Ghittea", "Salmo", "Su un'arpa a otto corde", "Preghiera di Davide",
           "Cantico di Davide", "Salmo di lode", "Per flauto", "Inno di Davide",
           "Poema dei figli di Kore", "Per Jeduthun", "Per ricordare", "Per far ricordare",
           "Salmo di Salomone", "Cantico di Asaf", "Di Salomone", "Preghiera di Mosè, uomo di Dio"),
    "en": ("To the Chief Musician upon gittith", "To the Chief Musician upon sheminith",
           "To the Chief Musician upon aijeleth shahar", "To the Chief Musician on neginoth",
           "To the Chief Musician upon mahalath", "To the Chief Musician upon shoshannim",
           "To the Chief Musician upon neginah", "To the Chief Musician upon shushaneduth",
           "To the Chief Musician upon shoshannim - Eduth",
           "To the Chief Musician for the Sons of Korah", "To the Chief Musician for the sons of Korah",
           "To the Chief Musician upon mahanath leannoth", "altaschith", "a maschil",
           "a Psalm of David", "to jeduthun", "for the Sons of Korah", "With flutes",
           "According to sheminith", "A Psalm and Song of David", "A Psalm or Song of David",
           "A Psalm of David the servant of the LORD", "A michtam of David", "A prayer of David",
           "A song upon alamoth", "A Psalm or Song for the Sons of Korah",
           "A maschil of Ethan the Ezrahite", "A maschil of David", "A Psalm of praise of David",
           "a song of loves", "A Song or Psalm for the Sons of Karah",
           "A maschil of Heman the Ezrahite", "A Psalm or Song for the Sabbath day",
           "To bring to remembrance", "to bring to remembrance",
           "To the chief music-maker on corded instruments",
           "To the chief music-maker on wind instruments", "on the Sheminith",
           "To the chief music-maker on the Gittith", "To the chief music-maker on Muthlabben",
           "For the chief music-maker", "For the chief music-maker on the Sheminith",
           "To the chief music-maker on Aijeleth-hash-shahar", "put to Shoshannim", "put to Alamoth",
           "Alamoth", "put to Mahalath", "on Neginoth", "put to Jonath elem rehokim",
           "put to Al-tashheth", "put to At-tashheth", "put to Shushan-eduth", "For teaching",
           "put to Neginoth", "put to Shoshannim-eduth", "put to the Gittith",
           "put to Mahalath Leannoth", "A Song of praise", "Of Jeduthun", "On a corded instrument",
           "With corded instruments", "Of the servant of the Lord", "A Song of loves",
           "Of Heman the Ezrahite", "Of Ethan the Ezrahite", "A Song for the Sabbath",
           "A Song at the blessing of the House", "A Psalm of David", "To the Chief Musician",
           "A song of ascents", "A Psalm of Asaph", "Of David", "A Psalm of the sons of Korah",
           "A Psalm or Song of Asaph", "With stringed instruments", "A maschil", "To Jeduthun",
           "A song", "A Song of David", "A Song or Psalm", "A maschil of Asaph",
           "A Psalm for the Sons of Korah", "A Psalm", "A Prayer of David", "A Psalm of Praise",
           "A Prayer of Moses, the man of God", "To the chief music-maker", "A Song of the going up",
           "A Song", "Maschil", "Of Asaph", "Of the sons of Korah", "Michtam", "A Prayer",
           "To keep in memory", "After Jeduthun", "Of Solomon", "A Psalm of Solomon",
           "A miktam of David"),
    "id": ("Untuk pemimpin biduan", "Mazmur Daud", "Dari Daud", "Nyanyian ziarah", "Nyanyian",
           "Dengan permainan kecapi", "Mazmur", "Mazmur Asaf", "Dari bani Korah", "Mazmur bani Korah",
           "Nyanyian ziarah Daud", "Nyanyian ziarah Salomo", "Doa Daud", "Nyanyian pengajaran",
           "Nyanyian pengajaran Daud", "Nyanyian pengajaran Asaf", "suatu nyanyian", "Miktam",
           "Nyanyian Mazmur", "Dari Salomo", "Doa Musa, abdi Allah", "Mazmur untuk korban syukur",
           "Puji-pujian dari Daud"),
    "uk": ("Для дириґетна хору", "Псалом Давидів", "Давидів", "Пісня прочан", "Пісня", "Псалом",
           "Синів Кореєвих", "Псалом Асафів", "Давидова", "Молитва Давидова", "Псалом навчальний",
           "Псалом навчальний Давидів", "Пісня навчальна", "Пісня навчальна Асафова", "Асафів",
           "Соломонів", "Соломонова", "Молитва Мойсея, чоловіка Божого", "Вдячний псалом",
           "Хвала Давидова", "Золота пісня Давадова"),
    "pl": ("Na nutę", '"Tłoczący wino"', '"Umieraj za syna"', '"Łania w czasie zorzy porannej..."',
           '"Lilie..."', '"Nie zatracaj..."', '"Lilia świadectwa"', '"Niema gołębica w dali"',
           "z grą na fletach", "na oktawę", "Na oktawę", "Dla Jedutuna", "Pieśń Dawida",
           "Pieśń na poświęcenie przybytku", "Przewodnikowi chóru", "Psalm Dawidowy", "Dawidowy",
           "Pieśń pielgrzymek", "Pieśń", "Psalm Asafowy", "z grą na strunach", "Psalm synów Koracha",
           "Psalm", "Pieśń pouczająca", "Dawidowa", "Asafowy", "Pieśń pouczająca synów Koracha",
           "Modlitwa", "Modlitwa Dawida", "Miktam Dawidowy", "Według Jedutuna",
           "Przy ofierze pamiątkowej", "Pieśń pouczająca Dawida"),
    "ru": ("Начальнику хора", "Псалом Давида", "Песнь Давида", "Молитва Давида", "Псалом Асафа",
           "Песнь", "Учение Асафа", "Сынов Кореевых", "Псалом", "Молитва Моисея, человека Божия",
           "Давида", "Псалом Давида хвалебный", "Песнь восхождения", "Соломона", "О Соломоне", "Учение",
           "Учение Давида", "Хвала Давида"),
    "ar": ("لامام المغنين", "مزمور لداود", "لداود", "مزمور", "ترنيمة المصاعد", "لبني قورح",
           "لامام المغنين على ذوات الاوتار", "تسبيحة", "لامام المغنين على السوسن", "لآساف",
           "مزمور لآساف", "صلاة لداود", "قصيدة", "لامام المغنين على يدوثون", "لسليمان", "قصيدة لآساف",
           "لامام المغنين على الجتية"),
}
_LANG = {"l": "fr", "o": "fr", "s": "de", "e": "de", "1": "it", "2": "en", "3": "en", "6": "id",
         "8": "uk", "z": "pl", "y": "ar", "r": "ru"}
_MARKS = "\u200e\u200f"


def _formula(lang: str) -> re.Pattern:
    units = "|".join(map(re.escape, sorted(_UNITS[lang], key=len, reverse=True)))
    end = rf"[{_MARKS}]*[.,;:](?:[\s{_MARKS}]+|$)" + (r"|\s+(?=[A-Z])" if lang == "it" else "")
    return re.compile(rf"^(?:{_MARKER.pattern}\s*)?(?:(?:{units})(?:{end}))+")


_FORMULAS = {code: _formula(lang) for code, lang in _LANG.items()}


def strip_title(code: str, text: str, chapter: int) -> str:
    """Psalm `chapter`'s verse 1 in version `code` (raw, markers intact) without its superscription.

    Returns the text unchanged when the psalm has none, when none is found, or when the verse is
    nothing but the title.
    """
    if chapter in UNTITLED_PSALMS:
        return text
    markers = list(_MARKER.finditer(text))
    if markers:
        head, tail = text[:markers[-1].start()], text[markers[-1].start():]
        if _MARKER.sub("", head).strip() and _MARKER.sub("", tail).strip():
            return tail
    if code in PARENTHESISED:
        match = _LEADING_PARENTHESES.match(text)
        if match and text[match.end():].strip():
            return text[match.end():]
    if code in CAPITALISED:
        match = _CAPITALISED_OPENING.search(text)
        if match and match.start() > 0 and text[:match.start()].strip():
            return text[match.start():]
    formula = _FORMULAS.get(code)
    if formula is not None:
        rest = formula.sub("", text, count=1)
        if rest != text and rest.strip() and not rest.lstrip()[:1].islower():
            return rest
    return text
