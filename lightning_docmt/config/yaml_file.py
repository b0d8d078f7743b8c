"""A YAML mapping read from disk, plus the line of every key, for error messages that point at a line.

Values are parsed by OmegaConf's loader (so `lr: 1e-3` is a float, duplicate keys are an error);
line numbers come from PyYAML's node tree (`yaml.compose`), which keeps the position of every key.
"""

from __future__ import annotations

import copy
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import yaml
from omegaconf import DictConfig, OmegaConf

from lightning_docmt.errors import DocMTInputError

# libyaml's composer where PyYAML was built with it (its wheels are): the same node tree and marks as
# the pure-Python one, about ten times faster, and every `docmt` command reads dozens of these files.
_NODE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# Parsed files by their text: a table composes the same base, profile and experiment files for every
# row, seed and stage, and a copy of the parsed mapping costs a third of parsing it again.
_PARSED: dict[str, tuple[DictConfig, yaml.Node | None]] = {}


@dataclass(frozen=True)
class YamlFile:
    path: Path
    data: DictConfig
    root: yaml.Node | None

    @classmethod
    def load(cls, path: str | Path) -> YamlFile:
        """Read a YAML file whose top level is a mapping (an empty file is an empty mapping)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise DocMTInputError("file not found", path=path) from None
        except (OSError, UnicodeDecodeError) as err:
            raise DocMTInputError(f"cannot read file ({err})", path=path) from None
        if text in _PARSED:
            data, root = _PARSED[text]
            return cls(path=path, data=copy.deepcopy(data), root=root)
        try:
            data = OmegaConf.load(io.StringIO(text))  # the very text read above
            root = yaml.compose(text, Loader=_NODE_LOADER)
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise DocMTInputError(f"invalid YAML: {problem}", path=path,
                                  line=mark.line + 1 if mark is not None else None) from None
        if not isinstance(data, DictConfig):
            raise DocMTInputError("the top level must be a mapping of keys to values", path=path,
                                  line=1)
        _PARSED[text] = (copy.deepcopy(data), root)
        return cls(path=path, data=data, root=root)

    def line_of(self, keys: Sequence[str | int]) -> int | None:
        """1-based line of the deepest existing node on the path `keys` (mapping keys, list indices)."""
        node, line = self.root, None
        for key in keys:
            child = _child(node, key)
            if child is None:
                break
            key_node, node = child
            line = key_node.start_mark.line + 1
        return line


def _child(node: yaml.Node | None, key: str | int) -> tuple[yaml.Node, yaml.Node] | None:
    """(node marking the key, value node) of `key` inside `node`, or None where it does not exist."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if str(key_node.value) == str(key):
                return key_node, value_node
    if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
        return node.value[key], node.value[key]
    return None
