"""Typed errors of the validation package (trace parsing, calibration, comparison).

They derive from `simulator.errors.SimulatorError`, so the CLI prints each as one line
and exits with code 2, like every other user-input error.
"""

from __future__ import annotations

from simulator.errors import SimulatorError


class TraceError(SimulatorError):
    """A profiler trace cannot be read or trusted; the message names the file (and rank).

    Raised for unreadable or truncated files, JSON that is not a Kineto trace, events
    lacking required fields, and sets of per-rank traces that do not belong to one run.
    """
