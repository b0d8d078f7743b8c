"""Corpus readers on the real files in ../shared/data and on malformed inputs written to tmp_path.

Expected counts come from the data README (and the papers/releases it cites), not from the readers.
"""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path

import pytest

from lightning_docmt.data.corpora import corpus_fingerprint, read_corpus
from lightning_docmt.data.corpora.bible import _database_digest, database_path
from lightning_docmt.errors import DocMTInputError
from tests.helpers.paths import SHARED_DATA

DATA = SHARED_DATA
IWSLT = DATA / "iwslt17-xml"
MARUF = DATA / "maruf-ted-ende"


def _counts(corpus) -> tuple[int, int]:
    return len(corpus.documents), corpus.n_sentences


def _raises_at(spec: str, path: Path, line: int | None, match: str) -> None:
    with pytest.raises(DocMTInputError, match=match) as err:
        read_corpus(spec)
    where = f"{path}:{line}" if line is not None else str(path)
    assert where in str(err.value)


# --- Bible ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bible():
    return read_corpus("bible:en-fr")


def _db_rows(version: str, where: str) -> list[tuple]:
    with sqlite3.connect(f"{database_path().as_uri()}?mode=ro", uri=True) as db:
        return db.execute(f"SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ? "
                          f"AND {where}", (version,)).fetchall()


def test_bible_counts_and_book_split(bible):
    # 31,102 verses less the 4 that the WEB leaves out (placeholders: Luke 17:36 in train; Acts 8:37,
    # 15:34 and 24:7 in test).
    assert _counts(bible) == (1189, 31098)
    expected = {"train": (1091, 28142), "valid": (54, 1515), "test": (44, 1441)}
    for split, (docs, verses) in expected.items():
        documents = bible.split(split)
        assert (len(documents), sum(len(d) for d in documents)) == (docs, verses)
    books = {split: {d.doc_id.split(".")[0] for d in bible.split(split)} for split in expected}
    assert books["valid"] == {"Ruth", "Esth", "Jonah", "Mark", "Rom", "Phil"}
    assert books["test"] == {"Acts", "1Cor"}
    assert len(books["train"]) == 66 - 8
    assert bible.documents[0].doc_id == "Gen.1" and bible.documents[-1].doc_id == "Rev.22"


def test_bible_pairs_web_with_segond(bible):
    genesis = bible.documents[0]
    assert genesis.src[0] == "In the beginning God created the heavens and the earth."
    assert genesis.tgt[0] == "Au commencement, Dieu créa les cieux et la terre."
    assert len(genesis) == 31


def test_bible_cleanup_leaves_no_markers_backticks_or_headings(bible):
    src = [s for d in bible.documents for s in d.src]
    tgt = [s for d in bible.documents for s in d.tgt]
    assert not [s for s in tgt if re.search(r"\(\d+:\d+", s)]
    assert not [s for s in src + tgt if "`" in s or "[" in s or "]" in s]
    assert not [s for s in src if re.search(r"Psalm \d|\bBOOK [IV]", s)]
    assert not [s for s in src + tgt if s != " ".join(s.split()) or not s]
    # WEB's backticks became apostrophes: Gen 1:2 "God`s Spirit".
    assert "God's Spirit" in bible.documents[0].src[1]


def test_bible_psalm_superscriptions(bible):
    psalms = {d.doc_id: d for d in bible.documents if d.doc_id.startswith("Ps.")}
    # Marked title: "(3:1) Psaume de David. A l'occasion ... (3:2) O Éternel, ..."
    assert psalms["Ps.3"].tgt[0].startswith("O Éternel, que mes ennemis sont nombreux!")
    # Unmarked title "De David." before Ps 25:1.
    assert psalms["Ps.25"].tgt[0] == "Éternel! j'élève à toi mon âme."
    # Ps 13:1 is nothing but a title in Segond: kept, not emptied.
    assert psalms["Ps.13"].tgt[0] == "Au chef des chantres. Psaume de David."
    # Psalms without a title keep verse 1 as it is.
    raw = dict(((c, v), t) for _, c, v, t in _db_rows("l", "bNumber = 19 AND vNumber = 1"))
    assert psalms["Ps.1"].tgt[0] == raw[(1, 1)]
    # Removed titles are reported, and only Segond verses with a title formula were touched.
    titled = [c for (c, _), t in raw.items()
              if re.match(r"(\(\d+:1\) )?(Au chef|Psaume|Cantique|De David|Prière|Hymne|De Salomon|"
                          r"Des fils|Louange|Complainte)", t)]
    assert bible.skipped["psalm_superscription_removed"] == len(titled) - 1  # all but Ps 13
    # The other clean-up, counted in verses: Segond's markers (1,409), WEB's brackets and backticks
    # and Segond's brackets (6,472), WEB's leaked psalm headings and acrostic letters (171), and the
    # 4 verses the WEB leaves out.
    assert bible.skipped == {"psalm_superscription_removed": 115, "marker_removed": 1409,
                             "symbol_cleaned": 6472, "heading_removed": 171, "empty_pair": 4}


