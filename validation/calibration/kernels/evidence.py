"""What GPU traces say about each term of the kernel model, kernel by kernel.

Why a separate pass: calibration and the leave-one-trace-out check need, for every
compute kernel of a profiled step, the work it did (GEMM shape, attention FLOPs, bytes
its op moved), how much of it ran beside a collective of the same rank, and how it was
launched. `kernel_samples(trace)` lists that; `work_units(samples)` groups the kernels of
one CPU op (a GEMM's split-K reduction, a norm's two passes) into the unit the simulator
prices as one op. The fits of each term live in validation.calibration.kernels.fits.

Kinds follow the timeline's (gemm, attention, elementwise, optimizer, memcpy); element-wise
covers norms, activations, residuals, softmax, copies and casts, as the simulator's
workloads emit them.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from simulator.outputs.analysis import union
from validation.trace.classify import classify_kernel
from validation.trace.model import ParsedTrace
from validation.trace.shapes import dtype_size

COMPUTE = ("gemm", "attention", "elementwise", "optimizer", "memcpy")
MEMORY_BOUND = frozenset({"elementwise", "optimizer", "memcpy"})


@dataclass(frozen=True, slots=True)
class KernelSample:
    """One compute kernel of a profiled step (times in seconds on the trace clock)."""

    kind: str
    family: str
    name: str
    stream: str
    start_s: float
    end_s: float
    step: int
    op_key: int
    op: str
    flops: float
    traffic: float | None
    shape: tuple[int, int, int, int] | None
    dtype_bytes: int
    overlap_s: float
    launch_s: float | None
    signature: tuple[str, str, str]

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def overlap_fraction(self) -> float:
        d = self.duration_s
        return self.overlap_s / d if d > 0 else 0.0


def _comm_union(trace: ParsedTrace) -> tuple[np.ndarray, np.ndarray]:
    tl = trace.timeline
    comm = tl.mask_comm()
    return union(tl.start_s[comm], tl.end_s[comm])


def _covered(lo: float, hi: float, cs: np.ndarray, ce: np.ndarray) -> float:
    if cs.size == 0 or hi <= lo:
        return 0.0
    i = max(int(np.searchsorted(ce, lo, side="right")), 0)
    total = 0.0
    while i < cs.size and cs[i] < hi:
        total += max(0.0, min(ce[i], hi) - max(cs[i], lo))
        i += 1
    return total


def profiled_steps(trace: ParsedTrace) -> set[int]:
    """The steps whose kernels count: all ProfilerSteps but a first one of several (it
    carries warm-up: allocator growth, cuBLAS heuristics, lazy module loading)."""
    steps = sorted(it.step for it in trace.iterations)
    return set(steps[1:] if len(steps) > 1 else steps)


def kernel_samples(trace: ParsedTrace, steps: set[int] | None = None) -> list[KernelSample]:
    """Every compute kernel of `steps` (default: `profiled_steps`) with its evidence."""
    tl = trace.timeline
    steps = profiled_steps(trace) if steps is None else steps
    cs, ce = _comm_union(trace)
    gemm = {g.index: g for g in trace.gemms}
    out = []
    for k in trace.kernels:
        i = k.index
        phase = str(tl.phase[i])
        step = int(phase) if phase.lstrip("-").isdigit() else -1
        if step not in steps:
            continue
        kind = str(tl.kind[i])
        if kind not in COMPUTE:
            continue
        name = str(tl.name[i])
        a, b = float(tl.start_s[i]), float(tl.end_s[i])
        g = gemm.get(i)
        shape = (g.m, g.n, g.k, max(g.batch, 1)) if g is not None and g.m > 0 else None
        dtype = (dtype_size(g.dtype) or 4) if g is not None and g.dtype else 2
        out.append(
            KernelSample(
                kind, classify_kernel(name)[1], name, str(tl.stream[i]), a, b, step, k.op_key,
                k.op, float(tl.flops[i]), k.traffic_bytes, shape, dtype, _covered(a, b, cs, ce),
                k.launch_s, (name, k.grid, k.block),
            )
        )  # fmt: skip
    return out


@dataclass(frozen=True)
class WorkUnit:
    """The kernels one CPU op launched, priced by the simulator as one op.

    `flops` / `traffic` / `shape` say what work it did (None traffic: unknown);
    `kernels` how many kernels it took (each pays the fixed time of a kernel).
    """

    kind: str
    op: str
    kernels: int
    time_s: float
    overlap_s: float
    flops: float
    traffic: float | None
    shape: tuple[int, int, int, int] | None
    dtype_bytes: int

    @property
    def known(self) -> bool:
        """Whether the trace says how much work the unit did (so a model can price it)."""
        if self.kind in ("gemm", "attention"):
            return self.flops > 0
        return self.traffic is not None and self.traffic > 0


def work_units(samples: Iterable[KernelSample]) -> list[WorkUnit]:
    """Kernels grouped by (step, launching op, kind); unlinked kernels stay alone."""
    groups: dict[tuple[int, int, str, int], list[KernelSample]] = defaultdict(list)
    for n, s in enumerate(samples):
        key = (s.step, s.op_key, s.kind, n if s.op_key < 0 else -1)
        groups[key].append(s)
    out = []
    for rows in groups.values():
        first = rows[0]
        flops = sum(r.flops for r in rows)
        out.append(
            WorkUnit(
                first.kind, first.op, len(rows), sum(r.duration_s for r in rows),
                sum(r.overlap_s for r in rows), flops, first.traffic,
                next((r.shape for r in rows if r.shape), None), first.dtype_bytes,
            )
        )  # fmt: skip
    return out


MAX_LAUNCH_GAP_S = 10e-6
"""Longest idle time between two queued kernels that counts as a launch gap. The medians
of every trace here are 0-3 µs (ROCm's timestamps abut); a longer idle time between
kernels the host had already issued is a wait on another stream's event (a collective, a
copy), which the simulator models as a dependency, not as a launch cost."""


def launch_gaps(samples: Iterable[KernelSample]) -> list[float]:
    """Idle gaps between consecutive kernels of one stream when the later one had already
    been launched before the earlier one ended: the device, not the host, set the gap
    (gaps longer than MAX_LAUNCH_GAP_S are waits on other streams and left out)."""
    by_stream: dict[str, list[KernelSample]] = defaultdict(list)
    for s in samples:
        by_stream[s.stream].append(s)
    gaps = []
    for rows in by_stream.values():
        rows.sort(key=lambda r: r.start_s)
        for prev, nxt in itertools.pairwise(rows):
            if nxt.launch_s is None or nxt.launch_s >= prev.end_s:
                continue  # the host issued it late: a host gap, not a launch gap
            gap = nxt.start_s - prev.end_s
            if 0 <= gap <= MAX_LAUNCH_GAP_S:
                gaps.append(gap)
    return gaps


def issue_intervals(samples: Iterable[KernelSample]) -> list[float]:
    """Host time between consecutive kernel launches of one step (the host's cost per
    launched kernel when it is the bottleneck), from launches on one thread's clock."""
    launches = sorted(s.launch_s for s in samples if s.launch_s is not None)
    return [b - a for a, b in itertools.pairwise(launches) if b > a]
