"""A static estimate of one iteration: a rank's program replayed alone, no engine.

Why: the analytical model ranks grids by communication volume over bandwidth; it does not
see which collectives hide behind compute (the SC'24 code's forward gathers are blocking,
its reduce-scatters overlap the backward), nor that skinny GEMMs run slower. Simulating
every grid is too slow at scale. Replaying the program the simulator would run — compute
durations from the same kernel model, each collective lasting its analytical time on its
group's bandwidth, streams and waits as issued — costs milliseconds and ranks grids by
what the simulation measures, apart from the contention between different groups.

The replay is the compile-time overlap estimate of the engine
(simulator/engine/compiled.py `estimate_overlap`), run to the end of the program: compute
advances the compute stream's clock (never before the host has issued the op); a
collective starts when its stream is free and the clock has reached it; a wait moves the
clock to the awaited op's end. A segment that stands for r identical microbatches
advances the clock r times its own span.
"""

from __future__ import annotations

from collections.abc import Callable

from simulator.costmodel import KernelTimer
from simulator.engine.compiled import COMPUTE, PS_PER_S, WAIT, CommInfo, compile_program
from workloads.graph import Program, Segment
from workloads.ops import WaitOp

CommTime = Callable[[CommInfo], float]
"""Seconds one collective takes alone (its analytical time on its group's bandwidth)."""


def replay_iteration_s(
    program: Program,
    kernels: KernelTimer,
    comm_time: CommTime,
    overlap_slowdown: float = 1.0,
) -> float:
    """Estimated iteration time (s) of `program` on one rank."""
    cp = compile_program(
        program, kernels, overlap_slowdown=overlap_slowdown, comm_estimate=comm_time
    )
    opening = {s.start: s for s in program.segments if s.repeat > 1}
    open_seg: Segment | None = None
    seg_clock = 0.0
    clock = 0.0
    end_of: dict[int, float] = {}
    stream_free: dict[int, float] = {}
    ops = program.ops
    for i in range(cp.num_ops + 1):
        if open_seg is not None and i == open_seg.stop:
            extra = (open_seg.repeat - 1) * (clock - seg_clock)
            _shift_after(seg_clock, extra, stream_free, end_of)
            clock += extra
            open_seg = None
        if i == cp.num_ops:
            break
        if i in opening:
            open_seg, seg_clock = opening[i], clock
        k = cp.kind[i]
        issued = cp.issue_ps[i] / PS_PER_S
        if k == COMPUTE:
            clock = max(clock, issued) + cp.dur_ps[i] / PS_PER_S
        elif k == WAIT:
            op = ops[i]
            assert isinstance(op, WaitOp)
            clock = max(clock, end_of.get(op.target, clock))
        else:
            info = cp.comm[i]
            assert info is not None
            s = cp.stream[i]
            start = max(clock, issued, stream_free.get(s, 0.0))
            end = start + comm_time(info)
            stream_free[s] = end
            end_of[i] = end
    return max([clock, *stream_free.values()])


def _shift_after(
    start: float, extra: float, stream_free: dict[int, float], end_of: dict[int, float]
) -> None:
    """Move everything that ends after `start` later by `extra` (the repeated copies)."""
    for s, t in stream_free.items():
        if t > start:
            stream_free[s] = t + extra
    for i, t in end_of.items():
        if t > start:
            end_of[i] = t + extra
