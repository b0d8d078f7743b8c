"""Where the tests find the repository and the data beside it, whatever folder a test lives in.

The data is `../shared/data` relative to the repository root (a clean clone has `../shared` beside
it, see `.ci/run`); it is read there and never copied into the repository.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # tests/helpers/paths.py -> the repository root
TESTS = REPO / "tests"
EXPERIMENTS = REPO / "experiments"
BENCHMARKS = REPO / "benchmarks"
DDP_SCRIPTS = TESTS / "ddp"  # scripts that DDP tests launch by path (Lightning re-runs `sys.argv`)
SHARED_DATA = REPO.parent / "shared" / "data"
CONTRASTIVE_SUITES = SHARED_DATA / "contrastive"
