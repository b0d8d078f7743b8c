"""`docmt ARGS` whose rank FAIL_RANK (an environment variable) fails, for `tests/ddp/test_ddp_cli.py`:
with FAIL_AT=after_test it raises an exception after its test (the rank dies once training is
over); with FAIL_AT=before_test, a bad-input error where its test would start, while the other
rank enters the test loop (a failure mid-run that the command reports as exit status 2). Either
must fail the command, and neither may leave the other rank waiting.

It must run as a script: Lightning's `ddp` strategy starts the other ranks by re-running `sys.argv`.
"""

from __future__ import annotations

import os
import sys

from lightning_docmt import cli
from lightning_docmt.errors import DocMTInputError
from lightning_docmt.training import run as train


def main(argv: list[str]) -> int:
    test_checkpoint = train.test_checkpoint

    failing = os.environ.get("LOCAL_RANK", "0") == os.environ["FAIL_RANK"]

    def failing_test_checkpoint(*args, **kwargs):
        if failing and os.environ["FAIL_AT"] == "before_test":
            raise DocMTInputError(f"rank {os.environ['FAIL_RANK']} fails before its test")
        scores = test_checkpoint(*args, **kwargs)
        if failing:
            raise RuntimeError(f"rank {os.environ['FAIL_RANK']} fails after its test")
        return scores

    train.test_checkpoint = failing_test_checkpoint
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
