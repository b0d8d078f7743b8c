"""`synthetic:NAME[?key=value&...]`: the project's context-phenomena generator (`data/synthetic.py`).

The corpus is a pure function of its resolved settings, so its fingerprint is those settings plus the
generator version; nothing is read from disk. Its contrastive suites are generated with it (a
split's items, `synthetic.contrastive_suite`).
"""

from __future__ import annotations

from lightning_docmt.data import synthetic
from lightning_docmt.data.corpora import register_reader
from lightning_docmt.data.types import Corpus


@register_reader("synthetic", fingerprint=synthetic.config_fingerprint,
                 help="tiny|small|base|big[?docs=N&sentences=N&seed=N&...]",
                 suite=synthetic.contrastive_suite)
def read(args: str) -> Corpus:
    return synthetic.generate(args)
