"""Programs compiled for the engine's hot loop: flat Python lists, integer picoseconds.

Why: the engine touches every op of every simulated rank; attribute lookups on frozen
dataclasses and float arithmetic would dominate. Compilation happens once per distinct
program (and per compute-speed factor), however many ranks share it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from itertools import accumulate, compress, pairwise
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from simulator.cost.model import KernelTimer
from simulator.cost.terms import Interference
from simulator.errors import EngineError
from workloads.graph import Program
from workloads.ops import (
    CollectiveKind,
    CollectiveOp,
    ComputeOp,
    Op,
    RecvOp,
    SendOp,
    WaitOp,
)

if TYPE_CHECKING:
    from simulator.cost.interference import Footprint

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
    sms: int | None = None  # SMs its kernels hold where the software fixes them (CollectiveOp)


CommEstimate = Callable[[CommInfo, int], float]
"""Estimated isolated duration (s) of a rank's communication op, for overlap accounting;
the second argument is the op's compiled kind (COLL, SEND or RECV: a receive moves bytes
from its peer to this rank, so it is priced in that direction)."""

CommLoad = Callable[[CommInfo, int], "Footprint"]
"""What a rank's communication op occupies on its GPU while it runs (blocks, HBM)."""

StretchFn = Callable[[ComputeOp, list["Footprint"], float], float]
"""How many times longer a compute op runs beside these resident collectives (the third
argument: its duration alone, in seconds)."""


@dataclass(frozen=True)
class Interplay:
    """How communication and compute of one rank interact (simulator/cost/interference.py):
    `load` and `stretch` price the mechanism's stretch of compute beside collectives;
    `serial` names the communicator streams whose hardware queue is the compute
    stream's, so their collectives run between compute kernels, not beside them."""

    load: CommLoad | None = None
    stretch: StretchFn | None = None
    serial: frozenset[str] = frozenset()


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
    # per op, the index of its distinct fields other than dependencies: ops with one
    # signature are alike in the text and compile alike but for the overlap stretch
    # (regions compare these and the durations)
    sig: list[int] = field(default_factory=list)
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
    interplay: Interplay | None = None,
) -> CompiledProgram:
    """Compile `program`; compute durations come from `kernels`, scaled by `slowdown`
    (a straggler's factor); the part of a compute op that overlaps this rank's
    communication (estimated statically, see `estimate_overlap`) is stretched by
    `overlap_slowdown` (one factor, or per kernel class), or, with `interplay.stretch`,
    by the mechanism's stretch of what overlaps it. Collectives on `interplay.serial`
    streams hold the compute kernels issued after them (a shared hardware queue)."""
    ip = interplay or Interplay()
    cache = duration_cache if duration_cache is not None else {}
    stream_index: dict[str, int] = {}
    counts: dict[object, int] = {}  # ordinal counters: per group, per (group, direction, peer)
    issue_fn = getattr(kernels, "issue_s", None)
    # what an op compiles to depends on its fields other than its dependencies: a pass
    # copied many times (pipelines) is compiled once (`_compile_op`)
    memo: dict[tuple[object, ...], int] = {}
    rows: list[_Compiled] = []
    sig: list[int] = []
    ops = program.ops
    for op in ops:  # distinct ops compiled in text order (streams numbered as met)
        key = plain_key(op)
        got = memo.get(key)
        if got is None:
            got = memo[key] = len(rows)
            rows.append(_compile_op(op, key, kernels, issue_fn, slowdown, cache, stream_index))
        sig.append(got)
    # every op's columns are its signature's (C-level maps; the same Python ints)
    kinds = list(map([r[0] for r in rows].__getitem__, sig))
    streams = list(map([r[1] for r in rows].__getitem__, sig))
    issue = list(accumulate(map([r[2] for r in rows].__getitem__, sig)))
    base = list(map([r[3] for r in rows].__getitem__, sig))
    deps = [op.deps for op in ops]
    comms: list[CommInfo | None] = [None] * len(ops)
    special = [r[0] == WAIT or r[4] is not None for r in rows]
    # waits (their target is a dependency) and communication (ordinals), in text order
    for i in compress(range(len(sig)), map(special.__getitem__, sig)):
        code, _, _, _, proto = rows[sig[i]]
        if code == WAIT:
            op = ops[i]
            deps[i] = (*op.deps, op.target)  # type: ignore[union-attr]
        if proto is None:
            continue
        counter, group, ckind, nbytes, root, algorithm, peer, sms = proto
        n = counts.get(counter, 0)
        counts[counter] = n + 1
        comms[i] = CommInfo(group, n, ckind, nbytes, root, algorithm, peer, sms)
    serial = _serial_ops(program, kinds, ip.serial)
    if serial:
        _hold_compute(program, kinds, deps, serial)
    if ip.stretch is not None and ip.load is not None:
        overlap, stretch = estimate_loaded_overlap(
            program, kinds, base, comms, comm_estimate, ip.load, ip.stretch, serial
        )
    else:
        overlap = estimate_overlap(program, kinds, base, comms, comm_estimate, serial)
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
        sig=sig,
        launch_ps=round(to_ps(launch if isinstance(launch, float | int) else 0.0) * slowdown),
        compute_ps_total=sum(d for d, k in zip(durs, kinds, strict=True) if k == COMPUTE),
    )


