"""Shared check for bad-input tests: exit code 2 and exactly one line on stderr."""

from __future__ import annotations

import pytest

from simulator.cli import main


def one_line_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI on `args`; assert exit 2 with one `axsim: error:` line and return it."""
    assert main(args) == 2, args
    err = capsys.readouterr().err.strip()
    assert err.startswith("axsim: error:") and err.count("\n") == 0, err
    return err
