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

`potential_stragglers(dir)` runs HTA's straggler analysis (`get_potential_stragglers`)
through its documented extension point, `straggler_identification_impl`, with
`late_start_metric`: HTA's late-start metric made to compare one collective across
ranks (its docstring says why HTA 0.5's reference metric cannot name a straggler on
NCCL >= 2.19 traces, on steps of many short collectives or on a single-rank folder).
`critical_path_shares(dir, rank)` runs HTA's critical path on one rank's step and splits
it by what bounds it, to compare with the report (`report_shares`).
`run_every_analysis(dir)` runs every analysis of HTA's TraceAnalysis on a trace folder
and returns what each gave (or the error), the check that simulated traces are accepted
as real ones are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from simulator.engine.timeline import COMM_KINDS, RankTimeline
from simulator.outputs.analysis import intersection_length, union

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


# Kernel-name prefixes of NCCL/RCCL communication kernels: `ncclKernel_` before NCCL
# 2.19 (what HTA 0.5's straggler metric looks for), `ncclDevKernel_` from 2.19 on
# (src/device/generate.py; real 2025+ traces and axsim's)
COMM_KERNEL_PREFIXES = ("ncclKernel", "ncclDevKernel")
MIN_NORMALIZED_DURATION = 0.01  # HTA's default filter: kernels >= 1% of the iteration
METRIC = "normalized_start_time"  # HTA's metric column (analyzers/straggler.py)


def late_start_metric(df: Any, symbol_table: Any) -> Any:
    """HTA's late-start straggler metric, one collective instance compared across ranks.

    HTA 0.5's reference metric (`_compute_normalized_start_time_of_significant_comm_kernels`)
    keeps communication kernels lasting >= 1% of the iteration, takes each rank's last
    such kernel per (stream, name), picks the (stream, name) whose duration varies most
    across ranks and ranks the ranks by when that kernel starts: the ranks that wait for
    a straggler start the collective early and spin, the straggler starts it last. Three
    things break it, on real traces as on simulated ones: (1) it looks for `ncclKernel`
    names only; (2) the 1% filter is applied per kernel, and the straggler's own kernels
    are the short ones (it never waits), so its "last long kernel" is an earlier
    collective than the others' and the comparison is between different collectives (a
    tie or the wrong rank); (3) when no kernel reaches 1% (a step of many small
    collectives, such as GPT-80B's 64 s step) or a folder has one rank (a symmetric run's
    single rank class: its standard deviation is undefined) it raises.

    This metric keeps HTA's steps but numbers each rank's kernels per (stream, name) in
    time order, so the k-th kernel is the same collective on every rank (every member
    issues a group's collectives in the same order), and filters collectives, not
    kernels: it keeps those whose duration varies across ranks (someone waited: the
    evidence the metric reads; a collective every rank starts together, such as one
    queued behind the previous collective on its stream, tells nothing) and, among them,
    those whose longest kernel reaches HTA's 1%, else every varying one; a folder where
    nothing varies (one rank, a symmetric run) keeps every collective. Then, as HTA: the
    last kept collective per (stream, name), the (stream, name) whose duration varies
    most, its start time per rank. Returns HTA's metric frame: rank, iteration and
    `normalized_start_time` of the chosen collective.
    """
    sym_map = symbol_table.get_sym_id_map()
    ids = [i for name, i in sym_map.items() if str(name).startswith(COMM_KERNEL_PREFIXES)]
    iterations = sorted(i for i in df["iteration"].unique() if i >= 0)
    t_min = float(df["ts"].min())
    iter_time = (float((df["ts"] + df["dur"]).max()) - t_min) / max(len(iterations), 1)
    comm = df.loc[(df["stream"] > 0) & (df["iteration"] > 0) & df["name"].isin(ids)].sort_values(
        ["rank", "ts"], kind="stable"
    )
    if comm.empty:
        raise ValueError("no communication kernel in the profiled steps")
    comm = comm.assign(
        instance=comm.groupby(["rank", "stream", "iteration", "name"]).cumcount(),
        duration=comm["dur"] / iter_time,
        **{METRIC: (comm["ts"] - t_min) / iter_time},
    )
    key = ["stream", "iteration", "name", "instance"]
    by_instance = comm.groupby(key)["duration"]
    longest = by_instance.transform("max")
    spread = by_instance.transform("std").fillna(0.0)  # one rank: no spread
    varies = spread > 0
    for keep in (varies & (longest >= MIN_NORMALIZED_DURATION), varies):
        if keep.any():
            comm, spread = comm.loc[keep], spread.loc[keep]
            break
    last = comm.groupby(key[:3])["instance"].transform("max") == comm["instance"]
    per_kernel = spread.loc[last].groupby([comm.loc[last, k] for k in key[:3]]).first()
    stream, name = per_kernel.groupby(level=["stream", "name"]).mean().idxmax()
    chosen = comm.loc[last & comm["stream"].eq(stream) & comm["name"].eq(name)]
    return chosen[["rank", "iteration", METRIC]]


