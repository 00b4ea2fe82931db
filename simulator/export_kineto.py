"""Per-rank Kineto traces of a simulation: what Holistic Trace Analysis (HTA) reads.

Why separate files: HTA (and Kineto itself) works on one trace file per rank, found in a
directory and keyed by `distributedInfo.rank`; `trace.json` (simulator/export.py) holds
all selected ranks in one file for Perfetto. Each `kineto/rank-<r>.json` has what HTA's
parser and analyses need, in the PyTorch profiler's own shape:

- `schemaVersion`, `distributedInfo` (backend, rank, world_size), `deviceProperties`;
- one `ProfilerStep#0` CPU annotation (`user_annotation`) spanning the iteration;
- per simulated record (compute kernel or collective) a `kernel` event on the GPU
  (pid = device 0 of this rank's process, tid = stream number; args device, stream,
  correlation, External id) and the `cuda_runtime` `cudaLaunchKernel` that launched it
  on the CPU thread, with the same `correlation` (HTA keeps only GPU kernels whose
  launch falls inside a ProfilerStep);
- collectives named like NCCL kernels (`ncclDevKernel_<Coll>...`, which HTA classifies as
  communication) with the comm metadata of newer traces (`Collective name`, message
  sizes, group); compute kernels keep the op name (HTA classifies them as computation).

Times are µs (floats with ns precision); `wait` records are not kernels and are left out.
"""

from __future__ import annotations

import json
from pathlib import Path

from simulator.timeline import COMM_KINDS, RankTimeline

NCCL_NAMES = {
    "all-reduce": "AllReduce",
    "all-gather": "AllGather",
    "reduce-scatter": "ReduceScatter",
    "all-to-all": "AllToAll",
    "broadcast": "Broadcast",
    "reduce": "Reduce",
    "send-recv": "SendRecv",
    "ring-exchange": "SendRecv",  # batch_isend_irecv: NCCL runs it as a SendRecv kernel
}
COLLECTIVE_NAMES = {
    "all-reduce": "allreduce",
    "all-gather": "_allgather_base",
    "reduce-scatter": "_reduce_scatter_base",
    "all-to-all": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "send-recv": "send",
    "ring-exchange": "batch_isend_irecv",
}
HOST_PID_BASE = 100_000  # CPU-side pid of rank r: HOST_PID_BASE + r
CPU_TID = 1
FIRST_STREAM = 7


def kernel_name(kind: str, name: str) -> str:
    """The kernel name of a record: NCCL-style for collectives, the op name otherwise."""
    return f"ncclDevKernel_{NCCL_NAMES[kind]}_{name}" if kind in COMM_KINDS else name


def rank_events(tl: RankTimeline) -> list[dict[str, object]]:
    """Kineto events of one rank (see module doc)."""
    host = HOST_PID_BASE + int(tl.rank)
    keep = [i for i in range(len(tl)) if str(tl.kind[i]) != "wait"]
    streams = {
        s: FIRST_STREAM + i for i, s in enumerate(dict.fromkeys(str(tl.stream[i]) for i in keep))
    }
    t0 = float(tl.start_s[keep].min()) * 1e6 if keep else 0.0
    t1 = float(tl.end_s[keep].max()) * 1e6 if keep else 0.0
    events: list[dict[str, object]] = [
        {"ph": "M", "name": "process_name", "pid": host, "tid": 0, "args": {"name": f"rank {tl.rank}"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": host, "tid": CPU_TID,
         "ts": t0 - 1.0, "dur": t1 - t0 + 2.0, "args": {"External id": 1}},
    ]  # fmt: skip
    for s, tid in streams.items():
        events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid,
                       "args": {"name": f"stream {tid} {s}"}})  # fmt: skip
    for n, i in enumerate(keep, start=1):
        kind = str(tl.kind[i])
        ts = float(tl.start_s[i]) * 1e6
        dur = float(tl.end_s[i] - tl.start_s[i]) * 1e6
        tid = streams[str(tl.stream[i])]
        corr = n + 1
        args: dict[str, object] = {"device": 0, "stream": tid, "correlation": corr,
                                   "External id": corr}  # fmt: skip
        if kind in COMM_KINDS:
            nelems = int(tl.bytes[i] // 2)
            group = str(tl.group[i])
            args.update({"Collective name": COLLECTIVE_NAMES[kind], "In msg nelems": nelems,
                         "Out msg nelems": nelems, "dtype": "BFloat16",
                         "Process Group Name": group, "Process Group Description": group})  # fmt: skip
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": host,
                       "tid": CPU_TID, "ts": ts - 0.5, "dur": 0.25,
                       "args": {"correlation": corr, "External id": corr}})  # fmt: skip
        events.append({"ph": "X", "cat": "kernel", "name": kernel_name(kind, str(tl.name[i])),
                       "pid": 0, "tid": tid, "ts": ts, "dur": dur, "args": args})  # fmt: skip
    return events


def write_kineto_traces(
    out_dir: Path, timelines: list[RankTimeline], world_size: int, gpu: str
) -> list[Path]:
    """One Kineto file per rank in `out_dir` (rank-<r>.json); returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for tl in timelines:
        doc = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": gpu}],
            "distributedInfo": {"backend": "nccl", "rank": int(tl.rank), "world_size": world_size},
            "displayTimeUnit": "ms",
            "traceName": f"axsim rank {tl.rank}",
            "traceEvents": rank_events(tl),
        }
        path = out_dir / f"rank-{tl.rank}.json"
        path.write_text(json.dumps(doc))
        paths.append(path)
    return paths
