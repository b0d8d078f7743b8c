"""The command line itself (`cli/parser.py`, `cli/__init__.py`): every option explains itself, the
version prints, a bad `--seeds` is one error line, and a reader that goes away is not an error."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from lightning_docmt.cli import main
from lightning_docmt.cli.parser import build_parser, package_version


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("name", sorted(subcommands(build_parser())))
def test_every_argument_of_every_command_has_help(name):
    parser = subcommands(build_parser())[name]
    silent = [a.dest for a in parser._actions if not isinstance(a, argparse._HelpAction) and not a.help]
    assert silent == [], f"docmt {name}: {silent} have no help"


def docmt(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lightning_docmt.cli", *args], capture_output=True, text=True,
                          timeout=120, **kwargs)


@pytest.mark.subprocess
def test_the_version_prints():
    done = docmt("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"docmt {package_version()}" != "docmt unknown"


@pytest.mark.subprocess
@pytest.mark.parametrize("seeds, message", [("1,a", "comma-separated integers"), ("1,1", "repeated")])
def test_bad_seeds_are_one_error_line_with_status_2(seeds, message):
    done = docmt("table", "experiments/demo.yaml", "--seeds", seeds, "--dry-run")
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert done.returncode == 2 and len(errors) == 1 and "--seeds" in errors[0] and message in errors[0]
    assert "Traceback" not in done.stderr


def test_a_reader_that_stops_early_is_not_an_error(monkeypatch):
    """`docmt stats SPEC | head -1`: stdout is a pipe whose reader has gone; the command ends with
    status 0 and leaves nothing that fails when the interpreter flushes stdout at exit."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    closed = os.fdopen(write_end, "w")
    monkeypatch.setattr(sys, "stdout", closed)
    try:
        assert main(["stats", "synthetic:tiny"]) == 0
        closed.write("what is left at exit\n")
        closed.flush()  # the interpreter's last flush: no BrokenPipeError
    finally:
        closed.close()
