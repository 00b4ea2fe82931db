"""A helper that writes programs the way PyTorch issues work to a GPU.

Rules it encodes (so every strategy generator gets them right once):
- compute kernels go to the compute stream in issue order;
- a collective is issued on its communicator's stream (one per group kind) and, like
  ProcessGroupNCCL's stream sync, cannot start before the compute work issued before it;
- a blocking collective is an async one followed at once by a wait on the compute stream;
- `wait(handle)` makes the compute stream wait for an async collective.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from operator import attrgetter

from workloads.errors import WorkloadError
from workloads.graph import Program, Segment
from workloads.ops import (
    COMPUTE_STREAM,
    CollectiveKind,
    CollectiveOp,
    ComputeKind,
    ComputeOp,
    Op,
    RecvOp,
    SendOp,
    WaitOp,
)

# The most ops a workload's programs may hold together (all distinct programs: one per
# pipeline stage, one per AxoNN rank class...). Measured on the 2-core development
# machine (megatron, pipelines expanded): building costs 25-80 us and ~260 bytes per op
# and simulating a symmetric run of them ~580 bytes per op in all (7.0 M ops: 509 s,
# 4.1 GB), so 2^23 ops bound a run near 10 minutes and 5 GB. The largest published
# configuration we model, GPT-3 175B on 64 A100s (TP 8, PP 8, 3 virtual stages, 1,536
# microbatches of one sequence; Narayanan et al. 2021, Table 1), needs 7.0 M: inside.
MAX_BUILT_OPS = 2**23
# Fewest ops any generator emits per microbatch body (measured: a one-layer pipeline
# stage of gpt-tiny emits 5.2 per microbatch), a lower bound for projecting a build
# before its first body exists.
MIN_OPS_PER_BODY = 4


class OpBudgetExceeded(WorkloadError):
    """The programs of a workload would exceed `MAX_BUILT_OPS`."""


@dataclass
class OpBudget:
    """Ops built so far by the programs of one workload, against a limit.

    Why: every microbatch of a pipeline (or of a run whose microbatches are not
    compressed) is built one by one, so the program grows with the batch; a batch far
    inside the config's bounds could otherwise build for hours. Generators announce the
    bodies they will emit (`microbatch_copies`), so the first body's size projects the
    total and a hopeless build fails at once instead of at the limit.
    """

    limit: int = MAX_BUILT_OPS
    used: int = 0
    announced_bodies: int = 0

    def check(self, ops: int) -> None:
        """Raise OpBudgetExceeded when `ops` (built or projected) is beyond the limit."""
        if ops > self.limit:
            raise OpBudgetExceeded(
                f"the workload needs about {ops:,} ops in its programs, more than the "
                f"{self.limit:,} axsim builds (pipelines, and runs with "
                "engine.virtual_microbatches off, build every microbatch): use a larger "
                "training.microbatch_sequences or a smaller training.batch_tokens"
            )


_BUDGET: ContextVar[OpBudget | None] = ContextVar("axsim_op_budget", default=None)


@contextmanager
def op_budget(limit: int = MAX_BUILT_OPS) -> Iterator[OpBudget]:
    """One budget shared by every program built inside the block (one workload)."""
    token = _BUDGET.set(OpBudget(limit))
    try:
        yield _BUDGET.get() or OpBudget(limit)
    finally:
        _BUDGET.reset(token)


def current_budget() -> OpBudget:
    """The workload's shared budget, or a fresh one for a builder used on its own."""
    return _BUDGET.get() or OpBudget()


def project_ops(extra: int) -> None:
    """Fail now if `extra` more ops (a generator's estimate of what it will still build)
    would exceed the current workload's budget."""
    budget = _BUDGET.get()
    if budget is not None:
        budget.check(budget.used + extra)


def comm_stream(group: str) -> str:
    """The stream name of a group kind's communicator."""
    return f"comm:{group}"


