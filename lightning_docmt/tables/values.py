"""What counts as a number in a table's files and runs' metrics: the one test that paper values,
summarised metrics and curve points share."""

from __future__ import annotations

import math
from typing import Any


def is_finite_number(value: Any) -> bool:
    """An int or float (not a bool: YAML's `true` is not 1) that is neither NaN nor infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
