"""The test suite's own layout (docs/testing.md): no test module imports another (what tests share
lives in helper modules and conftest.py fixtures), every folder of tests is a package, and every
path under tests/ that the repository cites exists.
"""

from __future__ import annotations

import ast
import re

from tests.helpers.paths import REPO, TESTS

# Folders whose text cites test files; experiments/measured/ archives runs as they were.
CITING = ["lightning_docmt", "callbacks", "benchmarks", "experiments", "docs", "tests", ".ci"]
CITED_TEST_PATH = re.compile(r"\btests/[\w/]+\.py\b")


def imported_test_modules(source: str, package: str) -> list[str]:
    """The test modules (tests/**/test_*.py) that `source`, a module of `package`, imports, at any
    depth (function-level imports included)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names = [module] + [f"{module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [name for name in names if name.rsplit(".", 1)[-1].startswith("test_")
                  and (REPO / (name.replace(".", "/") + ".py")).is_file()]
    return found


def test_no_test_module_imports_another():
    imports = {}
    for path in TESTS.rglob("*.py"):
        package = ".".join(path.relative_to(REPO).parent.parts)
        imports[path.relative_to(REPO).as_posix()] = imported_test_modules(path.read_text(encoding="utf-8"), package)
    assert len(imports) > 60  # the suite is there: this test is not vacuous
    assert {path: names for path, names in imports.items() if names} == {}


def test_the_import_check_sees_test_module_imports():
    source = ("import tests.models.test_transformer as t\nfrom tests.ddp import test_ddp\n"
              "from .test_end_to_end import FIT\nfrom ..learning import test_learning\n"
              "from tests.helpers.cli_run import docmt\nfrom lightning_docmt.training.run import test_checkpoint\n"
              "def f():\n    from tests.learning.test_learning import SETTINGS\n")
    assert imported_test_modules(source, "tests.cli") == [
        "tests.models.test_transformer", "tests.ddp.test_ddp", "tests.cli.test_end_to_end",
        "tests.learning.test_learning", "tests.learning.test_learning"]


def test_every_folder_of_tests_is_a_package():
    """Test files in different folders may share a name only if each folder is a package."""
    folders = {path.parent for path in TESTS.rglob("*.py") if "__pycache__" not in path.parts}
    assert len(folders) > 10
    assert sorted(f.relative_to(REPO).as_posix() for f in folders if not (f / "__init__.py").is_file()) == []


def test_test_modules_live_in_the_folder_of_what_they_test():
    """tests/ itself holds only the tests of the package's root modules (registry.py, ...)."""
    top = {path.name for path in TESTS.glob("test_*.py")}
    roots = {f"test_{path.stem}.py" for path in (REPO / "lightning_docmt").glob("*.py")}
    assert top <= roots | {"test_safe_loading.py"}  # checkpoints.py's loading, through every command
    assert len(list(TESTS.rglob("test_*.py"))) > len(top) + 50


def test_every_cited_test_file_exists():
    files = [REPO / "README.md", REPO / "Makefile", REPO / "pyproject.toml"]
    for top in CITING:
        files += [p for p in (REPO / top).rglob("*") if p.suffix in {".py", ".md", ".yaml", ".toml", ""}
                  and p.is_file() and "measured" not in p.relative_to(REPO).parts[:2]]
    cited = {(f.relative_to(REPO).as_posix(), m.group(0)) for f in files if f.is_file()
             for m in CITED_TEST_PATH.finditer(f.read_text(encoding="utf-8", errors="replace"))}
    assert len(cited) > 20  # the repository does cite test files
    assert sorted((where, path) for where, path in cited if not (REPO / path).is_file()) == []
