"""Physical bounds the calibrator's evidence must meet: it refuses the impossible.

Why: `calibrate` fitted whatever a trace said. Timestamps in nanoseconds read as
microseconds gave an H100 at 0.44 TFLOP/s and a 2,419 s iteration; kernels overlapping on
one stream (which a stream cannot run) and message sizes 10^12 times too large (a bus
bandwidth no wire carries) were fitted too, and every simulation using the file was then
wrong without a word. Each check raises CalibrationError naming the file and what is
impossible:

- GEMMs (per shape, the fitted statistic's samples): no faster than the GPU's datasheet
  peak (x 2 for 1-byte types, whose tensor-core rate is twice the 16-bit one) and no
  slower than 1% of its roofline (the peak, HBM bandwidth for the operands, plus one
  minimal kernel duration); CPU hosts have no datasheet and are not checked.
- Kernels on one GPU stream run one after another: an overlap longer than both
  STREAM_OVERLAP_SLACK_S and a quarter of the shorter kernel is damage (real CUPTI
  timestamps overlap by a few microseconds: 13 us at most in the traces we hold).
- Collective tables: the bus bandwidth at every measured size at most
  BUSBW_LINK_FACTOR x the fastest link a GPU of that type has in any machine preset.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cache

import numpy as np

from simulator.cost.calibration import CollectiveTable
from topologies.catalogue import machine_presets
from topologies.hardware import GpuSpec, gpu_catalogue
from topologies.machines import build_machine
from validation.calibrate_comm import CalibrationError
from validation.trace.model import ParsedTrace
from workloads.ops import bus_factor

GemmKey = tuple[int, int, int, int, int]  # (m, n, k, batch, dtype bytes)

# The datasheet peak is at boost clock with perfect tile use: a GEMM measured faster by
# more than this rounding margin is a unit or shape mistake.
PEAK_MARGIN = 1.05
# "Slower than 1% of it": a GEMM below 1% of its roofline is not a slow kernel but a
# wrong unit (ns read as us make every kernel 1,000x longer).
MIN_ROOFLINE_FRACTION = 0.01
# The shortest a GPU kernel runs (launch to completion on the device, an empty kernel:
# ~2-5 us on NVIDIA and AMD GPUs), added to the roofline so tiny GEMMs are not refused.
MIN_KERNEL_S = 5e-6
STREAM_OVERLAP_SLACK_S = 20e-6
STREAM_OVERLAP_SHARE = 0.25
# In-network reduction (NVLS, SHARP) halves the bytes a GPU sends for an all-reduce, so a
# bus bandwidth above twice the GPU's fastest link cannot be measured; NVLS all-reduces
# on DGX H100 report ~480 GB/s of bus bandwidth on 450 GB/s of NVLink.
BUSBW_LINK_FACTOR = 2.0


def _peak_flops(spec: GpuSpec, dtype_bytes: int) -> float:
    return spec.peak_flops * (2.0 if dtype_bytes == 1 else 1.0)


def check_gemm_rates(gpu: str, samples: Mapping[GemmKey, Sequence[float]], where: str) -> None:
    """Every GEMM sample of `gpu` within [1% of roofline, datasheet peak]."""
    spec = gpu_catalogue().get(gpu)
    if spec is None or spec.vendor == "cpu":
        return
    for (m, n, k, batch, dtype), times in samples.items():
        flops = 2.0 * m * n * k * batch
        peak = _peak_flops(spec, dtype)
        operands = dtype * batch * (m * k + k * n + m * n)
        roofline = max(flops / peak, operands / spec.hbm_bandwidth_Bps) + MIN_KERNEL_S
        fastest, slowest = min(times), max(times)
        shape = f"GEMM {m}x{n}x{k} (batch {batch}, {dtype}-byte)"
        if fastest > 0 and flops / fastest > peak * PEAK_MARGIN:
            raise CalibrationError(
                f"{where}: {shape} ran at {flops / fastest / 1e12:,.1f} TFLOP/s, above the "
                f"{spec.display_name}'s peak of {peak / 1e12:,.0f} TFLOP/s: wrong units or "
                "shapes in the trace, or the wrong --gpu"
            )
        if slowest > roofline / MIN_ROOFLINE_FRACTION:
            raise CalibrationError(
                f"{where}: {shape} took {slowest * 1e3:,.3f} ms, over 100x its roofline on a "
                f"{spec.display_name} ({roofline * 1e3:,.4f} ms): timestamps in ns read as "
                "us, or the wrong --gpu"
            )


def check_streams(trace: ParsedTrace) -> None:
    """Kernels on one GPU stream do not overlap (see module doc); CPU traces are not
    checked (a CPU thread's ops nest)."""
    if trace.info.vendor == "cpu":
        return
    tl = trace.timeline
    for stream in np.unique(tl.stream):
        idx = np.flatnonzero(tl.stream == stream)
        if idx.size < 2:
            continue
        order = idx[np.argsort(tl.start_s[idx], kind="stable")]
        start, end = tl.start_s[order], tl.end_s[order]
        ends = np.maximum.accumulate(end)[:-1]
        holder = np.maximum.accumulate(np.where(end == np.maximum.accumulate(end), order, -1))
        overlap = ends - start[1:]
        shorter = np.minimum(end[1:] - start[1:], ends - start[:-1])
        bad = np.flatnonzero(
            (overlap > STREAM_OVERLAP_SLACK_S) & (overlap > STREAM_OVERLAP_SHARE * shorter)
        )
        if bad.size:
            i = int(bad[0])
            first, second = int(holder[i]), int(order[i + 1])
            raise CalibrationError(
                f"{trace.info.path}: kernels '{tl.name[first]}' and '{tl.name[second]}' "
                f"overlap by {overlap[i] * 1e6:,.1f} us on one stream ({stream}), which runs one "
                "kernel at a time: a damaged or merged trace"
            )


@cache
def fastest_link_Bps(gpu: str) -> float:
    """The fastest per-direction link bandwidth out of one GPU of type `gpu` in any
    machine preset (any preset's GPUs where none has this type): the bound of what a
    collective can measure."""
    best_of_type = 0.0
    best_any = 0.0
    for name in machine_presets():
        try:
            topo = build_machine(name, 2)
        except Exception:  # a preset that needs more nodes: its other sizes say the same
            continue
        gpus = np.asarray(topo.gpus)
        links = topo.links
        out = np.isin(links.src, gpus)
        if not out.any():
            continue
        per_gpu = np.zeros(int(links.src.max()) + 1)
        np.add.at(per_gpu, links.src[out], links.bandwidth_Bps[out])
        fastest = float(per_gpu.max())
        best_any = max(best_any, fastest)
        if topo.gpu_type == gpu:
            best_of_type = max(best_of_type, fastest)
    return best_of_type or best_any


def check_collective_tables(gpu: str, tables: Iterable[CollectiveTable]) -> None:
    """No table of `gpu` claims a bus bandwidth beyond BUSBW_LINK_FACTOR x its fastest
    link at any measured size (points, and segment ends inside the measured range)."""
    spec = gpu_catalogue().get(gpu)
    if spec is None or spec.vendor == "cpu":
        return
    bound = BUSBW_LINK_FACTOR * fastest_link_Bps(gpu)
    for table in tables:
        p = table.group_size or 2
        factor = bus_factor(table.collective, p)
        checks = [(pt.bytes, pt.busbw_Bps) for pt in table.points]
        measured = table.measured_max_bytes or np.inf
        for seg in table.segments:
            for size in (seg.min_bytes, min(seg.max_bytes, measured)):
                if size <= 0:
                    continue
                t = seg.time_s(size)
                if t > 0:
                    checks.append((size, size * factor / t))
        for size, busbw in checks:
            if busbw > bound:
                raise CalibrationError(
                    f"{gpu} {table.collective.value} ({table.tier}, group "
                    f"{table.group_size or 'any'}): {busbw / 1e9:,.0f} GB/s of bus bandwidth at "
                    f"{size:,.0f} bytes, above {BUSBW_LINK_FACTOR:g}x the fastest link of a "
                    f"{spec.display_name} ({bound / BUSBW_LINK_FACTOR / 1e9:,.0f} GB/s): "
                    "message sizes or times in the wrong units"
                )
