"""Steady-state skipping: prove that repeated segments (microbatches) repeat exactly.

A run of consecutive segments S_i..S_j with the same key can be simulated once (S_i) and
copied, shifted in time, when all of the following hold; the engine checks the static
ones here and the dynamic one (alignment) while running:

1. the segments' op bodies are identical (same ops; dependencies equal after shifting by
   the segment offset, or pointing before the segment);
2. every boundary used (start of S_i, start of S_{i+1}, end of S_j) is a *local barrier*:
   there is an op W before the boundary that every earlier op precedes (dependencies plus
   stream order) and that every later op follows;
3. at the start of S_i and of S_{i+1} every simulated rank reached its barrier op at the
   same instant, with nothing in flight (checked by the engine).

Then the state at the start of S_{i+1} equals the state at the start of S_i shifted by
D = T_{i+1} - T_i; the engine is deterministic, time-invariant and works in integer
picoseconds, so S_{i+1}, ..., S_j are exact copies of S_i shifted by multiples of D.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from workloads.graph import Program, Segment
from workloads.ops import Op, WaitOp, op_dependencies


@dataclass(frozen=True)
class SkipRun:
    """Segments first..last (indices into the plan's segment list) repeat S_first."""

    segments: tuple[Segment, ...]

    @property
    def first(self) -> Segment:
        return self.segments[0]

    @property
    def length(self) -> int:
        return self.first.stop - self.first.start


_FIELDS: dict[type, tuple[str, ...]] = {}


def _plain_fields(t: type) -> tuple[str, ...]:
    """Field names of an op type other than its dependencies (cached per type)."""
    got = _FIELDS.get(t)
    if got is None:
        got = tuple(f.name for f in fields(t) if f.name not in ("deps", "target"))
        _FIELDS[t] = got
    return got


def _same_ref(x: int, y: int, off_a: int, off_b: int) -> bool:
    """Two dependency indices mean the same thing: both before their segment, or at the
    same offset inside it."""
    if (x >= off_a) != (y >= off_b):
        return False
    return x < off_a or x - off_a == y - off_b


def _same_op(a: Op, b: Op, off_a: int, off_b: int) -> bool:
    if type(a) is not type(b):
        return False
    if len(a.deps) != len(b.deps):
        return False
    for x, y in zip(a.deps, b.deps, strict=True):
        if not _same_ref(x, y, off_a, off_b):
            return False
    if isinstance(a, WaitOp) and not _same_ref(a.target, b.target, off_a, off_b):  # type: ignore[union-attr]
        return False
    return all(getattr(a, f) == getattr(b, f) for f in _plain_fields(type(a)))


def identical_bodies(program: Program, a: Segment, b: Segment) -> bool:
    """True if segment b repeats segment a op for op (deps shifted)."""
    if a.stop - a.start != b.stop - b.start:
        return False
    ops = program.ops
    return all(
        _same_op(ops[a.start + k], ops[b.start + k], a.start, b.start)
        for k in range(a.stop - a.start)
    )


class _Dag:
    """Dependency structure (explicit deps plus implicit stream order) for barrier checks.

    With backward edges only (every op depends on earlier ops, as builders write them),
    an op W < b is preceded by every op before b exactly when W is the only
    op before b without a successor before b, and every op from b on follows W exactly
    when every op from b on whose predecessors all lie before b has W among them. Both
    are O(ops) checks (`min_succ`, `max_pred`), no graph search.
    """

    def __init__(self, program: Program):
        n = len(program.ops)
        self.preds: list[tuple[int, ...]] = []
        min_succ = np.full(n, n, dtype=np.int64)
        max_pred = np.full(n, -1, dtype=np.int64)
        self.forward = False
        last: dict[str, int] = {}
        for i, op in enumerate(program.ops):
            ps = set(op_dependencies(op))
            prev = last.get(op.stream)
            if prev is not None:
                ps.add(prev)
            last[op.stream] = i
            pt = tuple(ps)
            self.preds.append(pt)
            for p in pt:
                if p >= i:
                    self.forward = True
                elif min_succ[p] > i:
                    min_succ[p] = i
            if pt:
                max_pred[i] = max(pt)
        self.min_succ = min_succ
        self.max_pred = max_pred
        self.n = n

    def barrier_op(self, boundary: int) -> int | None:
        """An op W < boundary preceded by all ops < boundary and followed by all ops >=
        boundary, or None."""
        n = self.n
        if boundary <= 0 or boundary > n:
            return None
        if boundary == n:
            return n - 1
        if self.forward:
            return None  # forward dependencies: no cheap proof, no skipping
        sinks = np.flatnonzero(self.min_succ[:boundary] >= boundary)
        if sinks.shape[0] != 1:
            return None
        w = int(sinks[0])
        sources = np.flatnonzero(self.max_pred[boundary:] < boundary) + boundary
        for j in sources.tolist():
            if w not in self.preds[j]:
                return None
        return w


def plan_skips(program: Program) -> list[SkipRun]:
    """Runs of identical consecutive segments whose repetition can be skipped."""
    segs = sorted(program.segments, key=lambda s: s.start)
    if len(segs) < 3:
        return []
    dag = _Dag(program)
    runs: list[SkipRun] = []
    i = 0
    while i < len(segs):
        j = i
        while (
            j + 1 < len(segs)
            and segs[j + 1].key == segs[i].key
            and segs[j + 1].start == segs[j].stop
            and identical_bodies(program, segs[i], segs[j + 1])
        ):
            j += 1
        if j > i:
            bounds = [segs[i].start, segs[i + 1].start, segs[j].stop]
            if all(b == 0 or dag.barrier_op(b) is not None for b in bounds):
                runs.append(SkipRun(tuple(segs[i : j + 1])))
        i = j + 1
    return runs


def barrier_ops(program: Program, boundaries: list[int]) -> dict[int, int]:
    """The barrier op W of each boundary (boundary 0 maps to -1)."""
    dag = _Dag(program)
    out: dict[int, int] = {}
    for b in boundaries:
        w = -1 if b == 0 else dag.barrier_op(b)
        if w is None:
            raise ValueError(f"boundary {b} is not a local barrier")
        out[b] = w
    return out
