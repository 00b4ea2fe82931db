"""Fits of the kernel model's terms from GPU trace evidence (validation.calibration.kernels.evidence).

Each fit targets what the simulator must get right, the time a kind of kernel adds up to,
so rates are total-based (sum of work over sum of time net of fixed costs) rather than
per-kernel averages that small kernels would dominate. Every fit needs a minimum of
evidence and otherwise returns None, which leaves the preset in charge:

- fixed time of a memory-bound kernel: median time per kernel of ops moving < 256 KiB;
- achieved memory bandwidth: the time-weighted median of bytes / (time - kernels x fixed)
  over the memory-bound ops whose traffic is known and at least 1 MiB (element-wise,
  norms, copies, optimizer; smaller ones are all fixed cost and say nothing about
  bandwidth). Ops that would beat the HBM spec are left out: their recorded shapes
  overstate what they move (a broadcast input read once, an in-place op on a slice);
- GEMM peak P (bf16 rate of a large GEMM): sum of FLOPs / (dtype scale x curve efficiency)
  over sum of (time - fixed), over GEMMs with shapes that the curve calls compute-bound;
- attention rate: sum of FLOPs over sum of (time - fixed) of fused-attention kernels;
- fixed time of a GEMM kernel: median time of GEMMs whose FLOPs the curve prices at less
  than a tenth of their time (the library call, tile setup and epilogue dominate);
- launch gap: mean idle gap between back-to-back kernels the host had already issued
  (the mean, since the gaps of a step add up);
- host issue: median host time between consecutive kernel launches;
- interference (compute-bound, memory-bound): kernels with the same launch (name, grid,
  block) and work, alone and beside a collective: per group s = 1 + (r - 1) / f (r the
  duration ratio, f the mean overlapped fraction), the median over groups weighted by
  min(clean, overlapped) samples. Groups whose clean median is under 10 µs are left out:
  the 2022-2023 traces count whole microseconds, so a 3 -> 4 µs step would read as 1.33.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from simulator.cost.kernels import KernelModel
from validation.calibration.kernels.evidence import (
    MEMORY_BOUND,
    KernelSample,
    WorkUnit,
    issue_intervals,
    launch_gaps,
)

TINY_BYTES = 256 * 1024
BANDWIDTH_BYTES = 1024 * 1024
MIN_TINY = 10
MIN_MEMORY_UNITS = 20
MIN_MEMORY_BYTES = 64e6
MIN_GEMM_UNITS = 5
MIN_GEMM_TIME_S = 1e-3
MIN_ATTENTION_UNITS = 3
MIN_GAPS = 20
MIN_INTERFERENCE_WEIGHT = 10
MIN_INTERFERENCE_CLEAN_S = 10e-6


@dataclass(frozen=True)
class TermFit:
    """One fitted value (SI units), how much evidence it rests on, and a note."""

    value: float
    samples: int
    note: str


def fit_min_kernel(units: Iterable[WorkUnit]) -> TermFit | None:
    """Fixed time of one memory-bound kernel (the tiny ops' median time per kernel)."""
    per = [
        u.time_s / u.kernels
        for u in units
        if u.kind in MEMORY_BOUND and u.kind != "memcpy" and u.known and u.traffic < TINY_BYTES  # type: ignore[operator]
    ]
    if len(per) < MIN_TINY:
        return None
    return TermFit(float(np.median(per)), len(per), f"median of {len(per)} ops < 256 KiB")


def fit_memory_bandwidth(
    units: Iterable[WorkUnit], fixed_s: float, spec_Bps: float
) -> TermFit | None:
    """Achieved bandwidth of memory-bound ops (bytes over time net of fixed costs)."""
    rows: list[tuple[float, int]] = []
    nbytes = 0.0
    for u in units:
        if u.kind not in MEMORY_BOUND or u.kind == "memcpy" or (u.traffic or 0.0) < BANDWIDTH_BYTES:
            continue
        net = max(u.time_s - u.kernels * fixed_s, 0.1 * u.time_s)
        bw = (u.traffic or 0.0) / net
        if bw <= spec_Bps:
            rows.append((bw, max(int(u.time_s * 1e9), 1)))  # weight: nanoseconds
            nbytes += u.traffic or 0.0
    if len(rows) < MIN_MEMORY_UNITS or nbytes < MIN_MEMORY_BYTES:
        return None
    return TermFit(
        _weighted_median(rows), len(rows),
        f"time-weighted median of {len(rows)} ops >= 1 MiB, {nbytes / 1e9:.2f} GB",
    )  # fmt: skip


def _gemm_terms(u: WorkUnit, model: KernelModel) -> tuple[float, float] | None:
    """(FLOPs at unit efficiency and dtype scale, net time) of a compute-bound GEMM."""
    if u.kind != "gemm" or u.shape is None or u.flops <= 0:
        return None
    m, n, k, b = u.shape
    scale = model.params.dtype_peak_scale.get(u.dtype_bytes)
    if scale is None:
        return None
    eff = model.gemm_efficiency(m, n, k, b)
    nbytes = u.dtype_bytes * (m * k + k * n + m * n) * b
    compute = u.flops / (model.gemm_peak_flops * scale * eff)
    if compute < nbytes / model.hbm_Bps:
        return None  # memory-bound: says nothing about P
    net = u.time_s - u.kernels * model.gemm_fixed_s
    if net <= 0.5 * u.time_s:
        return None  # dominated by the fixed cost
    return u.flops / (scale * eff), net


def fit_gemm_peak(units: Iterable[WorkUnit], model: KernelModel) -> TermFit | None:
    """P (the bf16 rate of a large GEMM) that reproduces the total compute-bound GEMM time."""
    terms = [t for u in units if (t := _gemm_terms(u, model)) is not None]
    work, time = sum(w for w, _ in terms), sum(t for _, t in terms)
    if len(terms) < MIN_GEMM_UNITS or time < MIN_GEMM_TIME_S:
        return None
    return TermFit(
        work / time, len(terms), f"{len(terms)} compute-bound GEMMs, {time * 1e3:.1f} ms"
    )


def fit_gemm_fixed(units: Iterable[WorkUnit], model: KernelModel) -> TermFit | None:
    """Fixed time of one GEMM kernel: the median time per kernel of tiny GEMMs."""
    per = []
    for u in units:
        if u.kind != "gemm" or u.shape is None or u.flops <= 0:
            continue
        scale = model.params.dtype_peak_scale.get(u.dtype_bytes)
        if scale is None:
            continue
        m, n, k, b = u.shape
        work = u.flops / (model.gemm_peak_flops * scale * model.gemm_efficiency(m, n, k, b))
        if work < 0.1 * u.time_s:
            per.append(u.time_s / u.kernels)
    if len(per) < MIN_TINY:
        return None
    return TermFit(float(np.median(per)), len(per), f"median of {len(per)} tiny GEMMs")


def fit_attention_rate(units: Iterable[WorkUnit], fixed_s: float) -> TermFit | None:
    """FLOP/s of fused-attention kernels (forward and backward together)."""
    rows = [u for u in units if u.kind == "attention" and u.flops > 0]
    net = sum(max(u.time_s - u.kernels * fixed_s, 0.5 * u.time_s) for u in rows)
    if len(rows) < MIN_ATTENTION_UNITS or net <= 0:
        return None
    return TermFit(sum(u.flops for u in rows) / net, len(rows), f"{len(rows)} attention ops")


def fit_launch_gap(samples: Sequence[KernelSample]) -> TermFit | None:
    """The device-side gap between back-to-back kernels (mean: gaps add up in a step)."""
    gaps = launch_gaps(samples)
    if len(gaps) < MIN_GAPS:
        return None
    return TermFit(float(np.mean(gaps)), len(gaps), f"mean of {len(gaps)} queued gaps")


def fit_issue(samples: Sequence[KernelSample]) -> TermFit | None:
    """Host time per launched kernel (median interval between launches)."""
    gaps = issue_intervals(samples)
    if len(gaps) < MIN_GAPS:
        return None
    return TermFit(float(np.median(gaps)), len(gaps), f"median of {len(gaps)} launch intervals")


def _weighted_median(pairs: list[tuple[float, int]]) -> float:
    pairs = sorted(pairs)
    half, acc = sum(w for _, w in pairs) / 2.0, 0
    for value, w in pairs:
        acc += w
        if acc >= half:
            return value
    return pairs[-1][0]


def fit_interference(
    samples: Iterable[KernelSample],
) -> tuple[TermFit | None, TermFit | None]:
    """(compute-bound, memory-bound) stretch factors under overlapping communication."""
    groups: dict[tuple[object, ...], tuple[list[float], list[tuple[float, float]]]] = defaultdict(
        lambda: ([], [])
    )
    for s in samples:
        if s.kind == "memcpy":
            continue
        f = s.overlap_fraction
        key: tuple[object, ...] = (s.kind in ("gemm", "attention"), s.signature, s.shape, s.traffic)
        if f == 0.0:
            groups[key][0].append(s.duration_s)
        elif f >= 0.5:
            groups[key][1].append((s.duration_s, f))
    found: dict[bool, list[tuple[float, int]]] = {True: [], False: []}
    for group, (clean, over) in groups.items():
        if len(clean) < 3 or len(over) < 3:
            continue
        base = statistics.median(clean)
        if base < MIN_INTERFERENCE_CLEAN_S:
            continue
        r = statistics.median(d for d, _ in over) / base
        f = float(np.mean([x for _, x in over]))
        found[bool(group[0])].append((max(1.0 + (r - 1.0) / f, 1.0), min(len(clean), len(over))))
    out: list[TermFit | None] = []
    for compute in (True, False):
        rows = found[compute]
        weight = sum(w for _, w in rows)
        out.append(
            TermFit(_weighted_median(rows), weight, f"{len(rows)} launch groups, weight {weight}")
            if weight >= MIN_INTERFERENCE_WEIGHT
            else None
        )
    return out[0], out[1]
