"""The learning tests train the tables' stage recipes (tests/learning/learning_recipe.py): a fast check of
what `tests/learning/test_learning.py` (slow) builds, without training.

For each positive control, the composed run config has the table row's stages in the same order,
with the same architectures, parents, trainable globs, model overrides and continuation rule, the
same schedule kind in every stage, and the same warm-up share, share of the first stage's updates
and lr ratio to the first stage, up to the rounding of updates to whole numbers. A table whose
recipe changes changes its learning test with it; a learning test that drifts from its table
fails here. The one departure, the three-sentence window's stack trained twice as long
(test_learning_pas.py), is declared in `LONGER` and checked as declared.
"""

from __future__ import annotations

import pytest

import tests.learning.learning_runs as learning
from lightning_docmt.config.registry import import_all_archs
from tests.helpers.experiment_files import EXPERIMENTS
from tests.learning.learning_recipe import TableRecipe, recipe_of, table_recipe

RUNS = {  # name: (table, row), the run's builder, its first stage's updates
    "rnn_shared_source": (learning.RNN_TABLE, lambda: learning.rnn_run("shared", "source"), learning.RNN_STEPS),
    "rnn_shared_target": (learning.RNN_TABLE, lambda: learning.rnn_run("shared", "target"), learning.RNN_STEPS),
    "zhang_two_step": (learning.ZHANG_TABLE, learning.zhang_run, learning.SENT_STEPS),
    "co_attention": (learning.LIFENG_TABLE, learning.coattn_run, learning.SENT_STEPS),
    "parallel_stack": (learning.DONATO_TABLE, lambda: learning.pas_run(
        str(EXPERIMENTS / "donato2021" / "pretrain_bert1_synthetic_gendered.yaml"), "{format: pair, prev: 1}"),
        learning.SENT_STEPS),
    "parallel_stack_window": (learning.DONATO_TABLE, lambda: learning.pas_run(
        str(EXPERIMENTS / "donato2021" / "pretrain_pegasus1_synthetic_gendered.yaml"), "{format: concat, prev: 3}",
        longer=learning.WINDOW_LONGER), learning.SENT_STEPS),
}
LONGER = {"parallel_stack_window": ("stack", learning.WINDOW_LONGER)}
"""The runs that train a stage longer than their table: (stage, factor); its warm-up stays the table's."""


def composed(run: tuple[str, list[str]], tmp_path) -> TableRecipe:
    from lightning_docmt.config import composition

    body, settings = run
    path = tmp_path / "run.yaml"
    path.write_text(body)
    return recipe_of(composition.compose(path, [*learning.SETTINGS, *settings], profile="tiny"))


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_learning_test_trains_its_tables_stage_recipe(name, tmp_path):
    import_all_archs()
    table, build, first_steps = RUNS[name]
    want, got = table_recipe(*table), composed(build(), tmp_path)
    longer_stage, factor = LONGER.get(name, (None, 1))
    assert [s.name for s in got.stages] == [s.name for s in want.stages]
    for mine, theirs in zip(got.stages, want.stages):
        times = factor if mine.name == longer_stage else 1
        assert mine.settings == theirs.settings, mine.name
        assert mine.schedule == theirs.schedule, mine.name
        assert mine.lr_ratio == pytest.approx(theirs.lr_ratio), mine.name
        steps = mine.share * first_steps / times  # the table's updates at this scale
        assert mine.share == pytest.approx(times * theirs.share, abs=times * 0.5 / first_steps), mine.name
        assert mine.warmup_share * times == pytest.approx(theirs.warmup_share, abs=0.5 / steps), mine.name


def test_a_recipe_that_drifts_from_its_table_is_caught(tmp_path):
    """The check above can fail: a learning test that continued the first stage's schedule, or
    trained its context stage twice as long, differs from Table 2's recipe."""
    import_all_archs()
    want = table_recipe(*learning.RNN_TABLE)
    body, settings = learning.rnn_run("shared", "source")
    longer = composed((body, [*settings, f"train.stages.ctx.max_steps={2 * learning.RNN_STEPS}"]), tmp_path)
    assert longer.stages[1].share != pytest.approx(want.stages[1].share, abs=0.5 / learning.RNN_STEPS)
    continued = composed((body, [*settings, "train.stages.ctx.continue_schedule=true"]), tmp_path)
    assert continued.stages[1].settings != want.stages[1].settings