_Compiled = tuple[int, int, int, int, tuple[Any, ...] | None]
"""(kind code, stream, host issue ps, duration ps, collective prototype or None)."""

_PLAIN: dict[type, Callable[[Op], tuple[object, ...]]] = {}


def plain_key(op: Op) -> tuple[object, ...]:
    """An op's fields other than its dependencies, with its class: what it compiles to
    (and what a region compares, simulator/engine/regions.py) depends on nothing else."""
    t = type(op)
    get = _PLAIN.get(t)
    if get is None:
        names = [f.name for f in fields(t) if f.name not in ("deps", "target")]
        get = _PLAIN[t] = attrgetter(*names, "__class__")
    return get(op)


def _compile_op(
    op: Op,
    key: tuple[object, ...],
    kernels: KernelTimer,
    issue_fn: Callable[[Op], float] | None,
    slowdown: float,
    cache: dict[object, int],
    stream_index: dict[str, int],
) -> _Compiled:
    """What one op compiles to, apart from its dependencies and ordinal."""
    stream = stream_index.setdefault(op.stream, len(stream_index))
    cost = to_ps(issue_fn(op)) if issue_fn is not None and not isinstance(op, WaitOp) else 0
    if isinstance(op, ComputeOp):
        d = cache.get(key)
        if d is None:
            seconds = kernels.duration_s(op)
            if seconds < 0 or seconds != seconds:
                raise EngineError(f"kernel model returned an invalid duration for op '{op.name}'")
            d = to_ps(seconds)
            cache[key] = d
        return (COMPUTE, stream, cost, round(d * slowdown) if slowdown != 1.0 else d, None)
    if isinstance(op, WaitOp):
        return (WAIT, stream, cost, 0, None)
    if isinstance(op, CollectiveOp):
        coll: tuple[Any, ...] = (
            op.group,
            op.group,
            op.kind,
            float(op.bytes),
            op.root,
            op.algorithm,
            -1,
            op.sms,
        )
        return (COLL, stream, cost, 0, coll)
    if isinstance(op, SendOp | RecvOp):
        direction = "send" if isinstance(op, SendOp) else "recv"
        counter = (op.group, direction, op.peer)
        proto = (
            counter,
            op.group,
            CollectiveKind.SEND_RECV,
            float(op.bytes),
            0,
            None,
            op.peer,
            None,
        )
        return (SEND if direction == "send" else RECV, stream, cost, 0, proto)
    raise EngineError(f"unknown op type {type(op).__name__}")  # pragma: no cover


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


def _serial_ops(program: Program, kinds: list[int], streams: frozenset[str]) -> frozenset[int]:
    """Communication ops issued on a stream that shares the compute stream's queue."""
    if not streams:
        return frozenset()
    ops = program.ops
    return frozenset(i for i, k in enumerate(kinds) if k >= COLL and ops[i].stream in streams)


def _hold_compute(
    program: Program, kinds: list[int], deps: list[tuple[int, ...]], serial: frozenset[int]
) -> None:
    """The first compute op issued after a serialised collective waits for it: on a shared
    hardware queue every dispatch drains the packets before it (AQL barrier bit)."""
    pending: list[int] = []
    for i, k in enumerate(kinds):
        if i in serial:
            pending.append(i)
        elif k == COMPUTE and pending:
            deps[i] = (*deps[i], *pending)
            pending = []