@dataclass
class ProgramBuilder:
    """Accumulates ops; returns op indices usable as handles and dependencies."""

    name: str
    ops: list[Op] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    phase: str = ""
    _last_compute: int | None = None
    _segment_start: int | None = None
    _segment_key: str = ""
    _segment_repeat: int = 1
    _budget: OpBudget = field(default_factory=current_budget)
    _charged: int = 0
    _bodies_left: int = 0

    def _charge(self) -> None:
        """Count the ops appended since the last charge against the workload's budget."""
        new = len(self.ops) - self._charged
        self._charged = len(self.ops)
        self._budget.used += new
        self._budget.check(self._budget.used)

    def _deps(self, extra: tuple[int, ...] = ()) -> tuple[int, ...]:
        deps = set(extra)
        if self._last_compute is not None:
            deps.add(self._last_compute)
        return tuple(sorted(deps))

    def compute(
        self,
        name: str,
        kind: ComputeKind,
        flops: float,
        nbytes: float,
        shape: tuple[int, ...] = (),
        deps: tuple[int, ...] = (),
        dtype_bytes: int = 2,
        sm_margin: int = 0,
    ) -> int:
        """Issue a kernel on the compute stream (`sm_margin`: SMs it leaves to a
        concurrent communication kernel)."""
        idx = self._kernel(
            name, kind, flops, nbytes, COMPUTE_STREAM, deps, shape, dtype_bytes, sm_margin
        )
        self._last_compute = idx
        return idx

    def _kernel(
        self,
        name: str,
        kind: ComputeKind,
        flops: float,
        nbytes: float,
        stream: str,
        deps: tuple[int, ...],
        shape: tuple[int, ...] = (),
        dtype_bytes: int = 2,
        sm_margin: int = 0,
    ) -> int:
        """Append a kernel on `stream` in the current phase; returns its op index."""
        self.ops.append(
            ComputeOp(
                name,
                kind,
                float(flops),
                float(nbytes),
                stream,
                tuple(sorted(set(deps))),
                shape,
                dtype_bytes,
                self.phase,
                sm_margin,
            )
        )
        return len(self.ops) - 1

    def gemm(
        self,
        name: str,
        m: int,
        n: int,
        k: int,
        dtype_bytes: int = 2,
        batch: int = 1,
        sm_margin: int = 0,
    ) -> int:
        """C (m x n) = A (m x k) B (k x n) on the compute stream."""
        flops = 2.0 * m * n * k * batch
        nbytes = float(dtype_bytes) * batch * (m * k + k * n + m * n)
        shape = (m, n, k) if batch == 1 else (m, n, k, batch)
        return self.compute(
            name,
            ComputeKind.GEMM,
            flops,
            nbytes,
            shape,
            dtype_bytes=dtype_bytes,
            sm_margin=sm_margin,
        )

    def collective(
        self,
        name: str,
        kind: CollectiveKind,
        group: str,
        nbytes: float,
        tag: str | None = None,
        blocking: bool = True,
        root: int = 0,
        deps: tuple[int, ...] = (),
    ) -> int:
        """Issue a collective on `group`'s communicator; returns its handle (op index).

        If `blocking`, the compute stream waits for it immediately.
        """
        idx = len(self.ops)
        self.ops.append(
            CollectiveOp(
                name,
                kind,
                group,
                float(nbytes),
                tag or name,
                comm_stream(group),
                self._deps(deps),
                root,
                None,
                self.phase,
            )
        )
        if blocking:
            self.wait(idx)
        return idx

    def wait(self, handle: int, name: str | None = None) -> int:
        """The compute stream waits for an earlier asynchronous op."""
        idx = len(self.ops)
        target = self.ops[handle]
        self.ops.append(
            WaitOp(name or f"wait:{target.name}", handle, COMPUTE_STREAM, (), self.phase)
        )
        self._last_compute = idx
        return idx

    def wait_all(self, handles: list[int], name: str = "wait") -> None:
        for h in handles:
            self.wait(h, name)
        handles.clear()

    def send(self, name: str, group: str, peer: int, nbytes: float, tag: str) -> int:
        idx = len(self.ops)
        self.ops.append(
            SendOp(
                name,
                group,
                peer,
                float(nbytes),
                tag,
                comm_stream(f"p2p:{group}"),
                self._deps(),
                self.phase,
            )
        )
        return idx

    def recv(self, name: str, group: str, peer: int, nbytes: float, tag: str) -> int:
        idx = len(self.ops)
        self.ops.append(
            RecvOp(
                name,
                group,
                peer,
                float(nbytes),
                tag,
                comm_stream(f"p2p:{group}"),
                self._deps(),
                self.phase,
            )
        )
        return idx

    # ------------------------------------------------------------- segments
    def begin_segment(self, key: str, repeat: int = 1) -> None:
        """Start a repeated body (e.g. one microbatch); bodies with one key are identical.
        `repeat` > 1: this body stands for that many identical copies (see Segment)."""
        self._charge()
        if self._budget.announced_bodies:  # microbatch_copies announced them: count them
            self._bodies_left, self._budget.announced_bodies = self._budget.announced_bodies, 0
        self._segment_start = len(self.ops)
        self._segment_key = key
        self._segment_repeat = repeat

    def end_segment(self) -> None:
        if self._segment_start is not None:
            self.segments.append(
                Segment(self._segment_start, len(self.ops), self._segment_key, self._segment_repeat)
            )
            if self._bodies_left:  # the bodies still to come are about this size each
                self._bodies_left -= 1
                body = len(self.ops) - self._segment_start
                self._charge()
                self._budget.check(self._budget.used + body * self._bodies_left)
        self._segment_start = None
        self._segment_repeat = 1

    def repeat_last_segment(self, repeat: int) -> None:
        """Let the segment just ended stand for `repeat` copies (see Segment.repeat): a
        generator that has seen it repeat the body before it marks it instead of emitting
        one more body to carry the count."""
        last = self.segments[-1]
        self.segments[-1] = Segment(last.start, last.stop, last.key, repeat)

    def build(self) -> Program:
        self._charge()
        return Program(self.name, tuple(self.ops), tuple(self.segments))

    def repeats(self, a: int, b: int, length: int) -> bool:
        """Whether ops[b : b + length] repeat ops[a : a + length]: equal ops whose
        dependencies follow the copy (shifted by b - a, or the same op before a)."""
        return repeats(self.ops, a, b, length)


