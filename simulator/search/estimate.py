"""A static estimate of one iteration: a rank's program replayed alone, no engine.

Why: the analytical model ranks grids by communication volume over bandwidth; it does not
see which collectives hide behind compute (the SC'24 code's forward gathers are blocking,
its reduce-scatters overlap the backward), nor that skinny GEMMs run slower. Simulating
every grid is too slow at scale. Replaying the program the simulator would run — compute
durations from the same kernel model, each collective lasting its analytical time on its
group's bandwidth, streams and waits as issued — costs a fraction of a second and ranks
grids by what the simulation measures, apart from the contention between different
groups and the compute slowed by overlapping communication.

The replay follows the engine's rules on one rank (as its compile-time overlap estimate
does, simulator/engine/compiled.py `estimate_overlap`): compute advances the compute
stream's clock, never before the host has issued the op; a communication op starts when
its stream is free and the clock has reached it; a wait moves the clock to the awaited
op's end. A segment that stands for r identical microbatches advances the clock r times
its own span.
"""

from __future__ import annotations

from collections.abc import Callable

from simulator.cost.model import KernelTimer
from simulator.engine.compiled import CommInfo
from workloads.graph import Program, Segment
from workloads.ops import CollectiveKind, CollectiveOp, ComputeOp, RecvOp, SendOp, WaitOp

CommTime = Callable[[CommInfo], float]
"""Seconds one communication op takes alone (its analytical time on its group)."""


def replay_iteration_s(program: Program, kernels: KernelTimer, comm_time: CommTime) -> float:
    """Estimated iteration time (s) of `program` on one rank."""
    issue_fn = getattr(kernels, "issue_s", None)
    opening = {s.start: s for s in program.segments if s.repeat > 1}
    open_seg: Segment | None = None
    seg_clock = clock = host = 0.0
    end_of: dict[int, float] = {}
    stream_free: dict[str, float] = {}
    ops = program.ops
    for i in range(len(ops) + 1):
        if open_seg is not None and i == open_seg.stop:
            extra = (open_seg.repeat - 1) * (clock - seg_clock)
            _shift_after(seg_clock, extra, stream_free, end_of)
            clock += extra
            host += extra
            open_seg = None
        if i == len(ops):
            break
        if i in opening:
            open_seg, seg_clock = opening[i], clock
        op = ops[i]
        if isinstance(op, WaitOp):
            clock = max(clock, end_of.get(op.target, clock))
            continue
        if issue_fn is not None:
            host += issue_fn(op)
        if isinstance(op, ComputeOp):
            clock = max(clock, host) + kernels.duration_s(op)
            continue
        if isinstance(op, CollectiveOp):
            info = CommInfo(op.group, 0, op.kind, float(op.bytes), op.root, op.algorithm)
        elif isinstance(op, SendOp | RecvOp):
            info = CommInfo(op.group, 0, CollectiveKind.SEND_RECV, float(op.bytes), peer=op.peer)
        else:  # pragma: no cover - the Op union is closed
            raise TypeError(f"unknown op type {type(op).__name__}")
        start = max(clock, host, stream_free.get(op.stream, 0.0))
        end = start + comm_time(info)
        stream_free[op.stream] = end
        end_of[i] = end
    return max([clock, *stream_free.values()])


def _shift_after(
    start: float, extra: float, stream_free: dict[str, float], end_of: dict[int, float]
) -> None:
    """Move everything that ends after `start` later by `extra` (the repeated copies)."""
    for s, t in stream_free.items():
        if t > start:
            stream_free[s] = t + extra
    for i, t in end_of.items():
        if t > start:
            end_of[i] = t + extra
