"""What a run prints (docs/design.md section 10): the suite's own lines, not its libraries' chatter.

By default (`quiet`) a run prints only `[docmt]` lines: what each stage does, a progress line
every `logging.progress_every_steps` updates (`callbacks/progress_line.py`), a summary per stage,
and warnings that concern the user's data or settings. Hidden: Lightning's hardware banner ("GPU
available"), tips, "Seed set to", "`Trainer.fit` stopped", its model summary, the "directory exists
and is not empty" warnings of its loggers and checkpoints (a resumed or reused run writes into its
own directories on purpose), its warning of modules in eval mode at the start of training (the
frozen context encoders are; the suite names any other itself), third-party deprecation notices
(about the libraries, not the run), and wandb's lines about each run it starts (`WANDB_SILENT`).
sacreBLEU's warnings about the text it scores are kept but said once per process rather than at
every validation. `docmt --verbose` shows everything, as the libraries print it.
"""

from __future__ import annotations

import logging
import os
import warnings

# Loggers whose INFO records are the libraries' banners and tips; their warnings still show. Lightning
# sets them to INFO when it is imported (lazily, after the command line is read), which `--verbose`
# restores.
CHATTY_LOGGERS = ("lightning.pytorch", "lightning.fabric", "lightning")
SACREBLEU_LOGGER = "sacrebleu"
# Warnings about run directories that the suite writes into again on purpose (resume, reuse).
DIRECTORY_WARNINGS = r".*(exists and is not empty|directory .* is not empty).*"
# Lightning's warning of every module in evaluation mode at the start of training: the frozen context
# encoders (`nn/frozen.Frozen`) are, on purpose; the suite warns of any other (`training/module.py`).
EVAL_MODE_WARNING = r"Found \d+ module\(s\) in eval mode at the start of training"

WANDB_SILENT = "WANDB_SILENT"  # wandb's own switch for the lines it prints (run started, where it writes)

_verbose = False
_silenced_wandb = False  # whether WANDB_SILENT is ours to take back


def set_verbose(verbose: bool) -> None:
    """Choose, for this process, between the suite's lines only (False) and everything (True);
    applied by `apply_output_policy`."""
    global _verbose
    _verbose = verbose
    apply_output_policy()


def is_verbose() -> bool:
    return _verbose


class OncePerMessage(logging.Filter):
    """Lets each distinct message through once: a warning about the scored text (e.g. sacreBLEU's
    'lines that end in a tokenized period') says the same at every validation."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message in self.seen:
            return False
        self.seen.add(message)
        return True


_once = OncePerMessage()
_added_filters: list[tuple] = []  # the entries of `warnings.filters` that the quiet policy added


def _ignore_warnings(**kwargs: object) -> None:
    warnings.filterwarnings("ignore", **kwargs)
    _added_filters.append(warnings.filters[0])  # filterwarnings inserts at the front


def apply_output_policy() -> None:
    """Set the libraries' loggers and warning filters for the current choice (idempotent)."""
    level = logging.INFO if _verbose else logging.WARNING
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(level)
    sacrebleu = logging.getLogger(SACREBLEU_LOGGER)
    sacrebleu.removeFilter(_once)
    for entry in _added_filters:
        if entry in warnings.filters:
            warnings.filters.remove(entry)
    _added_filters.clear()
    _quiet_wandb(not _verbose)
    if _verbose:
        return
    sacrebleu.addFilter(_once)
    _ignore_warnings(message=DIRECTORY_WARNINGS)
    _ignore_warnings(message=EVAL_MODE_WARNING)
    for category in (DeprecationWarning, FutureWarning):  # the libraries' own, not the suite's
        _ignore_warnings(category=category, module=r"(?!lightning_docmt)")


def _quiet_wandb(quiet: bool) -> None:
    """wandb prints a few lines per run (its version, offline mode, where it writes, a sync hint);
    `WANDB_SILENT` turns them off unless the user set it either way."""
    global _silenced_wandb
    if quiet and WANDB_SILENT not in os.environ:
        os.environ[WANDB_SILENT] = "true"
        _silenced_wandb = True
    elif not quiet and _silenced_wandb:
        os.environ.pop(WANDB_SILENT, None)
        _silenced_wandb = False


def clock(seconds: float) -> str:
    """A duration as the `[docmt]` lines print it: 4000 -> '1h06m40s', 190 -> '3m10s', 7 -> '7s'."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
