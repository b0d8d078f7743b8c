"""`lightning_docmt.logs`: the libraries' banners and deprecations are hidden unless `--verbose`;
sacreBLEU's warnings about the scored text are said once; `--verbose` brings everything back."""

from __future__ import annotations

import logging
import os
import warnings

import lightning.pytorch  # noqa: F401  (sets its loggers to INFO, as a run does)
import pytest

from lightning_docmt import logs


@pytest.fixture
def policy():
    """Restores the quiet default (what a run without --verbose has) after each test."""
    with warnings.catch_warnings():
        yield logs.set_verbose
    logs.set_verbose(False)


def shown(category: type[Warning], module: str, message: str = "a notice") -> bool:
    with warnings.catch_warnings(record=True) as caught:
        logs.apply_output_policy()  # inside the recording context, as a run applies it in its own
        warnings.warn_explicit(message, category, filename=f"{module}.py", lineno=1, module=module)
    return bool(caught)


def test_quiet_hides_the_libraries_banners_and_verbose_shows_them(policy):
    banner = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    policy(False)
    assert not banner.isEnabledFor(logging.INFO)
    assert banner.isEnabledFor(logging.WARNING)  # a library's warning still shows
    policy(True)
    assert banner.isEnabledFor(logging.INFO)


def test_quiet_hides_third_party_deprecations_and_directory_warnings_but_not_the_suites(policy):
    policy(False)
    assert not shown(DeprecationWarning, "lightning.pytorch.utilities._pytree")
    assert not shown(FutureWarning, "torch.utils._pytree")
    assert not shown(UserWarning, "lightning.fabric.loggers.csv_logs",
                     "Experiment logs directory runs/x/main/ exists and is not empty.")
    assert not shown(UserWarning, "lightning.pytorch.loops.fit_loop",  # the frozen encoders: on purpose
                     "Found 71 module(s) in eval mode at the start of training. This may lead to unexpected "
                     "behavior during training. If this is intentional, you can ignore this warning.")
    assert shown(DeprecationWarning, "lightning_docmt.training.run")  # our own code's: shown
    assert shown(UserWarning, "lightning.pytorch.trainer")  # other warnings: shown
    policy(True)
    assert shown(DeprecationWarning, "lightning.pytorch.utilities._pytree")
    assert shown(UserWarning, "lightning.pytorch.loops.fit_loop",
                 "Found 71 module(s) in eval mode at the start of training.")


def test_sacrebleu_warnings_are_said_once_in_quiet_mode_and_every_time_in_verbose(policy, caplog):
    sacrebleu = logging.getLogger("sacrebleu")
    for verbose, expected in ((False, 1), (True, 3)):
        policy(verbose)
        caplog.clear()
        for _ in range(3):  # a message no real scoring says (those said before are not said again)
            sacrebleu.warning("tests/test_logs.py: the same warning three times")
        assert len(caplog.records) == expected


def test_wandb_is_silenced_in_quiet_mode_unless_the_user_chose(policy, monkeypatch):
    monkeypatch.delenv("WANDB_SILENT", raising=False)
    policy(False)
    assert os.environ["WANDB_SILENT"] == "true"
    policy(True)
    assert "WANDB_SILENT" not in os.environ  # ours to take back
    monkeypatch.setenv("WANDB_SILENT", "false")  # the user's own choice is kept either way
    policy(False)
    assert os.environ["WANDB_SILENT"] == "false"
