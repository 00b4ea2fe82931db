"""Programs compiled for the engine's hot loop: flat Python lists, integer picoseconds.

Why: the engine touches every op of every simulated rank; attribute lookups on frozen
dataclasses and float arithmetic would dominate. Compilation happens once per distinct
program (and per compute-speed factor), however many ranks share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.costmodel import KernelTimer
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


@dataclass(eq=False)
class CompiledProgram:
    """Flat arrays of one program, priced for one compute-speed factor."""

    program: Program
    kind: list[int]
    stream: list[int]
    deps: list[tuple[int, ...]]
    dur_ps: list[int]
    comm: list[CommInfo | None]
    stream_names: list[str]
    stream_ops: list[list[int]]
    overlapped: list[bool]
    compute_ps_total: int = 0
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def num_ops(self) -> int:
        return len(self.kind)


def compile_program(
    program: Program,
    kernels: KernelTimer,
    slowdown: float = 1.0,
    overlap_slowdown: float = 1.0,
    duration_cache: dict[object, int] | None = None,
) -> CompiledProgram:
    """Compile `program`; compute durations come from `kernels`, scaled by `slowdown`
    (a straggler's factor) and by `overlap_slowdown` for compute issued while an
    asynchronous collective of the same rank is outstanding."""
    cache = duration_cache if duration_cache is not None else {}
    stream_index: dict[str, int] = {}
    kinds: list[int] = []
    streams: list[int] = []
    deps: list[tuple[int, ...]] = []
    durs: list[int] = []
    comms: list[CommInfo | None] = []
    coll_count: dict[str, int] = {}
    p2p_count: dict[tuple[str, str, int], int] = {}
    overlapped = _overlap_flags(program)
    total = 0
    for i, op in enumerate(program.ops):
        s = stream_index.setdefault(op.stream, len(stream_index))
        streams.append(s)
        deps.append(tuple(op_dependencies(op)))
        if isinstance(op, ComputeOp):
            base = cache.get(op)
            if base is None:
                seconds = kernels.duration_s(op)
                if seconds < 0 or seconds != seconds:
                    raise EngineError(
                        f"kernel model returned an invalid duration for op '{op.name}'"
                    )
                base = to_ps(seconds)
                cache[op] = base
            d = base
            if slowdown != 1.0 or (overlapped[i] and overlap_slowdown != 1.0):
                factor = slowdown * (overlap_slowdown if overlapped[i] else 1.0)
                d = round(base * factor)
            kinds.append(COMPUTE)
            durs.append(d)
            comms.append(None)
            total += d
        elif isinstance(op, WaitOp):
            kinds.append(WAIT)
            durs.append(0)
            comms.append(None)
        elif isinstance(op, CollectiveOp):
            k = coll_count.get(op.group, 0)
            coll_count[op.group] = k + 1
            kinds.append(COLL)
            durs.append(0)
            comms.append(CommInfo(op.group, k, op.kind, float(op.bytes), op.root, op.algorithm))
        elif isinstance(op, SendOp | RecvOp):
            direction = "send" if isinstance(op, SendOp) else "recv"
            key = (op.group, direction, op.peer)
            k = p2p_count.get(key, 0)
            p2p_count[key] = k + 1
            kinds.append(SEND if direction == "send" else RECV)
            durs.append(0)
            comms.append(
                CommInfo(op.group, k, CollectiveKind.SEND_RECV, float(op.bytes), peer=op.peer)
            )
        else:  # pragma: no cover - the Op union is closed
            raise EngineError(f"unknown op type {type(op).__name__}")
    stream_ops: list[list[int]] = [[] for _ in stream_index]
    for i, s in enumerate(streams):
        stream_ops[s].append(i)
    return CompiledProgram(
        program=program,
        kind=kinds,
        stream=streams,
        deps=deps,
        dur_ps=durs,
        comm=comms,
        stream_names=list(stream_index),
        stream_ops=stream_ops,
        overlapped=overlapped,
        compute_ps_total=total,
    )


def _overlap_flags(program: Program) -> list[bool]:
    """Compute ops issued while an asynchronous collective of the rank is outstanding.

    A communication op is outstanding from its issue until an op on the issuing compute
    stream depends on it (directly or through a wait); that also settles every earlier op
    of the same communication stream (streams are FIFO).
    """
    flags = [False] * len(program.ops)
    outstanding: dict[str, list[int]] = {}
    position: dict[int, tuple[str, int]] = {}
    for i, op in enumerate(program.ops):
        if isinstance(op, CollectiveOp | SendOp | RecvOp):
            lst = outstanding.setdefault(op.stream, [])
            position[i] = (op.stream, len(lst))
            lst.append(i)
            continue
        for d in op_dependencies(op):
            where = position.get(d)
            if where is not None:
                s, _k = where
                lst = outstanding.get(s, [])
                keep = [j for j in lst if j > d]
                outstanding[s] = keep
                for idx, j in enumerate(keep):
                    position[j] = (s, idx)
        if isinstance(op, ComputeOp):
            flags[i] = any(outstanding.values())
    return flags