def test_bible_web_glued_heading_and_acrostic_removed(bible):
    job = next(d for d in bible.documents if d.doc_id == "Job.42")
    assert job.src[-1] == "So Job died, being old and full of days."
    ps119 = next(d for d in bible.documents if d.doc_id == "Ps.119")
    assert ps119.src[7] == "I will observe your statutes. Don't utterly forsake me."


def test_bible_reverse_direction_and_other_versions():
    fr_en = read_corpus("bible:fr-en")
    assert fr_en.documents[0].src[0] == "Au commencement, Dieu créa les cieux et la terre."
    kjv_darby = read_corpus("bible:en-fr?src=kjv&tgt=darby")
    assert kjv_darby.documents[0].src[0] == "In the beginning God created the heaven and the earth."
    assert kjv_darby.documents[0].tgt[0] == "Au commencement Dieu créa les cieux et la terre."
    # Neither version has titles in verse 1; KJV's acrostic letters (22), Darby's cross-references
    # `[Psaume 110:1]` (211) and its brackets and `#` (4,066 verses) go.
    assert kjv_darby.skipped == {"heading_removed": 22, "note_removed": 211, "symbol_cleaned": 4066}
    acts = next(d for d in kjv_darby.documents if d.doc_id == "Acts.2")
    assert acts.tgt[34] == "jusqu’à ce que j’aie mis tes ennemis pour marchepied de tes pieds»."
    ps119 = next(d for d in kjv_darby.documents if d.doc_id == "Ps.119")
    assert ps119.src[0].startswith("Blessed are the undefiled")  # "ALEPH." removed


def test_bible_empty_verses_are_counted_not_lost():
    corpus = read_corpus("bible:en-fr?src=bbe")
    # BBE's placeholders: `[]` for a verse it leaves out (16), `...` (18), `***` (1 Sam 13:1) and a
    # bare versification marker (3).
    placeholders = _db_rows("3", "(trim(vText) IN ('[]', '***', '...') "
                                 "OR trim(vText) GLOB '([0-9]*:[0-9]*)')")
    assert len(placeholders) == 38
    assert corpus.skipped["empty_pair"] == 38
    assert "psalm_superscription_removed" not in corpus.skipped  # BBE titles face Segond titles
    assert corpus.n_sentences == 31102 - 38
    assert len(corpus.documents) == 1189


def test_bible_testaments_keep_their_books_in_every_split(bible):
    # KJV versification: the Old Testament 929 chapters / 23,145 verses, the New 260 / 7,957, less the
    # WEB's 4 placeholders (all in the New); valid and test books as in test_bible_counts_and_book_split.
    old, new = read_corpus("bible:en-fr?testament=ot"), read_corpus("bible:en-fr?testament=nt")
    assert _counts(old) == (929, 23145) and _counts(new) == (260, 7953)
    books = {(name, split): {d.doc_id.split(".")[0] for d in corpus.split(split)}
             for name, corpus in (("old", old), ("new", new)) for split in ("valid", "test")}
    assert books["old", "valid"] == {"Ruth", "Esth", "Jonah"} and books["old", "test"] == set()
    assert books["new", "valid"] == {"Mark", "Rom", "Phil"} and books["new", "test"] == {"Acts", "1Cor"}
    whole = {d.doc_id: d for d in bible.documents}
    assert all(whole[d.doc_id] == d for d in old.documents + new.documents)  # the same text and split