def repeats(ops: list[Op] | tuple[Op, ...], a: int, b: int, length: int) -> bool:
    """Whether ops[b : b + length] repeat ops[a : a + length] (see ProgramBuilder.repeats):
    what lets a generator emit one body standing for several copies (Segment.repeat)."""
    if b + length > len(ops) or a + length > b:
        return False
    shift = b - a
    for x in range(length):
        oa, ob = ops[a + x], ops[b + x]
        t = type(oa)
        if t is not type(ob):
            return False
        get = _plain_getter(t)
        if oa is not ob and get(oa) != get(ob):
            return False
        da, db = _dependencies(oa), _dependencies(ob)
        if len(da) != len(db):
            return False
        for x_dep, y_dep in zip(da, db, strict=True):
            if y_dep != x_dep + shift and not (y_dep == x_dep < a):
                return False
    return True


_PLAIN: dict[type, attrgetter[object]] = {}


def _plain_getter(t: type) -> attrgetter[object]:
    """The fields of an op type other than its dependencies, read at once (C-level)."""
    got = _PLAIN.get(t)
    if got is None:
        got = attrgetter(*(f.name for f in fields(t) if f.name not in ("deps", "target")))
        _PLAIN[t] = got
    return got


def _dependencies(op: Op) -> tuple[int, ...]:
    return (*op.deps, op.target) if isinstance(op, WaitOp) else op.deps


def microbatch_copies(microbatches: int, compress: bool) -> list[int]:
    """How many microbatches each emitted body stands for: all emitted when few (or when
    `compress` is off), else the first, one body for the identical middle ones, the last.
    Emitting every one is announced to the workload's op budget (see OpBudget)."""
    if not compress or microbatches <= 3:
        budget = _BUDGET.get()
        if budget is not None:  # checked before the generator lays out its schedule
            budget.check(budget.used + microbatches * MIN_OPS_PER_BODY)
            budget.announced_bodies = microbatches
        return [1] * microbatches
    return [1, microbatches - 2, 1]
