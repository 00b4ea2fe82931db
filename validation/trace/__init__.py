"""PyTorch profiler (Kineto) trace parsing: traces -> measured Timeline + side tables.

Public API:
- `parse_trace(path, rank=None) -> ParsedTrace`: one rank's file (plain or gzipped JSON,
  any era 2021-2026, NVIDIA, AMD or CPU/gloo), with a `RankTimeline` in the simulator
  schema, GEMM and collective side tables, and ProfilerStep iterations.
- `parse_traces(paths or directory, align="collective") -> Timeline`: all ranks of one run
  on a common, collective-aligned clock; refuses traces of different runs.
- `iter_events(path)` / `TraceStream`: the streaming event reader underneath.
- `classify_kernel(name)`, `collective_kind(text)`: the classification tables.
All input errors raise `validation.errors.TraceError` naming the file (and rank).
"""

from validation.trace.align import check_same_run, collective_offsets, expand_paths, parse_traces
from validation.trace.classify import KERNEL_RULES, classify_kernel, collective_kind
from validation.trace.comm import CollectiveInfo, ProcessGroup
from validation.trace.model import GemmInfo, GemmOp, Iteration, ParsedTrace, RankInfo
from validation.trace.parse import parse_trace
from validation.trace.reader import TraceStream, iter_events

__all__ = [
    "KERNEL_RULES",
    "CollectiveInfo",
    "GemmInfo",
    "GemmOp",
    "Iteration",
    "ParsedTrace",
    "ProcessGroup",
    "RankInfo",
    "TraceStream",
    "check_same_run",
    "classify_kernel",
    "collective_kind",
    "collective_offsets",
    "expand_paths",
    "iter_events",
    "parse_trace",
    "parse_traces",
]
