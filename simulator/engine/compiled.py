"""Programs compiled for the engine's hot loop: flat Python lists, integer picoseconds.

Why: the engine touches every op of every simulated rank; attribute lookups on frozen
dataclasses and float arithmetic would dominate. Compilation happens once per distinct
program (and per compute-speed factor), however many ranks share it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from simulator.cost.model import KernelTimer
from simulator.cost.terms import Interference
from simulator.errors import EngineError
from workloads.graph import Program
from workloads.ops import (
    CollectiveKind,
    CollectiveOp,
    ComputeOp,
    RecvOp,
    SendOp,
    WaitOp,
    op_dependencies,
)

PS_PER_S = 10**12

COMPUTE, WAIT, COLL, SEND, RECV = 0, 1, 2, 3, 4
# the engine's hot loop tests `kind <= WAIT` for ops of known duration: keep these two lowest


def to_ps(seconds: float) -> int:
    """Seconds to integer picoseconds (rounded to nearest)."""
    return round(seconds * PS_PER_S)


@dataclass(frozen=True, slots=True)
class CommInfo:
    """What the engine needs to match and price one communication op."""

    group: str
    ordinal: int  # k-th collective on this group (collectives) / k-th transfer to/from peer
    kind: CollectiveKind
    nbytes: float
    root: int = 0
    algorithm: str | None = None
    peer: int = -1  # send: destination position; recv: source position


CommEstimate = Callable[[CommInfo], float]
"""Estimated isolated duration (s) of a rank's communication op, for overlap accounting."""


@dataclass(eq=False)
class CompiledProgram:
    """Flat arrays of one program, priced for one compute-speed factor.

    `issue_ps[i]` is when the host thread has dispatched op i (cumulative CPU dispatch
    cost in program order; the CPU never waits for the GPU in these programs), so an op
    cannot start on its stream earlier. `stretch_ps[i]` is the extra time compute op i
    takes because communication kernels run beside it (interference) and `launch_ps` the
    launch gap every compute op's duration includes: reports split them out.
    """

    program: Program
    kind: list[int]
    stream: list[int]
    deps: list[tuple[int, ...]]
    dur_ps: list[int]
    issue_ps: list[int]
    comm: list[CommInfo | None]
    stream_names: list[str]
    stream_ops: list[list[int]]
    overlap_s: list[float]
    stretch_ps: list[int] = field(default_factory=list)
    launch_ps: int = 0
    compute_ps_total: int = 0
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def num_ops(self) -> int:
        return len(self.kind)


def compile_program(
    program: Program,
    kernels: KernelTimer,
    slowdown: float = 1.0,
    overlap_slowdown: float | Interference = 1.0,
    duration_cache: dict[object, int] | None = None,
    comm_estimate: CommEstimate | None = None,
) -> CompiledProgram:
    """Compile `program`; compute durations come from `kernels`, scaled by `slowdown`
    (a straggler's factor); the part of a compute op that overlaps this rank's
    communication (estimated statically, see `estimate_overlap`) is stretched by
    `overlap_slowdown` (one factor, or per kernel class)."""
    cache = duration_cache if duration_cache is not None else {}
    stream_index: dict[str, int] = {}
    kinds: list[int] = []
    streams: list[int] = []
    deps: list[tuple[int, ...]] = []
    base: list[int] = []
    issue: list[int] = []
    comms: list[CommInfo | None] = []
    coll_count: dict[str, int] = {}
    p2p_count: dict[tuple[str, str, int], int] = {}
    issue_fn = getattr(kernels, "issue_s", None)
    cpu = 0
    for op in program.ops:
        streams.append(stream_index.setdefault(op.stream, len(stream_index)))
        deps.append(tuple(op_dependencies(op)))
        if issue_fn is not None and not isinstance(op, WaitOp):
            cpu += to_ps(issue_fn(op))
        issue.append(cpu)
        if isinstance(op, ComputeOp):
            d = cache.get(op)
            if d is None:
                seconds = kernels.duration_s(op)
                if seconds < 0 or seconds != seconds:
                    raise EngineError(
                        f"kernel model returned an invalid duration for op '{op.name}'"
                    )
                d = to_ps(seconds)
                cache[op] = d
            kinds.append(COMPUTE)
            base.append(round(d * slowdown) if slowdown != 1.0 else d)
            comms.append(None)
        elif isinstance(op, WaitOp):
            kinds.append(WAIT)
            base.append(0)
            comms.append(None)
        elif isinstance(op, CollectiveOp):
            k = coll_count.get(op.group, 0)
            coll_count[op.group] = k + 1
            kinds.append(COLL)
            base.append(0)
            comms.append(CommInfo(op.group, k, op.kind, float(op.bytes), op.root, op.algorithm))
        elif isinstance(op, SendOp | RecvOp):
            direction = "send" if isinstance(op, SendOp) else "recv"
            key = (op.group, direction, op.peer)
            k = p2p_count.get(key, 0)
            p2p_count[key] = k + 1
            kinds.append(SEND if direction == "send" else RECV)
            base.append(0)
            comms.append(
                CommInfo(op.group, k, CollectiveKind.SEND_RECV, float(op.bytes), peer=op.peer)
            )
        else:  # pragma: no cover - the Op union is closed
            raise EngineError(f"unknown op type {type(op).__name__}")
    overlap = estimate_overlap(program, kinds, base, comms, comm_estimate)
    stretch = _stretch(program, overlap, overlap_slowdown)
    durs = [d + x for d, x in zip(base, stretch, strict=True)] if any(stretch) else base
    launch = getattr(kernels, "launch_overhead_s", 0.0)
    stream_ops: list[list[int]] = [[] for _ in stream_index]
    for i, s_ in enumerate(streams):
        stream_ops[s_].append(i)
    return CompiledProgram(
        program=program,
        kind=kinds,
        stream=streams,
        deps=deps,
        dur_ps=durs,
        issue_ps=issue,
        comm=comms,
        stream_names=list(stream_index),
        stream_ops=stream_ops,
        overlap_s=overlap,
        stretch_ps=stretch,
        launch_ps=round(to_ps(launch if isinstance(launch, float | int) else 0.0) * slowdown),
        compute_ps_total=sum(d for d, k in zip(durs, kinds, strict=True) if k == COMPUTE),
    )