def straggler_impl(df: Any, symbol_table: Any, num_candidates: int, visualize: bool) -> Any:
    """HTA's straggler identification with `late_start_metric` and HTA's candidate
    selection (`_get_top_k_stragglers_with_metric`), asked for at most as many
    candidates as there are ranks (it indexes the k-th latest start)."""
    from hta.analyzers.straggler import _get_top_k_stragglers_with_metric

    metric = late_start_metric(df, symbol_table)
    k = min(num_candidates, int(metric["rank"].nunique()))
    return _get_top_k_stragglers_with_metric(metric, METRIC, k, visualize)


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


def parse_compact_ranks(text: str) -> list[int]:
    """'0-7,16' (rank_map.json's `stands_for`) -> [0, ..., 7, 16]."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def written_rank(out_dir: str | Path, rank: int) -> int:
    """The rank whose Kineto file stands for `rank` in an `--out` folder (rank_map.json:
    in symmetric mode one file per rank class). ValueError when none does."""
    import json

    written = json.loads((Path(out_dir) / "rank_map.json").read_text())["written"]
    for w in written:
        if rank in parse_compact_ranks(str(w["stands_for"])):
            return int(w["rank"])
    raise ValueError(f"{out_dir}: no written rank stands for rank {rank}")


# HTA's critical-path `bound_by` labels (analyzers/critical_path_analysis.py `bound_by`)
# under the names axsim's report uses; zero-weight dependency and sync edges have none
BOUND_BY = {
    "gpu_compute_bound": "compute",
    "gpu_communication_bound": "communication",
    "gpu_kernel_kernel_overhead": "kernel_gaps",
    "gpu_kernel_launch_overhead": "launch",
    "cpu_bound": "cpu",
}


def critical_path_shares(analysis_or_dir: Any, rank: int) -> dict[str, float]:
    """HTA's critical path of `rank`'s profiled step: % of the path's length bound by
    compute, communication, kernel gaps, launch delays and the CPU, plus the path's
    length in µs (`length_us`). Raises ValueError when HTA finds no path."""
    analysis = _analysis(analysis_or_dir)
    step = analysis.get_profiler_steps()[0]
    found = analysis.critical_path_analysis(
        rank=rank, annotation=f"ProfilerStep#{step}", instance_id=0
    )
    if found is None or not found[1]:
        raise ValueError(f"HTA found no critical path for rank {rank}")
    edges = found[0].get_critical_path_breakdown()
    length = float(edges.duration.sum())
    by = edges.groupby("bound_by").duration.sum()
    out = {name: 100.0 * float(by.get(label, 0.0)) / length for label, name in BOUND_BY.items()}
    out["length_us"] = length
    return out


def report_shares(report: Any) -> dict[str, float]:
    """The report's split of the critical rank's iteration: % compute and % exposed
    communication (what HTA's critical path calls compute- and communication-bound)."""
    t = float(report.iteration_time_s)
    return {
        "compute": 100.0 * float(report.compute_time_s) / t,
        "communication": 100.0 * float(report.exposed_comm_time_s) / t,
    }


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
