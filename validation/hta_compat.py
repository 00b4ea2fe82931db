"""Holistic Trace Analysis on axsim's simulated traces, next to axsim's own numbers.

Why: a simulated trace is only a trace if the tools that read real ones read it and
agree. `hta_summary(kineto_dir)` runs HTA's communication/computation overlap and
temporal breakdown on the per-rank Kineto files of `axsim simulate --out DIR`
(DIR/kineto); `axsim_summary(timeline)` computes the same quantities with
simulator.analysis on the simulated RankTimelines, with HTA's definitions:

- overlap %: time where communication and computation kernels run together, over the
  time communication kernels run (both merged per rank);
- kernel time: first kernel start to last kernel end; idle: kernel time not covered by
  any kernel; compute: merged computation kernels; non-compute: the rest (exposed
  communication and memory kernels).

HTA moves event times to whole microseconds when it reads a trace ("Rounding down ns
resolution events": start = ceil(ts), end = floor(ts + dur)); `axsim_summary(...,
hta_rounding=True)` does the same to the exported times, and then the two must agree
exactly; unrounded, they differ by up to about 1 µs per kernel.
HTA is optional (`pip install holistictraceanalysis`); importing this module does not
need it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simulator.analysis import intersection_length, union
from simulator.timeline import COMM_KINDS, RankTimeline

KEYS = ("overlap_pctg", "kernel_time_us", "idle_time_us", "compute_time_us", "non_compute_time_us")


def axsim_summary(
    timelines: list[RankTimeline], hta_rounding: bool = False
) -> dict[int, dict[str, float]]:
    """HTA's overlap and temporal-breakdown quantities from simulated timelines."""
    out = {}
    for tl in timelines:
        t = tl.select(tl.kind != "wait")
        start, end = t.start_s, t.end_s
        if hta_rounding:  # the exported µs values, as HTA rounds them
            ts, dur = t.start_s * 1e6, (t.end_s - t.start_s) * 1e6
            start, end = np.ceil(ts) / 1e6, np.floor(ts + dur) / 1e6
        comm = np.isin(t.kind, list(COMM_KINDS))
        every = union(start, end)
        comp = union(start[~comm], end[~comm])
        coll = union(start[comm], end[comm])
        span = float(end.max() - start.min()) if len(t) else 0.0
        busy = float((every[1] - every[0]).sum())
        compute = float((comp[1] - comp[0]).sum())
        comm_s = float((coll[1] - coll[0]).sum())
        overlap = intersection_length(comp, coll) / comm_s if comm_s > 0 else 0.0
        out[int(tl.rank)] = {
            "overlap_pctg": 100.0 * overlap,
            "kernel_time_us": span * 1e6,
            "idle_time_us": (span - busy) * 1e6,
            "compute_time_us": compute * 1e6,
            "non_compute_time_us": (busy - compute) * 1e6,
        }
    return out


def hta_summary(kineto_dir: str | Path) -> dict[int, dict[str, float]]:
    """HTA's get_comm_comp_overlap and get_temporal_breakdown per rank (needs HTA)."""
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_dir=str(kineto_dir))
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    temporal = analysis.get_temporal_breakdown(visualize=False)
    out: dict[int, dict[str, float]] = {}
    for _, row in overlap.iterrows():
        out[int(row["rank"])] = {"overlap_pctg": float(row["comp_comm_overlap_pctg"])}
    for _, row in temporal.iterrows():
        out[int(row["rank"])].update(
            {
                "kernel_time_us": float(row["kernel_time(us)"]),
                "idle_time_us": float(row["idle_time(us)"]),
                "compute_time_us": float(row["compute_time(us)"]),
                "non_compute_time_us": float(row["non_compute_time(us)"]),
            }
        )
    return out
