"""How `make test` spreads the suite over its pytest-xdist workers (`--dist loadfile
--no-loadscope-reorder`, the Makefile; `tests/conftest.py` applies `longest_first` to every
collection):

- each test module runs whole in one worker, so that a module-scoped fixture (a trained model, a
  DDP run, the learning tests' baselines) is built once, not once per worker that happens to get
  one of its tests. (xdist's finer `loadgroup` would keep per-test balancing, but with pytest 9 it
  groups nothing: it renames node ids through an attribute that pytest no longer reads.)
- the modules run longest first, by their tests' markers (`slow`: minutes; `fit` or `subprocess`:
  seconds; the rest: milliseconds), in the collection's order otherwise, so that no worker is left
  alone with a long module at the end. The `slow` modules (the learning tests: `test_learning.py`,
  about a third of the suite's work, and the parallel stack's `test_learning_pas.py`) start at once,
  one in each worker, and the workers take the rest as they finish; should one ever exceed half
  the suite's work, it is to be split by the baseline its tests share.
"""

from __future__ import annotations

import pytest

COST_RANK = {"slow": 0, "fit": 1, "subprocess": 1}
UNMARKED_RANK = 2


def cost_rank(item: pytest.Item) -> int:
    return min((COST_RANK[m.name] for m in item.iter_markers() if m.name in COST_RANK), default=UNMARKED_RANK)


def longest_first(items: list[pytest.Item]) -> None:
    """Order `items` in place: modules by the cheapest rank of their tests (the module docstring),
    each module's tests together and in their order."""
    modules = [item.nodeid.split("::", 1)[0] for item in items]  # what one worker gets
    rank: dict[str, int] = {}
    start: dict[str, int] = {}
    for index, (module, item) in enumerate(zip(modules, items)):
        rank[module] = min(rank.get(module, UNMARKED_RANK), cost_rank(item))
        start.setdefault(module, index)
    order = sorted(range(len(items)), key=lambda i: (rank[modules[i]], start[modules[i]], i))
    items[:] = [items[i] for i in order]
