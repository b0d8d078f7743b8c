"""How `docmt` commands print their results: JSON or aligned `key: value` lines."""

from __future__ import annotations

import json
from pathlib import Path

from lightning_docmt.atomic_files import write_text_atomically


def print_json(obj: object, path: Path | None = None) -> None:
    """Print `obj` as indented JSON (and write the same text to `path` when given)."""
    text = json.dumps(obj, indent=1, sort_keys=False)
    if path is not None:
        write_text_atomically(Path(path), text + "\n")
    print(text)


def print_mapping(values: dict, *, as_json: bool) -> None:
    """`values` as JSON, or one `key: value` line each (floats to 4 decimals)."""
    if as_json:
        print_json(values)
        return
    for key, value in values.items():
        print(f"{key:>12}: {value:.4f}" if isinstance(value, float) else f"{key:>12}: {value}")
