"""Result types of trace parsing: per-rank metadata, side tables, iterations, ParsedTrace.

The RankTimeline (simulator schema) carries what simulated and measured runs share; the
side tables carry what only calibration needs (GEMM shapes, collective group sizes and
element counts, process groups), each row pointing at its timeline record by `index`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from simulator.engine.timeline import RankTimeline
from validation.trace.comm import CollectiveInfo, ProcessGroup


@dataclass(frozen=True)
class RankInfo:
    """Who and what produced one trace file.

    Without distributedInfo.world_size, `world_size` is rank + 1 (a lower bound) and
    `world_size_known` is False.
    """

    path: str
    rank: int
    world_size: int
    backend: str
    era: str
    vendor: str
    gpu: str
    device: int
    process_groups: tuple[ProcessGroup, ...]
    t0_us: float
    base_time_ns: int | None
    n_events: int
    world_size_known: bool = True
    sm_count: int | None = None  # deviceProperties numSms (CUs on ROCm) of this rank's GPU
    memory_bytes: float | None = None  # deviceProperties totalGlobalMem

    @property
    def wall_start_s(self) -> float | None:
        """Unix time of the first event, when the trace says (baseTimeNanoseconds or epoch ts)."""
        if self.base_time_ns is not None:
            return self.base_time_ns / 1e9 + self.t0_us / 1e6
        if self.t0_us > 1e15:  # µs since the Unix epoch (after 2001)
            return self.t0_us / 1e6
        return None


@dataclass(frozen=True, slots=True)
class GemmInfo:
    """Side-table row for one GEMM kernel. Kernels of one CPU op share `op_key`."""

    index: int
    op: str
    op_key: int
    m: int
    n: int
    k: int
    batch: int
    dtype: str
    op_flops: float
    iteration: int
    family: str


@dataclass(frozen=True, slots=True)
class KernelInfo:
    """Side-table row for one compute kernel (GEMM, attention, memory-bound, memcpy).

    `op_key` is the launching CPU op (kernels of one op share it; -1 when unlinked) and
    `op` its name; `traffic_bytes` the bytes that op moves (validation.trace.traffic;
    None when the trace recorded no shapes); `launch_s` the host launch call's time on the
    trace clock (None when unlinked); `grid` and `block` the launch configuration ("" when
    the trace has none): kernels with equal name, grid and block do the same work.
    """

    index: int
    op_key: int
    op: str
    traffic_bytes: float | None
    launch_s: float | None
    grid: str
    block: str


@dataclass(frozen=True)
class GemmOp:
    """One GEMM CPU op with the GPU time of all its GEMM kernels (split-K reduce included)."""

    op: str
    m: int
    n: int
    k: int
    batch: int
    dtype: str
    flops: float
    kernel_time_s: float
    kernels: tuple[str, ...]
    iteration: int


@dataclass(frozen=True)
class Iteration:
    """One ProfilerStep#N: CPU range, and GPU span (NaN when the trace has no GPU work)."""

    step: int
    cpu_start_s: float
    cpu_end_s: float
    gpu_start_s: float
    gpu_end_s: float

    @property
    def start_s(self) -> float:
        """Start of the step: the earlier of its CPU and GPU starts."""
        return (
            min(self.cpu_start_s, self.gpu_start_s)
            if not math.isnan(self.gpu_start_s)
            else self.cpu_start_s
        )

    @property
    def end_s(self) -> float:
        """End of the step: the later of its CPU and GPU ends (NCCL streams may lag)."""
        return (
            max(self.cpu_end_s, self.gpu_end_s)
            if not math.isnan(self.gpu_end_s)
            else self.cpu_end_s
        )


@dataclass(frozen=True)
class ParsedTrace:
    """One rank's trace: metadata, timeline (seconds since `info.t0_us`) and side tables."""

    info: RankInfo
    timeline: RankTimeline
    gemms: tuple[GemmInfo, ...]
    collectives: tuple[CollectiveInfo, ...]
    iterations: tuple[Iteration, ...]
    kernels: tuple[KernelInfo, ...] = ()

    def kind_counts(self) -> dict[str, int]:
        """Number of timeline records per kind."""
        return dict(Counter(str(k) for k in self.timeline.kind))

    def gemm_ops(self) -> list[GemmOp]:
        """GEMM kernels grouped by their CPU op, in launch order; ops without a shape are left out."""
        groups: dict[int, list[GemmInfo]] = {}
        for g in self.gemms:
            if g.m > 0 and g.op_key >= 0:
                groups.setdefault(g.op_key, []).append(g)
        tl = self.timeline
        out = []
        for rows in groups.values():
            g = rows[0]
            time = float(sum(tl.end_s[r.index] - tl.start_s[r.index] for r in rows))
            names = tuple(str(tl.name[r.index]) for r in rows)
            out.append(
                GemmOp(g.op, g.m, g.n, g.k, g.batch, g.dtype, g.op_flops, time, names, g.iteration)
            )
        return out