def _stretch(program: Program, overlap_s: list[float], factors: float | Interference) -> list[int]:
    """Extra picoseconds of each op: its overlapped seconds x (its class's factor - 1)."""
    if isinstance(factors, Interference):
        out = []
        for op, o in zip(program.ops, overlap_s, strict=True):
            f = factors.factor(op.kind) if o > 0 and isinstance(op, ComputeOp) else 1.0
            out.append(to_ps((f - 1.0) * o) if f != 1.0 else 0)
        return out
    extra = factors - 1.0
    return [to_ps(extra * o) if o > 0 and extra != 0.0 else 0 for o in overlap_s]


def estimate_overlap(
    program: Program,
    kinds: list[int],
    base_ps: list[int],
    comms: list[CommInfo | None],
    comm_estimate: CommEstimate | None,
) -> list[float]:
    """Seconds of each compute op that run while a communication op of the same rank is
    in flight, estimated on the compute stream's own clock.

    Replays the program alone: compute ops advance a clock; a communication op starts at
    the current clock (after the previous op of its stream) and lasts its estimated
    isolated time (`comm_estimate`; unknown = until waited); a wait moves the clock to the
    awaited op's end. Static, so full and symmetric runs stretch the same ops, and a
    compute op is only slowed for the part of it that can overlap a transfer.
    """
    n = len(program.ops)
    out = [0.0] * n
    clock = 0.0
    end_of: dict[int, float] = {}
    stream_free: dict[str, float] = {}
    inflight: list[tuple[float, float]] = []  # (start, end) on the compute clock
    for i, op in enumerate(program.ops):
        k = kinds[i]
        if k == COMPUTE:
            d = base_ps[i] / PS_PER_S
            lo, hi = clock, clock + d
            if inflight:
                inflight = [(a, b) for a, b in inflight if b > lo]
                if inflight:
                    out[i] = _covered(lo, hi, inflight)
            clock = hi
        elif k == WAIT:
            assert isinstance(op, WaitOp)
            clock = max(clock, end_of.get(op.target, clock))
        else:
            info = comms[i]
            assert info is not None
            start = max(clock, stream_free.get(op.stream, 0.0))
            dur = comm_estimate(info) if comm_estimate is not None else float("inf")
            end = start + dur
            stream_free[op.stream] = end
            end_of[i] = end
            inflight.append((start, end))
    return out


def _covered(lo: float, hi: float, intervals: list[tuple[float, float]]) -> float:
    """Length of [lo, hi) covered by the union of intervals."""
    pieces = sorted((max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi)
    total = 0.0
    cur_a = cur_b = None
    for a, b in pieces:
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a  # type: ignore[operator]
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a  # type: ignore[operator]
    return total