@pytest.mark.parametrize("spec, match", [
    ("bible:en-fr?testament=apocrypha", "testament must be one of ot, nt, got 'apocrypha'"),
    ("bible:en-en", "language pair"),
    ("bible:en", "language pair"),
    ("bible:en-fr?src=segond", "is fr, not en"),
    ("bible:en-fr?src=luther", "unknown version 'luther'"),
    ("bible:en-fr?srcc=kjv", "did you mean src"),
    ("bible:en-fr?src", "malformed option"),
    ("bible:en-fr?src=kjv&src=web", "given twice"),
])
def test_bible_bad_specs(spec, match):
    with pytest.raises(DocMTInputError, match=match):
        read_corpus(spec)


def test_bible_fingerprint_is_fast_and_depends_on_versions():
    start = time.perf_counter()
    first = corpus_fingerprint("bible:en-fr")
    assert time.perf_counter() - start < 1.0
    assert corpus_fingerprint("bible:en-fr") == first
    assert corpus_fingerprint("bible:en-fr?src=kjv") != first
    assert corpus_fingerprint("bible:fr-en") != first


def test_bible_database_digest_sees_content(tmp_path):
    original = tmp_path / "a.db"
    original.write_bytes(bytes(5 << 20))
    changed = tmp_path / "b.db"
    changed.write_bytes(b"\1" + bytes((5 << 20) - 1))
    assert _database_digest(original) != _database_digest(changed)
    assert _database_digest(original) == _database_digest(tmp_path / "a.db")


# --- IWSLT (WIT3 XML) ----------------------------------------------------------------------------


def test_iwslt_en_fr_tst2016_2017():
    spec = (f"iwslt:{IWSLT}/en-fr/IWSLT17.TED.tst201*.en-fr.en.xml,"
            f"{IWSLT}/fr-en/IWSLT17.TED.tst201*.fr-en.fr.xml")
    corpus = read_corpus(spec)
    assert _counts(corpus) == (25, 2614)
    assert all(d.split is None for d in corpus.documents)
    first = corpus.documents[0]
    assert first.doc_id == "2227"
    assert first.src[0] == ("We're at a tipping point in human history, a species poised between "
                            "gaining the stars and losing the planet we call home.")
    bed_bath = [t for d in corpus.documents for t in d.tgt if "Bed Bath" in t]
    assert len(bed_bath) == 1 and "Bed Bath & Beyond" in bed_bath[0]  # &amp; unescaped


def test_iwslt_en_de_plus_joined_files():
    spec = (f"iwslt:{IWSLT}/en-de/IWSLT17.TED.tst2016.en-de.en.xml+"
            f"{IWSLT}/en-de/IWSLT17.TED.tst2017.en-de.en.xml,"
            f"{IWSLT}/de-en/IWSLT17.TED.tst2016.de-en.de.xml+{IWSLT}/de-en/IWSLT17.TED.tst2017.de-en.de.xml")
    assert _counts(read_corpus(spec)) == (23, 2271)


def _wit3(path: Path, body: str) -> Path:
    path.write_text(body, encoding="utf-8")
    return path


GOOD_SRC = """<mteval>
<doc docid="7">
<talkid>7</talkid>
<seg id="1"> Fish &amp; chips.  </seg>
<seg id="2">Second.</seg>
</doc>
</mteval>
"""
GOOD_TGT = """<doc docid="7">
<seg id="1">Poisson &amp; frites.</seg>
<seg id="2">Deuxième.</seg>
</doc>
"""


def test_iwslt_tolerates_no_root_and_stray_ampersand(tmp_path):
    src = _wit3(tmp_path / "s.xml", GOOD_SRC)
    tgt = _wit3(tmp_path / "t.xml", GOOD_TGT.replace("&amp;", "&"))  # not well-formed XML
    corpus = read_corpus(f"iwslt:{src},{tgt}")
    assert corpus.documents[0].src == ["Fish & chips.", "Second."]
    assert corpus.documents[0].tgt == ["Poisson & frites.", "Deuxième."]


