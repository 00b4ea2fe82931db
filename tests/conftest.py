"""Settings every test shares."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _output_as_piped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables render as they do into a pipe, whatever runs the tests: pytest-xdist's
    workers set COLUMNS=80 and a developer's terminal sets its own width, and rich sizes
    its tables by either (simulator/outputs/render.py keeps $COLUMNS when it is set)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
