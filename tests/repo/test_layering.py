"""The package's layering (docs/design.md section 2, "Floors"): every module imports only from its own
floor or below, no two sub-packages import each other, model files import no Lightning, inference
runs without it, and no two modules import each other.

The import graph counts every import of a `lightning_docmt` module anywhere in a file, function-level
(lazy) imports included: a cycle hidden behind a lazy import is still a cycle.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import REPO

PACKAGE = "lightning_docmt"
SOURCE_ROOTS = {PACKAGE: REPO / PACKAGE, f"{PACKAGE}.callbacks": REPO / "callbacks"}


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for the package and the callbacks it installs."""
    modules = {}
    for prefix, root in SOURCE_ROOTS.items():
        for path in root.rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([prefix, *parts])] = path
    return modules


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The package modules `path` imports (`from a import b` counts as `a.b` when that is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in modules else node.module)
    return {name for name in found if name in modules}


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    return {name: imported_modules(path, set(files)) - {name} for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


FLOORS = (  # bottom first; "" is the package's own __init__
    # the ground: imports nothing of ours
    {"", "errors", "batch", "resources", "distributed", "schedules", "logs", "line_files", "wandb_runs",
     "locks", "atomic_files", "cpu"},
    {"config"},
    {"data"},
    {"nn", "checkpoints"},
    {"models", "pretraining"},
    {"inference"},
    {"evaluation"},
    {"callbacks", "provenance", "claims"},
    {"training"},
    {"tables"},
    {"cli"},
)
DISCOVERY = {(f"{PACKAGE}.config.registry", f"{PACKAGE}.models")}  # the registry imports the model files it registers


def unit(module: str) -> str:
    """The sub-package (or root module) a module belongs to: `lightning_docmt.nn.layers` -> `nn`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def floor(module: str) -> int:
    [found] = [i for i, units in enumerate(FLOORS) if unit(module) in units]
    return found


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if floor(b) > floor(a) and (a, b) not in DISCOVERY)


def two_way_pairs(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    edges = {(unit(a), unit(b)) for a, targets in graph.items() for b in targets
             if unit(a) != unit(b) and (a, b) not in DISCOVERY}
    return sorted((a, b) for a, b in edges if (b, a) in edges and a < b)


def test_every_module_sits_on_one_floor_and_imports_nothing_above_it():
    graph = import_graph()
    assert {unit(m) for m in graph} == set().union(*FLOORS)  # a new sub-package is given its floor
    assert upward_imports(graph) == []
    assert two_way_pairs(graph) == []


def test_the_floor_checks_see_an_upward_import_and_a_two_way_pair():
    graph = {f"{PACKAGE}.nn.layers": {f"{PACKAGE}.training.module"}, f"{PACKAGE}.training.module": set(),
             f"{PACKAGE}.callbacks.x": {f"{PACKAGE}.provenance"}, f"{PACKAGE}.provenance": {f"{PACKAGE}.callbacks.y"},
             f"{PACKAGE}.callbacks.y": set()}
    assert upward_imports(graph) == [f"{PACKAGE}.nn.layers -> {PACKAGE}.training.module"]
    assert two_way_pairs(graph) == [("callbacks", "provenance")]
    assert upward_imports({f"{PACKAGE}.config.registry": {f"{PACKAGE}.models"}}) == []  # the discovery


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 40 and f"{PACKAGE}.callbacks.staged_unfreezing" in graph
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def imports_lightning(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(name.split(".")[0] in ("lightning", "pytorch_lightning") for name in names):
            return True
    return False


@pytest.mark.parametrize("layer", ["models", "nn", "config", "inference", "evaluation"])
def test_model_code_imports_no_lightning(layer):
    """Models, their building blocks, the config schema, inference and evaluation are plain PyTorch,
    whatever they import."""
    graph = import_graph()
    reached, todo = set(), [m for m in graph if m.startswith(f"{PACKAGE}.{layer}")]
    while todo:  # everything these modules import, transitively, inside the package
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(graph[name])
    files = module_files()
    assert reached and [m for m in sorted(reached) if imports_lightning(files[m])] == []


def test_the_lightning_check_sees_a_lightning_import():
    files = module_files()
    assert imports_lightning(files[f"{PACKAGE}.training.module"])
    assert not imports_lightning(files[f"{PACKAGE}.models.zhang_doc"])


@pytest.mark.subprocess
def test_importing_a_model_file_does_not_import_lightning():
    code = ("import sys, lightning_docmt.models.zhang_doc, lightning_docmt.config.registry as r; "
            "r.import_all_archs(); print(sorted(r.ARCHS)); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO).stdout.splitlines()
    assert "zhang_doc" in out[0] and out[1] == "[]"
