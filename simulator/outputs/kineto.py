"""Per-rank Kineto traces of a simulation: what Holistic Trace Analysis (HTA) reads.

Why this shape: HTA (and Kineto itself) works on one trace file per rank, found in a
directory and keyed by `distributedInfo.rank`; `trace.json.gz` (simulator/outputs/files.py)
holds several ranks in one file for Perfetto. Each `kineto/rank-<r>.json.gz` is what the
PyTorch profiler writes for one rank of an eager NCCL job
(the shared reference kineto-format.md, from 2024-2026 traces):

- header: `schemaVersion`, `deviceProperties`, `distributedInfo` (backend, rank,
  world_size, `pg_count`, `pg_config` with every group this rank belongs to);
- the CPU thread: a `ProfilerStep#<STEP>` annotation over the iteration's host work;
  per compute op an `aten::` `cpu_op` whose `cudaLaunchKernel` (same `correlation` as its
  kernel; kernel `External id` = the cpu_op's) ends when the engine says the host issued
  it; per collective an `nccl:<coll>` annotation around `record_param_comms` (comm
  metadata) with ProcessGroupNCCL's calls: `cudaEventRecord` on the compute stream,
  `cudaStreamWaitEvent` (the NCCL stream waits for it), `cudaLaunchKernelExC` and the end
  `cudaEventRecord` on the NCCL stream; per `handle.wait()` a `cudaStreamWaitEvent` on
  the compute stream for that end event;
- the GPU: kernels on streams (NCCL kernels named as NCCL names them, with `Collective
  name`, In/Out nelems, `Group size`, `Process Group Name/Description/Ranks`, `Seq`) and
  `cuda_sync` "Stream Wait Event" records pointing at the recorded event
  (`wait_on_stream`, `wait_on_cuda_event_record_corr_id`), which is what HTA's critical
  path follows across streams.

Where the CPU events sit inside an op's dispatch window (the window itself is the kernel
model's `issue_s`) is presentation only: it changes no simulated time. HTA moves times to
whole microseconds (start ceil, end floor), so the split keeps every host call >= 1 µs
at the default dispatch costs (8 µs compute, 20 µs collective).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

from simulator.outputs.timeline import COMM_KINDS
from simulator.outputs.trace_context import RankInfo, TraceContext
from simulator.outputs.trace_io import write_trace_json
from simulator.outputs.trace_names import (
    ANNOTATION_NAMES,
    COLLECTIVE_NAMES,
    KINETO_DTYPES,
    aten_name,
    kernel_name,
    message_nelems,
)

# torch.profiler.schedule(wait=0, warmup=1, active=1) records step 1: a profiled step
# follows at least one warm-up step, and HTA's straggler analysis (analyzers/straggler.py)
# skips iteration 0 as warm-up
STEP = 1
HOST_PID_BASE = 100_000  # CPU-side pid of rank r: HOST_PID_BASE + r (an OS pid in real traces)
CPU_TID = 1
COMPUTE_STREAM_ID = 7  # the default CUDA stream as Kineto labels it
FIRST_COMM_STREAM_ID = 20  # NCCL streams: created later, higher ids (values seen in real traces)


def stream_ids(info: RankInfo) -> dict[str, int]:
    """Stream name -> Kineto stream id (compute 7, communicators 20, 21, ...)."""
    out = {"compute": COMPUTE_STREAM_ID}
    for s in dict.fromkeys(str(x) for x in info.timeline.stream):
        if s not in out:
            out[s] = FIRST_COMM_STREAM_ID + len(out) - 1
    return out


def comm_args(ctx: TraceContext, info: RankInfo, i: int) -> dict[str, object]:
    """The comm metadata PyTorch attaches to an NCCL kernel and to record_param_comms."""
    tl = info.timeline
    kind = str(tl.kind[i])
    group = str(tl.group[i])
    members = ctx.registry.members(group, tl.rank)
    size = int(members.size)
    dtype = int(info.dtype_bytes[i])
    n_in, n_out = message_nelems(kind, float(tl.bytes[i]), size, dtype)
    name = COLLECTIVE_NAMES[kind]
    if kind == "send-recv" and not info.is_send[i]:
        name = "recv"
    return {
        "Collective name": name,
        "In msg nelems": n_in,
        "Out msg nelems": n_out,
        "Group size": size,
        "dtype": KINETO_DTYPES.get(dtype, "BFloat16"),
        "In split size": "[]",
        "Out split size": "[]",
        "Process Group Name": info.pg_name[i],
        "Process Group Description": ctx.registry.pg_desc(group, tl.rank),
        "Process Group Ranks": ctx.registry.ranks_text(group, tl.rank),
        "Seq": int(info.seq[i]),
    }


def gpu_event(
    ctx: TraceContext, info: RankInfo, i: int, pid: int, tid: int, corr: int, ext: int
) -> dict[str, object]:
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


def _x(cat: str, name: str, pid: int, ts: float, dur: float, **args: object) -> dict[str, object]:
    """A host event on whole microseconds (floor of both ends): HTA's rounding (ceil the
    start, floor the end) then leaves it unchanged and no duration can turn negative."""
    start = math.floor(ts)
    end = max(math.floor(ts + dur), start)
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": CPU_TID,
            "ts": float(start), "dur": float(end - start), "args": args}  # fmt: skip


def _sync(
    gpu: int, tid: int, ts: float, corr: int, on_stream: int, record: int
) -> dict[str, object]:
    # a whole microsecond (ceil) for the same reason as host events; it stays between the
    # stream's previous kernel and the next one after HTA rounds those
    return {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": gpu, "tid": tid,
            "ts": float(math.ceil(ts)), "dur": 0.0,
            "args": {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": on_stream,
                     "wait_on_cuda_event_record_corr_id": record, "stream": tid,
                     "correlation": corr, "External id": corr, "device": gpu}}  # fmt: skip


def rank_events(ctx: TraceContext, info: RankInfo) -> Iterator[dict[str, object]]:
    """Kineto events of one rank, in issue order (see module doc)."""
    tl = info.timeline
    rank = int(tl.rank)
    host = HOST_PID_BASE + rank
    gpu = rank % ctx.gpus_per_node
    streams = stream_ids(info)
    yield {"ph": "M", "name": "process_name", "pid": host, "tid": 0,
           "args": {"name": f"python rank {rank}"}}  # fmt: skip
    yield {"ph": "M", "name": "process_name", "pid": gpu, "tid": 0, "args": {"name": f"GPU {gpu}"}}
    for s, tid in streams.items():
        yield {"ph": "M", "name": "thread_name", "pid": gpu, "tid": tid,
               "args": {"name": f"stream {tid} {s}"}}  # fmt: skip
    host_ops = _HostOps(ctx, info, host, gpu, streams)
    yield _x("user_annotation", f"ProfilerStep#{STEP}", host, 0.0, host_ops.cpu_end + 1.0,
             **{"External id": 1})  # fmt: skip
    yield from host_ops.events()


class _HostOps:
    """Walks one rank's records in issue order and emits host calls, sync records and
    kernels (see module doc for the layout)."""

    def __init__(
        self, ctx: TraceContext, info: RankInfo, host: int, gpu: int, streams: dict[str, int]
    ):
        self.ctx, self.info, self.host, self.gpu, self.streams = ctx, info, host, gpu, streams
        self.corr = 1  # correlation ids of runtime calls
        self.ext = 1  # External ids of CPU ops
        self.end_record: dict[int, tuple[int, int]] = {}  # comm record -> (corr, stream id)
        kinds = info.timeline.kind
        dispatched = [i for i in range(len(kinds)) if kinds[i] != "wait"]
        last = dispatched[-1] if dispatched else -1
        trailing = len(kinds) - 1 - last
        # where the host's last call ends: the last dispatch, then trailing waits (2 µs each)
        self.cpu_end = (float(info.issue_s[last]) * 1e6 if last >= 0 else 0.0) + 2.0 * trailing

    def events(self) -> Iterator[dict[str, object]]:
        tl = self.info.timeline
        issue_us = self.info.issue_s * 1e6
        pending: list[int] = []  # waits issued since the last dispatched op
        prev = 0.0
        for i in range(len(tl)):
            kind = str(tl.kind[i])
            if kind == "wait":
                pending.append(i)
                continue
            a, b = prev, float(issue_us[i])
            prev = b
            if pending:  # the waits' host calls open this op's dispatch window
                slot = 0.25 * (b - a) / len(pending)
                for j, wi in enumerate(pending):
                    yield from self._wait(wi, a + j * slot, slot)
                a += 0.25 * (b - a)
                pending = []
            if kind in COMM_KINDS:
                yield from self._collective(i, a, b)
            else:
                yield from self._compute(i, a, b)
        for j, wi in enumerate(pending):  # waits after the last op
            yield from self._wait(wi, prev + 2.0 * j, 2.0)

    def _compute(self, i: int, a: float, b: float) -> Iterator[dict[str, object]]:
        tl, host, w = self.info.timeline, self.host, b - a
        self.corr += 1
        self.ext += 1
        ext = {"External id": self.ext}
        aten = aten_name(str(tl.kind[i]), str(tl.name[i]), str(tl.phase[i]))
        yield _x("cpu_op", aten, host, a, w, **ext, **{"Op name": str(tl.name[i])})
        yield _x("cuda_runtime", "cudaLaunchKernel", host, b - 0.3 * w, 0.25 * w,
                 correlation=self.corr, **ext)  # fmt: skip
        tid = self.streams[str(tl.stream[i])]
        yield gpu_event(self.ctx, self.info, i, self.gpu, tid, self.corr, self.ext)

    def _collective(self, i: int, a: float, b: float) -> Iterator[dict[str, object]]:
        tl, host, w = self.info.timeline, self.host, b - a
        kind = str(tl.kind[i])
        self.corr += 4
        self.ext += 1
        c, ext = self.corr, {"External id": self.ext}
        tid = self.streams[str(tl.stream[i])]
        yield _x("user_annotation", ANNOTATION_NAMES[kind], host, a, w, **ext)
        yield _x("cpu_op", "record_param_comms", host, a, w, **ext,
                 **comm_args(self.ctx, self.info, i))  # fmt: skip
        # ProcessGroupNCCL: the NCCL stream waits for the work issued on the compute stream
        yield _x("cuda_runtime", "cudaEventRecord", host, a + 0.1 * w, 0.1 * w,
                 correlation=c - 3, **ext)  # fmt: skip
        yield _x("cuda_runtime", "cudaStreamWaitEvent", host, a + 0.3 * w, 0.1 * w,
                 correlation=c - 2, **ext)  # fmt: skip
        # the wait is satisfied when the kernel can start (its dependencies are done)
        yield _sync(self.gpu, tid, float(tl.start_s[i]) * 1e6, c - 2, COMPUTE_STREAM_ID, c - 3)
        yield _x("cuda_runtime", "cudaLaunchKernelExC", host, a + 0.55 * w, 0.25 * w,
                 correlation=c - 1, **ext)  # fmt: skip
        yield _x("cuda_runtime", "cudaEventRecord", host, a + 0.85 * w, 0.1 * w,
                 correlation=c, **ext)  # fmt: skip
        self.end_record[i] = (c, tid)
        yield gpu_event(self.ctx, self.info, i, self.gpu, tid, c - 1, self.ext)

    def _wait(self, wi: int, ts: float, dur: float) -> Iterator[dict[str, object]]:
        """`handle.wait()`: the compute stream waits for the collective's end event."""
        tl, host = self.info.timeline, self.host
        self.corr += 1
        self.ext += 1
        ext = {"External id": self.ext}
        yield _x("cpu_op", "record_param_comms", host, ts, dur, **ext,
                 **{"Collective name": "wait", "Group size": 1})  # fmt: skip
        yield _x("cuda_runtime", "cudaStreamWaitEvent", host, ts + 0.25 * dur, 0.5 * dur,
                 correlation=self.corr, **ext)  # fmt: skip
        rec = self.end_record.get(int(self.info.wait_target[wi]))
        if rec is not None:
            tid = self.streams[str(tl.stream[wi])]
            gpu_ts = max(float(tl.start_s[wi]) * 1e6, ts + 0.75 * dur)
            yield _sync(self.gpu, tid, gpu_ts, self.corr, rec[1], rec[0])


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
