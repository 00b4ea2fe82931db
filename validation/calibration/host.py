"""Rates of a CPU host (PyTorch CPU / gloo) from its traces' ATen ops.

Why: on a CPU the "kernels" are ATen ops on the rank's main thread; there is no GEMM
efficiency curve, and what is not a GEMM (element-wise ops, attention, the optimizer, and
the dispatcher/autograd/Python time between ops) is a large share of a step. One streaming
pass over a trace collects, per ProfilerStep of the main thread (the thread that carries
the ProfilerStep ranges):

- memory-bound samples: leaf ATen ops that move data (views, allocations and autograd
  nodes excluded),
  with bytes = sum of input tensor sizes + the largest input (the output), giving the
  fit time = fixed + bytes / bandwidth over per-(op, shape) medians;
- attention samples: the innermost scaled-dot-product ops, FLOPs counted as the
  simulator's workloads count them (causal: half the scores; backward 2.5x forward);
- a step budget: its span, the GEMM time, and the time blocked in collectives (from each
  c10d op's start to the next main-thread op, which covers the enqueue, the wait and the
  wake-up).

`closure_overhead` gives the kernel model's per-op launch overhead when the traced program
is known: the value that makes the simulated program take the measured step time. It
stands for what no other term models: dispatcher, autograd and Python time per op, the
part of transcendental element-wise ops (GeLU) that bandwidth does not explain, and the
waits for late peers that the OS scheduler causes on an oversubscribed host (the
simulator replays symmetric ranks in lockstep).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from validation.calibration.piecewise import fit_line
from validation.trace.classify import FREE_OPS, GEMM_OPS, is_attention_op
from validation.trace.reader import iter_events
from validation.trace.shapes import dtype_size, numel, tensor_dims
from workloads.transformer import ATTENTION_BACKWARD_FACTOR, CAUSAL_ATTENTION_FRACTION


@dataclass
class StepBudget:
    """Where one ProfilerStep of the main thread went (seconds)."""

    step: int
    span_s: float
    comm_blocked_s: float
    gemm_s: float


@dataclass
class HostStats:
    """Samples of one rank's trace."""

    path: str
    membound: list[tuple[str, str, float, float]] = field(default_factory=list)
    attention: list[tuple[str, float, float]] = field(default_factory=list)
    steps: list[StepBudget] = field(default_factory=list)


def _tensor_bytes(dims: Any, types: Any) -> list[float]:
    out = []
    types = types if isinstance(types, list) else []
    for i, d in enumerate(tensor_dims(dims) if dims is not None else []):
        size = dtype_size(str(types[i])) if i < len(types) else 4
        out.append(float(numel(d) * (size or 4)))
    return out


def _attention_flops(name: str, dims: Any) -> float:
    t = tensor_dims(dims)
    backward = "backward" in name
    q, k = (t[1], t[2]) if backward and len(t) > 2 else (t[0], t[1]) if len(t) > 1 else ([], [])
    if len(q) != 4 or len(k) != 4:
        return 0.0
    b, h, s, d = q
    fwd = 4.0 * b * h * s * k[2] * d * CAUSAL_ATTENTION_FRACTION
    return fwd * ATTENTION_BACKWARD_FACTOR if backward else fwd


