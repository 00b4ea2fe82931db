"""What the engine holds per simulated rank while it runs, and the skips it records.

Why a module of its own: the engine (core.py), the periodic prover (periodic.py) and the
timeline builder all read these; kept below them, none imports another upward.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

from simulator.engine.unroll import OrdinalKey, Unrolled


@dataclass(frozen=True)
class Warp:
    """Skipped periods of one rank: records [lo1, lo2) (unrolled indices) stand for
    `periods` more copies, the j-th shifted by j·period_ps; records from lo2 on were moved
    `periods`·period_ps later. [t1, t2) is the compared period on the clock before the
    skip (picoseconds). `host_ps` is what the skipped copies added to the host issue times
    of records from lo2 on."""

    lo1: int
    lo2: int
    periods: int
    period_ps: int
    t1: int
    t2: int
    host_ps: int = 0


@dataclass(eq=False)
class RankState:
    """A simulated rank: where each of its streams stands and when its ops ran.

    `ish` and `oshift` are what the copies skipped so far add to the host issue times and
    to the collective ordinals of the ops still to come; `warps` records the skips."""

    rank: int
    gpu: int
    prog: Unrolled
    start: array
    end: array
    pos: list[int]
    free: list[int]
    inflight: list[int]
    waiters: dict[int, list[int]] = field(default_factory=dict)
    sync: dict[int, int] = field(default_factory=dict)
    groups: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # kc, expected, position
    ish: int = 0
    oshift: dict[OrdinalKey, int] = field(default_factory=dict)
    warps: list[Warp] = field(default_factory=list)
    part: int = 0  # the periodic prover's component (simulator/engine/prover.py)
    watch: Any = None  # the prover's watch whose watcher this rank is (None: none)


class Pending:
    """A rendezvous waiting for participants: how many arrived, the latest ready time and
    who (rank, op, stream). A slotted class: one is built per collective instance."""

    __slots__ = ("count", "parts", "ready")

    def __init__(self) -> None:
        self.count = 0
        self.ready = 0
        self.parts: list[tuple[RankState, int, int]] = []


def wait_for(waiters: dict[int, list[int]], op: int, stream: int) -> None:
    """Park `stream` until `op` ends (once: a stream waits on one op at a time)."""
    lst = waiters.get(op)
    if lst is None:
        waiters[op] = [stream]
    elif stream not in lst:
        lst.append(stream)
