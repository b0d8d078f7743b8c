"""`docmt ARGS` whose rank FAIL_RANK (an environment variable) raises after its test, for
`tests/test_ddp_cli.py`: a rank that dies once training is over must still fail the command.

It must run as a script: Lightning's `ddp` strategy starts the other ranks by re-running `sys.argv`.
"""

from __future__ import annotations

import os
import sys

from lightning_docmt import cli
from lightning_docmt.training import run as train


def main(argv: list[str]) -> int:
    test_checkpoint = train.test_checkpoint

    def failing_test_checkpoint(*args, **kwargs):
        scores = test_checkpoint(*args, **kwargs)
        if os.environ.get("LOCAL_RANK", "0") == os.environ["FAIL_RANK"]:
            raise RuntimeError(f"rank {os.environ['FAIL_RANK']} fails after its test")
        return scores

    train.test_checkpoint = failing_test_checkpoint
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
