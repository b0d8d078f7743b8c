"""Import a script of `benchmarks/` (not a package) as a module, for its tests."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

from tests.helpers.paths import BENCHMARKS


def load_benchmark(name: str) -> ModuleType:
    """`benchmarks/<name>.py` as the module `name`."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def run_tiny(name: str, tmp_path: Path) -> tuple[ModuleType, dict]:
    """Run benchmark `name` at the tiny profile on `synthetic:tiny` (2 repeats, 2 training batches,
    4 test sentences, 1 thread); (the module, its report), the report checked against its --json file."""
    bench = load_benchmark(name)
    out = tmp_path / "report.json"
    report = bench.main(["--profile", "tiny", "--corpus", "synthetic:tiny", "--repeats", "2",
                         "--train-batches", "2", "--decode-sentences", "4", "--threads", "1",
                         "--json", str(out), f"data.cache_dir={tmp_path / 'cache'}"])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    return bench, report
