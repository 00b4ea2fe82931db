"""Per-rank Kineto traces of a simulation: what Holistic Trace Analysis (HTA) reads.

Why this shape: HTA (and Kineto itself) works on one trace file per rank, found in a
directory and keyed by `distributedInfo.rank`; `trace.json.gz` (simulator/outputs/files.py)
holds several ranks in one file for Perfetto. Each `kineto/rank-<r>.json.gz` is what the
PyTorch profiler writes for one rank of an eager NCCL job
(the shared reference kineto-format.md, from 2024-2026 traces):

- header: `schemaVersion`, `deviceProperties`, `distributedInfo` (backend, rank,
  world_size, `pg_count`, `pg_config` with every group this rank belongs to);
- the CPU thread (simulator/outputs/kineto_host.py): `ProfilerStep#1` over the step,
  ATen ops and their launches at the engine's host issue times, ProcessGroupNCCL's event
  record / stream wait / launch per collective, `handle.wait()`'s stream wait, and the
  step's closing device synchronize, with CUPTI's sync records and `ac2g` launch flows;
- the GPU: kernels on streams (NCCL kernels named as NCCL >= 2.19 names them, with
  `Collective name`, In/Out nelems, `Group size`, `Process Group Name/Description/Ranks`,
  `Seq`), each joined to its launch by `correlation` and to its CPU op by `External id`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from simulator.engine.timeline import COMM_KINDS
from simulator.outputs.kineto_host import (
    COMPUTE_STREAM_ID,
    FIRST_COMM_STREAM_ID,
    HOST_PID_BASE,
    NO_STREAM,
    STEP,
    Event,
    HostWalk,
    host_x,
)
from simulator.outputs.trace_context import RankInfo, TraceContext, comm_args
from simulator.outputs.trace_io import write_trace_json
from simulator.outputs.trace_names import kernel_name


def stream_ids(info: RankInfo) -> dict[str, int]:
    """Stream name -> Kineto stream id (compute 7, communicators 20, 21, ...)."""
    out = {"compute": COMPUTE_STREAM_ID}
    for s in dict.fromkeys(str(x) for x in info.timeline.stream):
        if s not in out:
            out[s] = FIRST_COMM_STREAM_ID + len(out) - 1
    return out


def gpu_event(
    ctx: TraceContext, info: RankInfo, i: int, pid: int, tid: int, corr: int, ext: int
) -> Event:
    """The kernel event of record i (GPU side; shared with the Perfetto trace)."""
    tl = info.timeline
    kind = str(tl.kind[i])
    ts = float(tl.start_s[i]) * 1e6
    args: dict[str, object] = {"device": pid, "stream": tid, "correlation": corr,
                               "External id": ext}  # fmt: skip
    if kind in COMM_KINDS:
        args.update(comm_args(ctx, info, i))
        if info.peer[i] >= 0:
            args["Peer"] = int(info.peer[i])
        args["op"] = str(tl.name[i])
        name = kernel_name(kind, str(tl.name[i]), int(info.dtype_bytes[i]), info.algorithm[i])
    else:
        args.update({"flops": float(tl.flops[i]), "bytes": float(tl.bytes[i]), "kind": kind})
        name = str(tl.name[i])
    args["phase"] = str(tl.phase[i])
    return {"ph": "X", "cat": "kernel", "name": name, "pid": pid, "tid": tid, "ts": ts,
            "dur": float(tl.end_s[i] - tl.start_s[i]) * 1e6, "args": args}  # fmt: skip


def wait_flows(
    info: RankInfo, pid: int, streams: dict[str, int], ids: Iterator[int]
) -> Iterator[Event]:
    """Perfetto arrows of `handle.wait()`: from the end of the awaited collective's kernel
    to the next kernel on the waiting stream, which cannot start before it (the one
    cross-stream dependency a rank has; ids drawn from `ids`)."""
    tl = info.timeline
    after: dict[str, int] = {}  # stream -> the next dispatched record (scanning backwards)
    pairs: list[tuple[int, int]] = []
    for i in range(len(tl) - 1, -1, -1):
        stream = str(tl.stream[i])
        if tl.kind[i] != "wait":
            after[stream] = i
        elif stream in after and info.wait_target[i] >= 0:
            pairs.append((int(info.wait_target[i]), after[stream]))
    for src, dst in reversed(pairs):
        flow = next(ids)
        name = f"wait {tl.name[src]}"
        yield {"ph": "s", "cat": "stream_wait", "name": name, "id": flow, "pid": pid,
               "tid": streams[str(tl.stream[src])], "ts": float(tl.end_s[src]) * 1e6}  # fmt: skip
        yield {"ph": "f", "bp": "e", "cat": "stream_wait", "name": name, "id": flow, "pid": pid,
               "tid": streams[str(tl.stream[dst])], "ts": float(tl.start_s[dst]) * 1e6}  # fmt: skip


def rank_events(ctx: TraceContext, info: RankInfo) -> Iterator[Event]:
    """Kineto events of one rank, in issue order (see module doc)."""
    rank = int(info.timeline.rank)
    host = HOST_PID_BASE + rank
    gpu = rank % ctx.gpus_per_node
    streams = stream_ids(info)
    yield {"ph": "M", "name": "process_name", "pid": host, "tid": 0,
           "args": {"name": f"python rank {rank}"}}  # fmt: skip
    yield {"ph": "M", "name": "process_name", "pid": gpu, "tid": 0, "args": {"name": f"GPU {gpu}"}}
    yield {"ph": "M", "name": "thread_name", "pid": gpu, "tid": NO_STREAM,
           "args": {"name": f"Device {gpu}"}}  # fmt: skip
    for s, tid in streams.items():
        yield {"ph": "M", "name": "thread_name", "pid": gpu, "tid": tid,
               "args": {"name": f"stream {tid} {s}"}}  # fmt: skip

    def kernel(i: int, tid: int, corr: int, ext: int) -> Event:
        return gpu_event(ctx, info, i, gpu, tid, corr, ext)

    walk = HostWalk(ctx, info, host, gpu, streams, kernel)
    yield host_x("user_annotation", f"ProfilerStep#{STEP}", host, 0.0, walk.step_end,
                 **{"External id": 1})  # fmt: skip
    yield from walk.events()


def write_kineto_traces(
    out_dir: Path, ctx: TraceContext, ranks: list[int], gzip: bool = True
) -> list[Path]:
    """One Kineto file per written rank in `out_dir` (rank-<r>.json[.gz]); in symmetric
    mode `ranks` are class representatives. Returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report = ctx.result.report
    paths = []
    for rank in ranks:
        info = ctx.rank_info(rank)
        pg = ctx.registry.pg_config(rank)
        header = {
            "schemaVersion": 1,
            "deviceProperties": [
                {"id": g, "name": report.gpu, "totalGlobalMem": int(report.memory_capacity_bytes)}
                for g in range(ctx.gpus_per_node)
            ],
            "distributedInfo": {
                "backend": "nccl",
                "rank": rank,
                "world_size": ctx.world_size,
                "pg_count": len(pg),
                "pg_config": pg,
            },
            "displayTimeUnit": "ms",
            "traceName": f"axsim rank {rank}",
        }
        name = f"rank-{rank}.json" + (".gz" if gzip else "")
        paths.append(write_trace_json(out_dir / name, header, rank_events(ctx, info)))
    return paths
