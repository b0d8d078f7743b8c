"""The keys `trainer:` may hold: the arguments of the installed `lightning.pytorch.Trainer`.

They are read from the signature of `Trainer.__init__` in Lightning's source, without importing
Lightning: the config floor imports none (docs/design.md section 2), and `docmt config` or
`docmt table --dry-run` should not wait for it to load.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

TRAINER_SOURCE = ("pytorch", "trainer", "trainer.py")  # inside the `lightning` package
TRAINER_CLASS = "Trainer"


@functools.lru_cache(maxsize=1)
def trainer_arguments() -> frozenset[str]:
    """The parameter names of `lightning.pytorch.Trainer.__init__`, `self` left out."""
    package = importlib.util.find_spec("lightning")  # found, not imported
    source = Path(package.origin).parent.joinpath(*TRAINER_SOURCE)
    tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    trainer = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == TRAINER_CLASS)
    init = next(node for node in trainer.body if isinstance(node, ast.FunctionDef) and node.name == "__init__")
    arguments = [*init.args.posonlyargs, *init.args.args, *init.args.kwonlyargs]
    return frozenset(a.arg for a in arguments[1:])
