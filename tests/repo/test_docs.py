"""The repository explains itself: every document, section, reading and trap that the code, configs
and READMEs cite exists in its own `docs/`.

Citation forms (see docs/README.md): `docs/<file>.md`, `docs/<file>.md section N` (also
`sections N, M`, `N and M`, `N-M`), `reading Z3` (a reading id Z/L/F/Y/D defined in a paper's file
as `**Z3.**`) and `trap N` (defined in docs/traps.md as `**Trap N.**`).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pytest

from lightning_docmt.tables.runner import ARCHIVE_DIRNAME
from tests.helpers.paths import REPO

ROOT = REPO
DOCS = ROOT / "docs"
ARCHIVE = ROOT / "experiments" / ARCHIVE_DIRNAME  # archived runs: configs and outputs, not prose
CITING = ["lightning_docmt", "callbacks", "experiments", "benchmarks", "tests", "docs"]
SUFFIXES = {".py", ".yaml", ".md", ".toml", ".cfg"}
# Names of the internal notes the docs replace, spelled so that this file does not cite them itself.
GONE = ("DESIGN" + ".md", "ablations" + ".md")

DOC_CITATION = re.compile(r"docs/([\w/]+\.md)(?:,? sections? ((?:\d+)(?:(?:, | and |-)\d+)*))?")
READING = re.compile(r"(?<![-\w])([ZLFYD]\d{1,2})\b")
TRAP = re.compile(r"\btraps? (\d+(?:(?:, | and )\d+)*)")
NUMBERS = re.compile(r"\d+")


def citing_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "Makefile", ROOT / "pyproject.toml"]
    for top in CITING:
        files += [p for p in (ROOT / top).rglob("*") if p.suffix in SUFFIXES and p.is_file()
                  and not p.is_relative_to(ARCHIVE)]
    return sorted(f for f in files if f.is_file() and f != Path(__file__).resolve())


def citations(pattern: re.Pattern) -> list[tuple[Path, int, re.Match]]:
    found = []
    for path in citing_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [(path, number, m) for m in pattern.finditer(line)]
    return found


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


@lru_cache(maxsize=None)
def numbered_sections(doc: Path) -> set[int]:
    return {int(m.group(1)) for m in re.finditer(r"^## (\d+)\.", doc.read_text(encoding="utf-8"), re.M)}


def section_numbers(spec: str) -> set[int]:
    """`5, 7`, `5 and 7`, `9-10` -> the section numbers."""
    numbers = [int(n) for n in NUMBERS.findall(spec)]
    if "-" in spec:
        return set(range(numbers[0], numbers[-1] + 1))
    return set(numbers)


def defined(pattern: str) -> set[str]:
    text = "\n".join(p.read_text(encoding="utf-8") for p in DOCS.rglob("*.md"))
    return set(re.findall(pattern, text))


def test_nothing_cites_notes_outside_the_repository():
    stale = [where(path, n) for path in citing_files()
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if any(name in line for name in GONE)]
    assert stale == []


def test_every_cited_document_and_section_exists():
    found = citations(DOC_CITATION)
    assert len(found) > 30  # the code does cite docs/; this test is not vacuous
    missing = []
    for path, line, match in found:
        doc = DOCS / match.group(1)
        if not doc.is_file():
            missing.append(f"{where(path, line)}: {doc.relative_to(ROOT)}")
        elif match.group(2) and not section_numbers(match.group(2)) <= numbered_sections(doc):
            missing.append(f"{where(path, line)}: {match.group(0)}")
    assert missing == []


def test_every_cited_reading_is_defined():
    definitions = defined(r"\*\*([ZLFYD]\d{1,2})\.\*\*")
    found = citations(READING)
    assert {"Z2", "Z9", "F4"} <= {m.group(1) for _, _, m in found}  # known citations are seen
    undefined = [f"{where(p, n)}: {m.group(1)}" for p, n, m in found if m.group(1) not in definitions]
    assert undefined == []


def test_every_cited_trap_is_defined():
    definitions = {int(n) for n in defined(r"\*\*Trap (\d+)\.\*\*")}
    found = citations(TRAP)
    assert any("21" in m.group(1) for _, _, m in found)  # known citations are seen
    undefined = [f"{where(p, n)}: trap {t}" for p, n, m in found
                 for t in section_numbers(m.group(1)) if t not in definitions]
    assert undefined == []


@pytest.mark.parametrize("paper, prefix", [("zhang2018", "Z"), ("lifeng2019", "L"), ("ma2020", "F"),
                                           ("yamagishi", "Y"), ("donato2021", "D")])
def test_each_paper_defines_its_readings_in_order_without_gaps(paper, prefix):
    text = (DOCS / "papers" / f"{paper}.md").read_text(encoding="utf-8")
    ids = [int(n) for n in re.findall(rf"\*\*{prefix}(\d+)\.\*\*", text)]
    assert ids and ids == list(range(1, len(ids) + 1))