def _replay_compute(
    program: Program,
    kinds: list[int],
    base_ps: list[int],
    comms: list[CommInfo | None],
    comm_estimate: CommEstimate | None,
    serial: frozenset[int],
    resident: Callable[[CommInfo, int], Any],
) -> Iterator[tuple[int, float, float, list[tuple[float, float, Any]]]]:
    """The program replayed alone on the compute stream's clock: yields each compute op
    that runs while communication is in flight, with its span [lo, hi) and the
    (start, end, resident(info, kind)) of the collectives in flight; a collective whose
    `resident` is None takes nothing from the compute beside it.

    Compute ops advance a clock; a communication op starts at the current clock (after
    the previous op of its stream) and lasts its estimated isolated time (`comm_estimate`;
    unknown = until waited); a wait moves the clock to the awaited op's end; a collective
    on a serialised stream runs between compute kernels (the clock waits for it). Static,
    so full and symmetric runs stretch the same ops.
    """
    clock = 0.0
    end_of: dict[int, float] = {}
    stream_free: dict[str, float] = {}
    inflight: list[tuple[float, float, Any]] = []
    for i, op in enumerate(program.ops):
        k = kinds[i]
        if k == COMPUTE:
            lo, hi = clock, clock + base_ps[i] / PS_PER_S
            if inflight:
                inflight = [x for x in inflight if x[1] > lo]
                if inflight:
                    yield i, lo, hi, inflight
            clock = hi
        elif k == WAIT:
            assert isinstance(op, WaitOp)
            clock = max(clock, end_of.get(op.target, clock))
        else:
            info = comms[i]
            assert info is not None
            start = max(clock, stream_free.get(op.stream, 0.0))
            dur = comm_estimate(info, k) if comm_estimate is not None else float("inf")
            end = start + dur
            stream_free[op.stream] = end
            end_of[i] = end
            if i in serial:  # runs between compute kernels: the clock waits for it
                clock = max(clock, end) if end != float("inf") else clock
                continue
            held = resident(info, k)
            if held is not None:
                inflight.append((start, end, held))


def estimate_overlap(
    program: Program,
    kinds: list[int],
    base_ps: list[int],
    comms: list[CommInfo | None],
    comm_estimate: CommEstimate | None,
    serial: frozenset[int] = frozenset(),
) -> list[float]:
    """Seconds of each compute op that run while a communication op of the same rank is
    in flight (`_replay_compute`): a compute op is only slowed for the part of it that
    can overlap a transfer."""
    out = [0.0] * len(program.ops)
    for i, lo, hi, inflight in _replay_compute(
        program, kinds, base_ps, comms, comm_estimate, serial, lambda info, k: True
    ):
        out[i] = _covered(lo, hi, [(a, b) for a, b, _ in inflight])
    return out


def estimate_loaded_overlap(
    program: Program,
    kinds: list[int],
    base_ps: list[int],
    comms: list[CommInfo | None],
    comm_estimate: CommEstimate | None,
    load: CommLoad,
    stretch: StretchFn,
    serial: frozenset[int] = frozenset(),
) -> tuple[list[float], list[int]]:
    """`estimate_overlap` with the mechanism: per compute op its overlapped seconds and
    its extra picoseconds, the integral over its span of (stretch of the collectives
    resident at each instant - 1). Collectives that hold no blocks and no HBM traffic
    are not resident; those of unknown duration count as resident until waited."""

    def footprint(info: CommInfo, k: int) -> Footprint | None:
        fp = load(info, k)
        return fp if fp.blocks or fp.hbm_Bps else None

    n = len(program.ops)
    out = [0.0] * n
    extra = [0] * n
    for i, lo, hi, inflight in _replay_compute(
        program, kinds, base_ps, comms, comm_estimate, serial, footprint
    ):
        op = program.ops[i]
        assert isinstance(op, ComputeOp)
        out[i], add = _loaded(op, lo, hi, inflight, stretch)
        extra[i] = to_ps(add)
    return out, extra


def _loaded(
    op: ComputeOp,
    lo: float,
    hi: float,
    intervals: list[tuple[float, float, Footprint]],
    stretch: StretchFn,
) -> tuple[float, float]:
    """(covered seconds, extra seconds) of [lo, hi) under the resident collectives: the
    span is cut where the resident set changes and each piece stretched by its set."""
    cuts = sorted(
        {lo, hi, *(a for a, _, _ in intervals if lo < a < hi)}
        | {b for _, b, _ in intervals if lo < b < hi}
    )
    covered = added = 0.0
    cache: dict[tuple[int, ...], float] = {}
    for a, b in pairwise(cuts):
        live = tuple(j for j, (s, e, _) in enumerate(intervals) if s <= a and e >= b)
        if not live:
            continue
        covered += b - a
        f = cache.get(live)
        if f is None:
            f = cache[live] = stretch(op, [intervals[j][2] for j in live], hi - lo)
        added += (b - a) * (f - 1.0)
    return covered, added


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
