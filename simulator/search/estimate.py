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
op's end; a collective on a stream that shares the compute stream's hardware queue
(`serial`, simulator/cost/interference.py) holds the clock until it ends. A segment that
stands for r identical microbatches advances the clock r times its own span.

What a collective costs: `PricedComm` prices it as the engine prices one alone, on the
run's own machine at the group's real size with every instance of its group kind at once
(launch and protocol latencies, a latency per ring step, node crossings, the instances'
flows sharing links), so a ring over 2,048 GCDs pays its 2,047 steps and sixteen rings
sharing a node's NICs share them; the analytical price (bus factor x bytes / beta, no
latency) is what `--bandwidths paper` asks for. Each collective runs the algorithm the
engine would run, the tuner's choice for its size over all of its group's instances
(`CollectivePricer.choose_algorithm`, NCCL's tuning.cc), or the run's fixed algorithm.
Pricing every all-reduce as a ring made the layer-norm and bias gradients' small
all-reduces on a 1,024-GPU Z group cost 12.9 ms each (2,047 ring steps of latency) where
the engine runs a 0.29 ms tree: 341 of them put 4.3 s into GPT-80B's 1,1,1024,1 estimate
(62.48 s estimated, 59.01 s simulated), 8th of the 1,024-Perlmutter screen instead of
1st. Binding the tree's flows costs the screen about twice the time at 32,768 GCDs.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

import numpy as np

from simulator.cost.model import KernelTimer
from simulator.engine.compiled import CommInfo
from workloads.graph import Program, Segment
from workloads.ops import CollectiveKind, CollectiveOp, ComputeOp, RecvOp, SendOp, WaitOp

if TYPE_CHECKING:
    from simulator.network.pricing import CollectivePricer
    from workloads.groups import ProcessGroups

CommTime = Callable[[CommInfo], float]
"""Seconds one communication op takes alone (its analytical time on its group)."""


class PricedComm:
    """Collectives priced by the run's collective pricer, every instance of the group kind
    at once (see the module docstring); one per machine, shared by every screened grid
    (bound layouts and prices are cached by the group's instance table)."""

    def __init__(self, pricer: CollectivePricer, algorithm: str | None = None):
        self.pricer = pricer
        self.algorithm = algorithm  # a fixed engine.collective_algorithm, else the tuner's
        self._times: dict[tuple[Hashable, ...], float] = {}

    def for_groups(self, groups: ProcessGroups) -> CommTime:
        """The price of one rank's communication ops under these process groups. A new
        layout drops the pricer's bound flows (its prices stay in `_times`): at 32,768
        GCDs the tuner's trees bound over every instance of 40 layouts held about 530 MB,
        which doubled `axsim search`'s peak (issue 35's target: 400 MB); rebinding the
        group tables that layouts share costs the 32,768-GCD screen about 20 s more."""
        self.pricer.forget_bindings()
        keys: dict[str, tuple[object, ...]] = {}

        def table_key(name: str) -> tuple[object, ...]:
            k = keys.get(name)
            if k is None:
                m = np.ascontiguousarray(groups[name].members)
                k = keys[name] = ("screen", m.shape, hash(m.tobytes()))
            return k

        def time_s(info: CommInfo) -> float:
            if info.peer >= 0:  # AxoNN issues no point-to-point transfers
                raise ValueError("PricedComm prices collectives only")
            tk = table_key(info.group)
            algo = info.algorithm or self.algorithm or "auto"  # as the engine runs it
            ck = (tk, info.kind, info.nbytes, info.root, algo)
            got = self._times.get(ck)
            if got is None:
                members = groups[info.group].members
                bundles = self.pricer.bundles(
                    info.kind, members, info.nbytes, info.root, algo, (*tk, algo)
                )
                got = max(
                    (self.pricer.estimate_time_s(b, info.nbytes, info.kind) for b in bundles),
                    default=0.0,
                )
                self._times[ck] = got
            return got

        return time_s


def replay_iteration_s(
    program: Program,
    kernels: KernelTimer,
    comm_time: CommTime,
    serial: frozenset[str] = frozenset(),
) -> float:
    """Estimated iteration time (s) of `program` on one rank; collectives on `serial`
    streams run between compute kernels (a shared hardware queue)."""
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
        if op.stream in serial:
            clock = end
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
