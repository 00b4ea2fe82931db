"""GEMM tables, fitted GEMM rates and the compute slowdown under overlap, from traces.

GEMM table: per GPU type and shape (m, n, k, batch, dtype bytes), the median (or mean)
time of the GEMM's kernels (a CPU op's kernels summed: split-K reductions and epilogues
belong to the GEMM), with the sample count. GEMMs that ran mostly under a collective
(overlap fraction >= 0.5) are left out of a shape that also has clean samples: the
overlap slowdown is modelled separately and would otherwise count twice.

Fitted rate: time = overhead + FLOPs / rate, a relative-error least-squares line over the
table's shapes (each shape once, so frequent shapes do not dominate). The kernel model
uses it for shapes off the table where the GPU's efficiency curve means nothing (a CPU).

Overlap slowdown: compute that runs while a collective of the same rank is in flight is
slower (NCCL kernels take SMs and memory bandwidth; on a CPU host gloo threads take
cores). For each GEMM the overlapped fraction f of its duration is measured against the
union of the rank's collective records; per shape, clean samples (f = 0) and overlapped
ones (f >= 0.5) give a duration ratio r, and since the engine stretches only the
overlapped part, s = 1 + (r - 1) / mean(f). The factor is the median of the per-shape s
weighted by min(clean, overlapped) samples. Fewer than MIN_OVERLAP_SAMPLES weighted
samples leave it unset (and provenance says so).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from simulator.cost.calibration import GemmPoint, GemmTable
from simulator.outputs.analysis import union
from validation.calibration.piecewise import fit_line
from validation.trace.model import ParsedTrace
from validation.trace.shapes import dtype_size

Statistic = Literal["auto", "median", "mean"]
GemmKey = tuple[int, int, int, int, int]
MIN_OVERLAP_SAMPLES = 10
MIN_SHAPE_SAMPLES = 3


def resolve_statistic(statistic: Statistic, gpu: str) -> Literal["median", "mean"]:
    """'auto': the mean on a CPU host, the median on GPUs.

    Why: GPU kernel times are tight and an occasional outlier is noise, so the median is
    the robust estimate. On a CPU host the ranks share cores with each other, their gloo
    threads and whatever else runs there, and the OS preempts ops for whole time slices:
    that heavy tail is part of what an op costs, and a step is a sum of ops, so the mean
    predicts it (the median of a preempted op misses the slices).
    """
    if statistic == "auto":
        return "mean" if gpu == "cpu" else "median"
    return statistic


def _center(values: list[float], statistic: Statistic) -> float:
    return float(np.mean(values)) if statistic == "mean" else float(np.median(values))


def gemm_samples(traces: Iterable[ParsedTrace]) -> dict[GemmKey, list[float]]:
    """GEMM op times by (m, n, k, batch, dtype bytes), over all ranks and steps (clean
    samples only where a shape has them; see module doc)."""
    clean: dict[GemmKey, list[float]] = defaultdict(list)
    under: dict[GemmKey, list[float]] = defaultdict(list)
    for t in traces:
        ops: dict[int, list[tuple[GemmKey, float, float]]] = defaultdict(list)
        for key, dur, f, op in _overlap_fractions(t):
            ops[op].append((key, dur, f))
        for rows in ops.values():
            time = sum(d for _, d, _ in rows)
            frac = sum(d * f for _, d, f in rows) / time
            (under if frac >= 0.5 else clean)[rows[0][0]].append(time)
    return {k: clean.get(k) or under[k] for k in sorted(set(clean) | set(under))}


def gemm_table(samples: dict[GemmKey, list[float]], statistic: Statistic = "median") -> GemmTable:
    """The calibration's GEMM table of one GPU type."""
    points = [
        GemmPoint(
            m=m, n=n, k=k, batch=b, dtype_bytes=d, time_s=_center(v, statistic), samples=len(v)
        )
        for (m, n, k, b, d), v in sorted(samples.items())
    ]
    return GemmTable(points=tuple(points))


@dataclass(frozen=True)
class RateFit:
    """time = overhead_s + flops / flops_per_s, and how well it fits the shapes."""

    flops_per_s: float
    overhead_s: float
    max_rel_error: float
    median_rel_error: float
    shapes: int


def fit_gemm_rate(table: GemmTable) -> RateFit | None:
    """The effective GEMM rate and fixed time over the table's shapes (None if < 2)."""
    pts = [p for p in table.points if p.time_s]
    if len(pts) < 2:
        return None
    flops = np.array([2.0 * p.m * p.n * p.k * p.batch for p in pts])
    times = np.array([p.kernel_time_s for p in pts])
    a, b = fit_line(flops, times)
    if b <= 0:
        return None
    err = np.abs((a + b * flops) / times - 1)
    return RateFit(1.0 / b, a, float(err.max()), float(np.median(err)), len(pts))


@dataclass(frozen=True)
class OverlapFit:
    """The compute slowdown under overlap, or None with the reason."""

    slowdown: float | None
    weight: int
    shapes: int
    note: str


def _overlap_fractions(t: ParsedTrace) -> list[tuple[GemmKey, float, float, int]]:
    """Per GEMM kernel with a shape: (shape, duration, overlapped fraction, CPU op)."""
    tl = t.timeline
    comm = tl.mask_comm()
    cs, ce = union(tl.start_s[comm], tl.end_s[comm])
    out = []
    for g in t.gemms:
        if g.m <= 0:
            continue
        a, b = float(tl.start_s[g.index]), float(tl.end_s[g.index])
        if b <= a:
            continue
        lo = np.maximum(cs, a)
        hi = np.minimum(ce, b)
        covered = float(np.clip(hi - lo, 0, None).sum())
        key = (g.m, g.n, g.k, max(g.batch, 1), dtype_size(g.dtype) or 2)
        out.append((key, b - a, covered / (b - a), g.op_key))
    return out


def fit_overlap_slowdown(traces: Iterable[ParsedTrace]) -> OverlapFit:
    """The slowdown factor from same-shape GEMMs with and without overlapping comm."""
    clean: dict[GemmKey, list[float]] = defaultdict(list)
    over: dict[GemmKey, list[tuple[float, float]]] = defaultdict(list)
    for t in traces:
        for key, dur, f, _ in _overlap_fractions(t):
            if f == 0.0:
                clean[key].append(dur)
            elif f >= 0.5:
                over[key].append((dur, f))
    factors: list[tuple[float, int]] = []
    for key, rows in over.items():
        base = clean.get(key, [])
        if len(base) < MIN_SHAPE_SAMPLES or len(rows) < MIN_SHAPE_SAMPLES:
            continue
        r = statistics.median(d for d, _ in rows) / statistics.median(base)
        f = float(np.mean([x for _, x in rows]))
        factors.append((max(1.0 + (r - 1.0) / f, 1e-3), min(len(base), len(rows))))
    weight = sum(w for _, w in factors)
    if weight < MIN_OVERLAP_SAMPLES:
        return OverlapFit(
            None, weight, len(factors),
            f"left unset: {weight} weighted samples of same-shape GEMMs with and without "
            f"overlapping communication (need {MIN_OVERLAP_SAMPLES})",
        )  # fmt: skip
    expanded = sorted(factors)
    half, acc = weight / 2.0, 0
    value = expanded[-1][0]
    for s, w in expanded:
        acc += w
        if acc >= half:
            value = s
            break
    return OverlapFit(
        value, weight, len(factors), f"{len(factors)} shapes, {weight} weighted samples"
    )
