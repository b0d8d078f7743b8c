"""`python -m lightning_docmt.cli ...` is `docmt ...`."""

import sys

from lightning_docmt.cli import main

sys.exit(main())