def _main_thread_events(path: Path) -> list[dict[str, Any]]:
    events = [
        e for e in iter_events(path)
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")
    ]  # fmt: skip
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    if not steps:
        return []
    tid = steps[0]["tid"]
    return sorted((e for e in events if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"]))


def host_stats(path: str | Path) -> HostStats:
    """One streaming pass over a CPU trace (TraceError from the reader on bad input)."""
    main = _main_thread_events(Path(path))
    stats = HostStats(str(path))
    starts = np.array([e["ts"] for e in main])
    has_child = [False] * len(main)
    stack: list[int] = []
    for i, e in enumerate(main):
        while stack and main[stack[-1]]["ts"] + main[stack[-1]]["dur"] <= e["ts"]:
            stack.pop()
        if stack:
            has_child[stack[-1]] = True
        stack.append(i)
    for s in (e for e in main if e["name"].startswith("ProfilerStep#")):
        t0, t1 = s["ts"], s["ts"] + s["dur"]
        lo, hi = np.searchsorted(starts, t0), np.searchsorted(starts, t1)
        budget = StepBudget(int(s["name"].split("#")[1]), s["dur"] / 1e6, 0.0, 0.0)
        for i in range(lo, hi):
            e = main[i]
            name, args = str(e["name"]), e.get("args") or {}
            if name.startswith("c10d::"):
                nxt = np.searchsorted(starts, e["ts"] + e["dur"])
                resume = min(float(starts[nxt]) if nxt < len(main) else t1, t1)
                budget.comm_blocked_s += max(resume - e["ts"], e["dur"]) / 1e6
            elif name in GEMM_OPS and not _encloses(main, i, has_child, GEMM_OPS.__contains__):
                budget.gemm_s += e["dur"] / 1e6
            elif is_attention_op(name) and not _encloses(main, i, has_child, is_attention_op):
                flops = _attention_flops(name, args.get("Input Dims"))
                if flops > 0:
                    stats.attention.append((name, flops, e["dur"] / 1e6))
            elif not has_child[i] and name.startswith("aten::") and name not in FREE_OPS:
                sizes = _tensor_bytes(args.get("Input Dims"), args.get("Input type"))
                if sizes and max(sizes) > 0:
                    key = f"{name}{args.get('Input Dims')}"
                    stats.membound.append((name, key, sum(sizes) + max(sizes), e["dur"] / 1e6))
        stats.steps.append(budget)
    return stats


def _encloses(
    main: list[dict[str, Any]], i: int, has_child: list[bool], pred: Callable[[str], bool]
) -> bool:
    """Whether op i encloses another op matching `pred` (then the inner one is counted)."""
    if not has_child[i]:
        return False
    end = main[i]["ts"] + main[i]["dur"]
    j = i + 1
    while j < len(main) and main[j]["ts"] < end:
        if pred(main[j]["name"]):
            return True
        j += 1
    return False


@dataclass(frozen=True)
class MemoryFit:
    """time = fixed_s + bytes / bandwidth_Bps over memory-bound ops."""

    fixed_s: float
    bandwidth_Bps: float
    shapes: int
    samples: int
    median_rel_error: float


def fit_memory(stats: Iterable[HostStats]) -> MemoryFit | None:
    """The memory-bound fit over per-(op, shape) medians of every rank's samples."""
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in stats:
        for _, key, nbytes, dur in s.membound:
            groups[key].append((nbytes, dur))
    rows = [(v[0][0], statistics.median(d for _, d in v)) for v in groups.values() if v[0][0] > 0]
    rows = [(b, d) for b, d in rows if d > 0]
    if len(rows) < 2:
        return None
    x = np.array([b for b, _ in rows])
    t = np.array([d for _, d in rows])
    a, b = fit_line(x, t)
    if b <= 0:
        return None
    err = np.abs((a + b * x) / t - 1)
    samples = sum(len(v) for v in groups.values())
    return MemoryFit(a, 1.0 / b, len(rows), samples, float(np.median(err)))


def fit_attention_rate(stats: Iterable[HostStats], fixed_s: float) -> float | None:
    """Attention FLOP/s: total FLOPs over total time less the fixed time per call."""
    rows = [(f, d) for s in stats for _, f, d in s.attention]
    flops = sum(f for f, _ in rows)
    time = sum(max(d - fixed_s, d * 0.5) for _, d in rows)
    return flops / time if rows and time > 0 else None


def closure_overhead(
    measured_s: float, simulate: Callable[[float], float], probe_s: float = 1e-4
) -> tuple[float, float]:
    """The per-op launch overhead o >= 0 with simulate(o) = measured_s, and simulate(0).

    The simulated step grows linearly in o when every compute op is on the critical path
    (blocking collectives); one secant step from a probe, then one correction for programs
    whose overlap makes it only nearly linear.
    """
    t0 = simulate(0.0)
    slope = (simulate(probe_s) - t0) / probe_s
    if slope <= 0:
        return 0.0, t0
    o = max((measured_s - t0) / slope, 0.0)
    if o > 0:
        o = max(o + (measured_s - simulate(o)) / slope, 0.0)
    return o, t0
