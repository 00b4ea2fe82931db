"""Holistic Trace Analysis on axsim's simulated traces, next to axsim's own numbers.

Why: a simulated trace is only a trace if the tools that read real ones read it and
agree. `hta_summary(kineto_dir)` runs HTA's communication/computation overlap and
temporal breakdown on the per-rank Kineto files of `axsim simulate --out DIR`
(DIR/kineto); `axsim_summary(timeline)` computes the same quantities with
simulator.outputs.analysis on the simulated RankTimelines, with HTA's definitions:

- overlap %: time where communication and computation kernels run together, over the
  time communication kernels run (both merged per rank);
- kernel time: first kernel start to last kernel end; idle: kernel time not covered by
  any kernel; compute: merged computation kernels; non-compute: the rest (exposed
  communication and memory kernels).

HTA moves event times to whole microseconds when it reads a trace ("Rounding down ns
resolution events": start = ceil(ts), end = floor(ts + dur)); `axsim_summary(...,
hta_rounding=True)` does the same to the exported times, and then the two must agree
exactly; unrounded, they differ by up to about 1 µs per kernel.
HTA is optional (`pip install 'axsim[hta]'`, which pins the stack HTA 0.5 runs on:
its critical-path analysis calls pandas APIs that pandas 3 removed); importing this
module does not need it.

`potential_stragglers(dir)` runs HTA's own straggler analysis. HTA 0.5 picks the
communication kernels by the prefix `ncclKernel` (analyzers/straggler.py), the name NCCL
used before 2.19; NCCL >= 2.19 names them `ncclDevKernel_...` (real traces and ours), so
the analysis finds none and fails. The adapter shows HTA's unchanged metric the kernels
under the old prefix, nothing else.
`run_every_analysis(dir)` runs every analysis of HTA's TraceAnalysis on a trace folder
and returns what each gave (or the error), the check that simulated traces are accepted
as real ones are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from simulator.outputs.analysis import intersection_length, union
from simulator.outputs.timeline import COMM_KINDS, RankTimeline

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


class _PreNccl219Names:
    """A TraceSymbolTable view in which `ncclDevKernel_X` is also `ncclKernel_X` (same id)."""

    def __init__(self, table: Any) -> None:
        self._table = table
        names = list(table.get_sym_table())
        ids = dict(table.get_sym_id_map())
        for name in list(ids):
            if name.startswith("ncclDevKernel_"):
                alias = "ncclKernel_" + name[len("ncclDevKernel_") :]
                ids.setdefault(alias, ids[name])
                names.append(alias)
        self._names, self._ids = names, ids

    def get_sym_table(self) -> list[str]:
        return self._names

    def get_sym_id_map(self) -> dict[str, int]:
        return self._ids

    def __getattr__(self, name: str) -> Any:
        return getattr(self._table, name)


def straggler_impl(df: Any, symbol_table: Any, num_candidates: int, visualize: bool) -> Any:
    """HTA's default straggler identification, seeing NCCL >= 2.19 kernel names."""
    from hta.analyzers.straggler import find_stragglers_with_late_start_comm_kernels

    return find_stragglers_with_late_start_comm_kernels(
        df, _PreNccl219Names(symbol_table), num_candidates, visualize
    )


def potential_stragglers(analysis_or_dir: Any, num_candidates: int = 1) -> list[int]:
    """HTA's potential stragglers of a trace folder (or a TraceAnalysis), see module doc."""
    analysis = _analysis(analysis_or_dir)
    found = analysis.get_potential_stragglers(
        num_candidates=num_candidates, straggler_identification_impl=straggler_impl
    )
    return [int(r) for r in found]


def _analysis(analysis_or_dir: Any) -> Any:
    if isinstance(analysis_or_dir, str | Path):
        from hta.trace_analysis import TraceAnalysis

        return TraceAnalysis(trace_dir=str(analysis_or_dir))
    return analysis_or_dir


def run_every_analysis(trace_dir: str | Path, rank: int = 0) -> dict[str, Any]:
    """Every analysis of HTA's TraceAnalysis on `trace_dir`: name -> result, or the
    exception it raised (a failure is a value here, for the caller to judge)."""
    analysis = _analysis(trace_dir)
    step = analysis.get_profiler_steps()[0]
    calls: dict[str, Any] = {
        "profiler_steps": lambda: analysis.get_profiler_steps(),
        "potential_stragglers": lambda: potential_stragglers(analysis),
        "comm_comp_overlap": lambda: analysis.get_comm_comp_overlap(visualize=False),
        "temporal_breakdown": lambda: analysis.get_temporal_breakdown(visualize=False),
        "gpu_kernel_breakdown": lambda: analysis.get_gpu_kernel_breakdown(visualize=False),
        "idle_time_breakdown": lambda: analysis.get_idle_time_breakdown(
            ranks=[rank], visualize=False
        ),
        "queue_length_summary": lambda: analysis.get_queue_length_summary(ranks=[rank]),
        "cuda_kernel_launch_stats": lambda: analysis.get_cuda_kernel_launch_stats(
            ranks=[rank], visualize=False
        ),
        "aten_op_kernels_and_delay": lambda: analysis.get_aten_op_kernels_and_delay(),
        "critical_path": lambda: analysis.critical_path_analysis(
            rank=rank, annotation=f"ProfilerStep#{step}", instance_id=0
        ),
    }
    out: dict[str, Any] = {}
    # some analyses always draw (get_aten_op_kernels_and_delay calls plotly's show(),
    # whose first call imports the notebook renderers: ~20 s); we want the tables only
    from unittest import mock

    with mock.patch("plotly.basedatatypes.BaseFigure.show", lambda *a, **k: None):
        for name, call in calls.items():
            try:
                out[name] = call()
            except Exception as exc:  # a failing analysis is the finding, not a crash
                out[name] = exc
    return out