@pytest.mark.parametrize("body, line, match", [
    ('<doc docid="7">\n<seg id="1">a</seg>\n', 1, "is not closed"),
    ('<seg id="1">a</seg>\n<doc docid="7">\n<seg id="2">b</seg>\n</doc>\n', 1, "outside any <doc>"),
    ('<doc docid="7">\n<seg>a</seg>\n</doc>\n', 2, "without an id"),
    ('<doc>\n<seg id="1">a</seg>\n</doc>\n', 1, "without a docid"),
    ('<doc docid="7">\n<seg id="1">a\n</doc>\n', 2, "is not closed"),
    ('<doc docid="7">\n<seg id="1">a</seg>\n<seg id="1">b</seg>\n</doc>\n', 3, "duplicate <seg"),
    ('<doc docid="7">\n</doc>\n', 1, "has no <seg>"),
    ('<doc docid="7">\n<seg id="1">a</seg>\n</seg>\n</doc>\n', 3, "without an open <seg>"),
    ('<doc docid="7">\n<seg id="1">a</seg>\n<doc docid="8">\n', 3, "not closed before this <doc>"),
    ("<url>x</url>\n", None, "no <doc> element"),
])
def test_iwslt_malformed_source(tmp_path, body, line, match):
    src = _wit3(tmp_path / "src.xml", body)
    tgt = _wit3(tmp_path / "tgt.xml", GOOD_TGT)
    _raises_at(f"iwslt:{src},{tgt}", src, line, match)


def test_iwslt_docid_and_seg_id_mismatch(tmp_path):
    src = _wit3(tmp_path / "src.xml", GOOD_SRC)
    tgt = _wit3(tmp_path / "tgt.xml", GOOD_TGT.replace('docid="7"', 'docid="8"'))
    _raises_at(f"iwslt:{src},{tgt}", tgt, 1, "docid '8' is not in the source files")
    tgt = _wit3(tmp_path / "tgt.xml", GOOD_TGT.replace('<seg id="2">', '<seg id="3">'))
    _raises_at(f"iwslt:{src},{tgt}", src, 5, "seg id=\"2\"> of document '7' has no counterpart")


def test_iwslt_duplicate_docid_across_files_and_missing_files(tmp_path):
    src = _wit3(tmp_path / "src.xml", GOOD_SRC)
    tgt = _wit3(tmp_path / "tgt.xml", GOOD_TGT)
    _raises_at(f"iwslt:{src}+{src},{tgt}", src, 2, "duplicate docid '7'")
    _raises_at(f"iwslt:{src},{tmp_path / 'absent.xml'}", tmp_path / "absent.xml", None, "no such file")
    _raises_at(f"iwslt:{tmp_path}/nothing*.xml,{tgt}", Path(f"{tmp_path}/nothing*.xml"), None,
               "no file matches")


def test_iwslt_undecodable_bytes(tmp_path):
    src = tmp_path / "src.xml"
    src.write_bytes(GOOD_SRC.encode().replace(b"Second.", b"Second\xff."))
    tgt = _wit3(tmp_path / "tgt.xml", GOOD_TGT)
    _raises_at(f"iwslt:{src},{tgt}", src, 5, "undecodable bytes")


# --- Maruf ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("part, counts", [("test", (23, 2271)), ("dev", (93, 8967))])
def test_maruf_ted(part, counts):
    src, tgt = MARUF / f"concatenated_en2de_{part}_en.txt", MARUF / f"concatenated_en2de_{part}_de.txt"
    corpus = read_corpus(f"maruf:{src},{tgt}")
    assert _counts(corpus) == counts
    assert not [s for d in corpus.documents for s in d.src + d.tgt if "\r" in s]  # CRLF files
    assert [d.doc_id for d in corpus.documents[:2]] == ["maruf-1", "maruf-2"]


def test_maruf_and_iwslt_agree_on_the_23_test_talks():
    maruf = read_corpus(f"maruf:{MARUF}/concatenated_en2de_test_en.txt,"
                        f"{MARUF}/concatenated_en2de_test_de.txt")
    iwslt = read_corpus(f"iwslt:{IWSLT}/en-de/IWSLT17.TED.tst201*.en-de.en.xml,"
                        f"{IWSLT}/de-en/IWSLT17.TED.tst201*.de-en.de.xml")
    assert [len(d) for d in maruf.documents] == [len(d) for d in iwslt.documents]


def _lines(path: Path, *lines: str, ending: str = "\n") -> Path:
    path.write_text("".join(line + ending for line in lines), encoding="utf-8")
    return path


