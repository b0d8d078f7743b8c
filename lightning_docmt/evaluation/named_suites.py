"""The published contrastive suites by name: `contrapro`, `discevalmt`, `scat`.

An `eval.contrastive` entry, a table column `contrastive:<suite>` or `docmt contrastive --suite`
may name one of them instead of a suite file:

- `NAME`: the suite's folder as distributed (`NamedSuite.folder` in `NAMED_SUITES`) inside `eval.suites_dir`
  (`docmt contrastive --suites-dir`);
- `NAME:DIR`: the folder itself.

The folder is converted to the generic format on the fly by the converters of
`data/contrastive_suites.py` (the files are never copied or rewritten). A suite belongs to one language
pair; a run whose languages are known (`data.src_lang`/`data.tgt_lang` or a `bible:` spec) and
differ is one error line naming `eval.contrastive`: a de-en model cannot be scored on en-de
candidates.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from lightning_docmt.data.contrastive_suites import (
    ConvertedSuite,
    convert_contrapro,
    convert_discevalmt,
    convert_scat,
)
from lightning_docmt.errors import DocMTInputError


@dataclass(frozen=True)
class NamedSuite:
    name: str
    languages: tuple[str, str]  # (source, target) of the candidates
    folder: str  # the folder name as distributed
    convert: Callable[[Path], ConvertedSuite]
    description: str


NAMED_SUITES = {suite.name: suite for suite in (
    NamedSuite("contrapro", ("en", "de"), "contrapro-ende", convert_contrapro,
               "ContraPro (Müller et al. 2018): 12,000 en-de pronoun examples, er/sie/es, 1 sentence of context"),
    NamedSuite("discevalmt", ("en", "fr"), "bawden-discevalmt-enfr", convert_discevalmt,
               "DiscEvalMT (Bawden et al. 2018): 400 en-fr anaphora and lexical-choice pairs, balanced"),
    NamedSuite("scat", ("en", "fr"), "scat-enfr", convert_scat,
               "SCAT (Yin et al. 2021), test split: en-fr il/elle, ils/elles with the preceding context"),
)}
KEY = "eval.contrastive"


def named_suite(entry: str) -> Optional[tuple[NamedSuite, Optional[Path]]]:
    """(suite, folder or None) when `entry` is `NAME` or `NAME:DIR` of a named suite, else None."""
    name, colon, folder = entry.partition(":")
    suite = NAMED_SUITES.get(name)
    if suite is None:
        return None
    return suite, (Path(folder) if colon else None)


def load_named_suite(entry: str, suites_dir: Optional[str],
                     languages: tuple[Optional[str], Optional[str]] = (None, None),
                     key: str = KEY) -> tuple[str, list[dict]]:
    """(metric name, examples) of a named-suite entry; DocMTInputError naming `key` when the folder
    is not given or missing, or the run's known languages differ from the suite's."""
    found = named_suite(entry)
    if found is None:
        raise ValueError(f"{entry!r} names no suite of {sorted(NAMED_SUITES)}")
    suite, folder = found
    if folder is None:
        if not suites_dir:
            raise DocMTInputError(f"'{suite.name}' needs the folder of the published suites: set "
                                  f"eval.suites_dir (the folder holding {suite.folder}/) or write "
                                  f"'{suite.name}:DIR'", key=key)
        folder = Path(suites_dir) / suite.folder
    if not folder.is_dir():
        raise DocMTInputError(f"'{suite.name}': no folder {folder} ({suite.description})", key=key)
    for side, mine, theirs in zip(("source", "target"), languages, suite.languages):
        if mine is not None and mine != theirs:
            raise DocMTInputError(f"'{suite.name}' is {'-'.join(suite.languages)}: its {side} "
                                  f"language is '{theirs}', the run's is '{mine}'", key=key)
    return suite.name, suite.convert(folder).examples
