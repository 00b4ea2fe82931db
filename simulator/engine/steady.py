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

from collections import deque
from dataclasses import dataclass, fields

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


def _same_op(a: Op, b: Op, off_a: int, off_b: int) -> bool:
    if type(a) is not type(b):
        return False
    for f in fields(a):
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if f.name == "deps":
            if len(va) != len(vb):
                return False
            for x, y in zip(va, vb, strict=True):
                if (x >= off_a) != (y >= off_b):
                    return False
                if x >= off_a and x - off_a != y - off_b:
                    return False
        elif f.name == "target" and isinstance(a, WaitOp):
            if (va >= off_a) != (vb >= off_b) or (va >= off_a and va - off_a != vb - off_b):
                return False
        elif va != vb:
            return False
    return True


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
    """Predecessor/successor lists including implicit stream-order edges."""

    def __init__(self, program: Program):
        n = len(program.ops)
        self.pred: list[list[int]] = [[] for _ in range(n)]
        self.succ: list[list[int]] = [[] for _ in range(n)]
        self.last_before: list[dict[str, int]] = []
        last: dict[str, int] = {}
        for i, op in enumerate(program.ops):
            ps = set(op_dependencies(op))
            prev = last.get(op.stream)
            if prev is not None:
                ps.add(prev)
            last[op.stream] = i
            for p in ps:
                self.pred[i].append(p)
                self.succ[p].append(i)
        self.program = program

    def _reach(self, start: int, edges: list[list[int]]) -> set[int]:
        seen = {start}
        todo = deque([start])
        while todo:
            i = todo.popleft()
            for j in edges[i]:
                if j not in seen:
                    seen.add(j)
                    todo.append(j)
        return seen

    def barrier_op(self, boundary: int) -> int | None:
        """An op W < boundary preceded by all ops < boundary and followed by all ops >=
        boundary, or None."""
        n = len(self.program.ops)
        if boundary <= 0 or boundary >= n:
            return boundary - 1 if 0 < boundary == n else None
        last: dict[str, int] = {}
        for i in range(boundary):
            last[self.program.ops[i].stream] = i
        for w in sorted(last.values(), reverse=True):
            anc = self._reach(w, self.pred)
            if not all(i in anc for i in range(boundary)):
                continue
            desc = self._reach(w, self.succ)
            if all(i in desc for i in range(boundary, n)):
                return w
        return None


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