def test_maruf_small_file_with_crlf(tmp_path):
    src = _lines(tmp_path / "s.txt", "<d>", "a  b", "c", "<d>", "d", ending="\r\n")
    tgt = _lines(tmp_path / "t.txt", "<d>", "A B", "C", "<d>", "D", ending="\r\n")
    corpus = read_corpus(f"maruf:{src},{tgt}")
    assert [(d.src, d.tgt) for d in corpus.documents] == [(["a b", "c"], ["A B", "C"]), (["d"], ["D"])]


@pytest.mark.parametrize("src_lines, tgt_lines, bad, line, match", [
    (["<d>", "a", "b"], ["<d>", "A"], "tgt", 3, "file ends before line 3"),
    (["<d>", "a", "<d>", "b"], ["<d>", "A", "B", "C"], "src", 3, "'<d>' here but not"),
    (["a", "<d>", "b"], ["A", "<d>", "B"], "src", 1, "before the first '<d>'"),
    (["<d>", "<d>", "b"], ["<d>", "<d>", "B"], "src", 1, "document 'maruf-1' is empty"),
    (["a"], ["A"], "src", 1, "before the first"),
])
def test_maruf_malformed(tmp_path, src_lines, tgt_lines, bad, line, match):
    src = _lines(tmp_path / "src.txt", *src_lines)
    tgt = _lines(tmp_path / "tgt.txt", *tgt_lines)
    _raises_at(f"maruf:{src},{tgt}", src if bad == "src" else tgt, line, match)


def test_maruf_undecodable_and_missing(tmp_path):
    src = tmp_path / "src.txt"
    src.write_bytes(b"<d>\nok\n\xe9t\xe9\n")
    tgt = _lines(tmp_path / "tgt.txt", "<d>", "OK", "ETE")
    _raises_at(f"maruf:{src},{tgt}", src, 3, "undecodable bytes")
    _raises_at(f"maruf:{tmp_path / 'none.txt'},{tgt}", tmp_path / "none.txt", None, "no such file")


# --- text ----------------------------------------------------------------------------------------


def test_text_reader_groups_consecutive_ids_and_counts_empty_pairs(tmp_path):
    src = _lines(tmp_path / "s.txt", "a", "b", "", "c")
    tgt = _lines(tmp_path / "t.txt", "A", "B", "X", "C")
    ids = _lines(tmp_path / "ids.txt", "talk1", "talk1", "talk2", "talk2")
    corpus = read_corpus(f"text:{src},{tgt},{ids}")
    assert [(d.doc_id, d.src, d.tgt) for d in corpus.documents] == [
        ("talk1", ["a", "b"], ["A", "B"]), ("talk2", ["c"], ["C"])]
    assert corpus.skipped == {"empty_pair": 1}


@pytest.mark.parametrize("ids, src_extra, bad, line, match", [
    (["d1", "d2", "d1"], [], "ids", 3, r"'d1' reappears .*started on line 1"),
    (["d1", "", "d1"], [], "ids", 2, "empty document id"),
    (["d1", "d1", "d1"], ["extra"], "tgt", 4, "file ends before line 4"),
])
def test_text_malformed(tmp_path, ids, src_extra, bad, line, match):
    src = _lines(tmp_path / "s.txt", "a", "b", "c", *src_extra)
    tgt = _lines(tmp_path / "t.txt", "A", "B", "C")
    ids_path = _lines(tmp_path / "ids.txt", *ids)
    path = {"ids": ids_path, "tgt": tgt}[bad]
    _raises_at(f"text:{src},{tgt},{ids_path}", path, line, match)


def test_text_document_left_empty_is_an_error(tmp_path):
    src = _lines(tmp_path / "s.txt", "a", "")
    tgt = _lines(tmp_path / "t.txt", "A", "B")
    ids = _lines(tmp_path / "ids.txt", "d1", "d2")
    _raises_at(f"text:{src},{tgt},{ids}", ids, 2, "document 'd2' is empty")


def test_unknown_reader_and_bad_arguments():
    with pytest.raises(DocMTInputError, match="did you mean bible"):
        read_corpus("bibel:en-fr")
    with pytest.raises(DocMTInputError, match="expects 'text:SRC,TGT,DOCIDS'"):
        read_corpus("text:a,b")
    with pytest.raises(DocMTInputError, match="expects 'maruf:SRC.txt,TGT.txt'"):
        read_corpus("maruf:a")
