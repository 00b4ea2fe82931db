"""Kernel <-> CPU-op linking (rules 1-3 of kineto-format.md) and the CPU-op context.

- Rule 1: a GPU activity's `correlation` equals its CPU launch's `correlation`.
- Rule 2 (newer traces): the activity's `External id` is that of the innermost CPU op
  enclosing the launch (e.g. `aten::mm`, `record_param_comms`).
- Rule 3 (older traces, where `External id` equals `correlation` and links to nothing):
  the innermost `cpu_op`/`user_annotation` on the launch's thread that encloses the
  launch timestamp.

From the linked op, `OpContext` walks the enclosing ops once (memoised per op) to find
what classification and sizing need: the GEMM op and its shape, the collective metadata
sources (record_param_comms, c10d op, nccl:/gloo: annotation), and an enclosing
optimizer step.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from validation.trace.classify import GEMM_OPS, MATMUL_OPS, is_comm_op
from validation.trace.events import CpuRange, GpuActivity, Launch


@dataclass(frozen=True)
class OpContext:
    """What the enclosing CPU ops say about a kernel (indices into the CPU range list)."""

    op: int
    gemm: int
    comm: tuple[int, ...]
    optimizer: bool


NO_CONTEXT = OpContext(op=-1, gemm=-1, comm=(), optimizer=False)


class CpuIndex:
    """Per-thread nesting of CPU ranges with External-id lookup and point queries."""

    def __init__(self, cpu: list[CpuRange]) -> None:
        self.cpu = cpu
        self.by_ext: dict[int, int] = {}
        threads: dict[tuple[Any, Any], list[int]] = defaultdict(list)
        for i, r in enumerate(cpu):
            threads[(r.pid, r.tid)].append(i)
            if r.ext_id >= 0:
                self.by_ext.setdefault(r.ext_id, i)
        self._order: dict[tuple[Any, Any], list[int]] = {}
        self._starts: dict[tuple[Any, Any], list[float]] = {}
        for key, idx in threads.items():
            idx.sort(key=lambda i: (cpu[i].ts, -cpu[i].end))
            self._order[key] = idx
            self._starts[key] = [cpu[i].ts for i in idx]
            self._assign_parents(idx)
        self._context: dict[int, OpContext] = {}

    def _assign_parents(self, order: list[int]) -> None:
        stack: list[int] = []
        cpu = self.cpu
        for i in order:
            r = cpu[i]
            while stack and not (cpu[stack[-1]].ts <= r.ts and r.end <= cpu[stack[-1]].end):
                stack.pop()
            r.parent = stack[-1] if stack else -1
            stack.append(i)

    def enclosing(self, pid: Any, tid: Any, ts: float) -> int:
        """Index of the innermost range on (pid, tid) containing `ts`, or -1."""
        starts = self._starts.get((pid, tid))
        if not starts:
            return -1
        pos = bisect_right(starts, ts) - 1
        cand = self._order[(pid, tid)][pos] if pos >= 0 else -1
        while cand >= 0 and self.cpu[cand].end < ts:
            cand = self.cpu[cand].parent
        return cand

    def ancestors(self, i: int) -> Iterator[int]:
        """`i` and its enclosing ranges, innermost first."""
        while i >= 0:
            yield i
            i = self.cpu[i].parent

    def link(self, act: GpuActivity, launch: Launch | None) -> int:
        """The CPU op a GPU activity belongs to (rule 2, else rule 3), or -1."""
        if act.ext_id >= 0 and act.ext_id != act.correlation:
            op = self.by_ext.get(act.ext_id, -1)
            if op >= 0:
                return op
        if launch is None:
            return -1
        return self.enclosing(launch.pid, launch.tid, launch.ts)

    def context(self, op: int) -> OpContext:
        """Memoised OpContext of CPU range `op` (NO_CONTEXT for -1)."""
        if op < 0:
            return NO_CONTEXT
        ctx = self._context.get(op)
        if ctx is None:
            ctx = self._build_context(op)
            self._context[op] = ctx
        return ctx

    def _build_context(self, op: int) -> OpContext:
        gemm = matmul = -1
        comm: list[int] = []
        optimizer = False
        for i in self.ancestors(op):
            name = self.cpu[i].name
            if gemm < 0 and name in GEMM_OPS:
                gemm = i
            elif matmul < 0 and name in MATMUL_OPS:
                matmul = i
            elif is_comm_op(name):
                comm.append(i)
            elif name.startswith("Optimizer.step"):
                optimizer = True
        return OpContext(
            op=op, gemm=gemm if gemm >= 0 else matmul, comm=tuple(comm), optimizer=optimizer
        )
