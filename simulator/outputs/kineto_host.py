"""The CPU side of a simulated Kineto trace: one eager PyTorch rank's host thread.

What the PyTorch profiler records on the host of an eager NCCL rank, at the times the
engine's host issued each op (`RankInfo.issue_s`: cumulative dispatch costs; the engine's
host never blocks inside an iteration, simulator/engine/periodic.py), so the CPU runs
ahead of the GPU as eager PyTorch does:

- per compute op an `aten::` `cpu_op` around its `cudaLaunchKernel` (same `correlation`
  as the kernel; kernel `External id` = the cpu_op's);
- per collective an `nccl:<coll>` annotation around `record_param_comms` (comm metadata)
  with ProcessGroupNCCL's calls (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp,
  `collective()`: `syncStream` records an event on the current stream and makes the NCCL
  stream wait for it, then the NCCL launch and the work's end event): `cudaEventRecord`,
  `cudaStreamWaitEvent`, `cudaLaunchKernelExC`, `cudaEventRecord`;
- per `handle.wait()` (`WorkNCCL::synchronizeStream`) a `cudaStreamWaitEvent` making the
  compute stream wait for the collective's end event;
- the step ends in the host's one blocking call: `cudaDeviceSynchronize` until the GPU has
  finished (AxoNN synchronises the device when the overlap context closes and after its
  optimizer step, axonn/intra_layer/overlap_communication.py `clear_handles` and
  axonn/optim.py; `axsim trace-torch` synchronises before `prof.step()`), and
  `ProfilerStep#<STEP>` covers it. A trace without it would end the step when the CPU
  stops dispatching, long before the GPU does;
- CUPTI's synchronization records (`cuda_sync`): a `Stream Wait Event` on the waiting
  stream at the time of its `cudaStreamWaitEvent` call (CUPTI records the API call, as in
  HTA's tests/data/critical_path/cuda_event_sync*), naming the recorded event
  (`wait_on_stream`, `wait_on_cuda_event_record_corr_id`), and a `Context Sync` spanning
  the `cudaDeviceSynchronize` on no stream (-1). These are the edges Holistic Trace
  Analysis' critical path follows across streams and from the GPU back to the CPU
  (hta/analyzers/critical_path_analysis.py `_construct_graph_from_kernels`). A Stream
  Wait Event is written with no duration (real ones last the call's 1-3 µs): HTA 0.5's
  overlap and temporal breakdowns count every event on a stream, sync records included,
  as a computation kernel (analyzers/communication_analysis.py; only the idle-time
  breakdown drops `cuda_sync`), and the critical path reads only its place and ids;
- `ac2g` flows from each launch to its kernel (id = correlation), as Kineto writes them.

Waits issued together (no dispatch between them) are written in the order their
collectives end: the GPU applies them all before the next kernel whatever their order,
and HTA keeps one sync edge per kernel, the last it reads, which is then the binding one.

Where the calls sit inside an op's dispatch window (the window itself is the kernel
model's `issue_s`) is presentation only: it changes no simulated time. HTA moves times to
whole microseconds (start ceil, end floor), so host events are written on whole
microseconds and the split keeps every host call >= 1 µs at the default dispatch costs
(8 µs compute, 20 µs collective).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from simulator.engine.timeline import COMM_KINDS
from simulator.outputs.trace_context import RankInfo, TraceContext, comm_args
from simulator.outputs.trace_names import ANNOTATION_NAMES, aten_name

# torch.profiler.schedule(wait=0, warmup=1, active=1) records step 1: a profiled step
# follows at least one warm-up step, and HTA's straggler analysis (analyzers/straggler.py)
# skips iteration 0 as warm-up
STEP = 1
HOST_PID_BASE = 100_000  # CPU-side pid of rank r: HOST_PID_BASE + r (an OS pid in real traces)
CPU_TID = 1
COMPUTE_STREAM_ID = 7  # the default CUDA stream as Kineto labels it
FIRST_COMM_STREAM_ID = 20  # NCCL streams: created later, higher ids (values seen in real traces)
NO_STREAM = -1  # Kineto's stream (and tid) of device-wide records such as Context Sync

Event = dict[str, object]
GpuEventFn = Callable[[int, int, int, int], Event]
"""gpu_event(record, stream id, correlation, External id) -> the kernel event."""


def host_x(cat: str, name: str, pid: int, ts: float, dur: float, **args: object) -> Event:
    """A host event on whole microseconds (floor of both ends): HTA's rounding (ceil the
    start, floor the end) then leaves it unchanged and no duration can turn negative."""
    start = math.floor(ts)
    end = max(math.floor(ts + dur), start)
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": CPU_TID,
            "ts": float(start), "dur": float(end - start), "args": args}  # fmt: skip


def sync_record(
    call: Event, kind: str, gpu: int, tid: int, span: bool = True, **args: object
) -> Event:
    """CUPTI's synchronization record of the runtime call `call` (same start, correlation
    and External id; its span, or none: module doc), on stream `tid` of device `gpu`."""
    a = call["args"]
    assert isinstance(a, dict)
    return {"ph": "X", "cat": "cuda_sync", "name": kind, "pid": gpu, "tid": tid,
            "ts": call["ts"], "dur": call["dur"] if span else 0.0,
            "args": {"cuda_sync_kind": kind, **args, "stream": tid,
                     "correlation": a["correlation"], "External id": a["External id"],
                     "device": gpu}}  # fmt: skip


def launch_flow(launch: Event, kernel: Event) -> Iterator[Event]:
    """Kineto's `ac2g` arrow from a launch to its kernel (id = the correlation)."""
    a = kernel["args"]
    assert isinstance(a, dict)
    corr = a["correlation"]
    yield {"ph": "s", "id": corr, "pid": launch["pid"], "tid": launch["tid"],
           "ts": launch["ts"], "cat": "ac2g", "name": "ac2g"}  # fmt: skip
    yield {"ph": "f", "id": corr, "pid": kernel["pid"], "tid": kernel["tid"],
           "ts": kernel["ts"], "cat": "ac2g", "name": "ac2g", "bp": "e"}  # fmt: skip


class HostWalk:
    """Walks one rank's records in issue order and yields its host calls, sync records,
    kernels and launch flows (module doc), then the step's closing synchronize."""

    def __init__(
        self,
        ctx: TraceContext,
        info: RankInfo,
        host: int,
        gpu: int,
        streams: dict[str, int],
        gpu_event: GpuEventFn,
    ):
        self.ctx, self.info, self.host, self.gpu, self.streams = ctx, info, host, gpu, streams
        self.gpu_event = gpu_event
        self.corr = 1  # correlation ids of runtime calls
        self.ext = 1  # External ids of CPU ops
        self.end_record: dict[int, tuple[int, int]] = {}  # comm record -> (corr, stream id)
        tl = info.timeline
        kinds = tl.kind
        dispatched = [i for i in range(len(kinds)) if kinds[i] != "wait"]
        last = dispatched[-1] if dispatched else -1
        trailing = len(kinds) - 1 - last
        # where the host's last dispatch ends: the last op, then trailing waits (2 µs each)
        self.cpu_end = (float(info.issue_s[last]) * 1e6 if last >= 0 else 0.0) + 2.0 * trailing
        gpu_end = float(tl.end_s[dispatched].max()) * 1e6 if dispatched else 0.0
        # the closing synchronize returns once the last kernel has ended (>= 1 µs call)
        self.sync_start = math.floor(self.cpu_end) + 1.0
        self.step_end = max(float(math.ceil(gpu_end)), self.sync_start + 1.0) + 1.0

    def events(self) -> Iterator[Event]:
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
                yield from self._waits(pending, a, 0.25 * (b - a))
                a += 0.25 * (b - a)
                pending = []
            if kind in COMM_KINDS:
                yield from self._collective(i, a, b)
            else:
                yield from self._compute(i, a, b)
        yield from self._waits(pending, prev, 2.0 * len(pending))
        yield from self._synchronize()

    def _next_ids(self, calls: int) -> tuple[int, dict[str, object]]:
        """Reserve `calls` correlation ids and one External id; returns the first id."""
        first = self.corr + 1
        self.corr += calls
        self.ext += 1
        return first, {"External id": self.ext}

    def _kernel(self, i: int, launch: Event, corr: int) -> Iterator[Event]:
        """Record i's kernel, launched by `launch` (correlation `corr`), and the arrow."""
        tid = self.streams[str(self.info.timeline.stream[i])]
        kernel = self.gpu_event(i, tid, corr, self.ext)
        yield kernel
        yield from launch_flow(launch, kernel)

    def _compute(self, i: int, a: float, b: float) -> Iterator[Event]:
        tl, host, w = self.info.timeline, self.host, b - a
        c, ext = self._next_ids(1)
        aten = aten_name(str(tl.kind[i]), str(tl.name[i]), str(tl.phase[i]))
        yield host_x("cpu_op", aten, host, a, w, **ext, **{"Op name": str(tl.name[i])})
        launch = host_x("cuda_runtime", "cudaLaunchKernel", host, b - 0.3 * w, 0.25 * w,
                        correlation=c, **ext)  # fmt: skip
        yield launch
        yield from self._kernel(i, launch, c)

    def _collective(self, i: int, a: float, b: float) -> Iterator[Event]:
        tl, host, w = self.info.timeline, self.host, b - a
        c, ext = self._next_ids(4)  # c: event record, +1 stream wait, +2 launch, +3 end record
        tid = self.streams[str(tl.stream[i])]
        yield host_x("user_annotation", ANNOTATION_NAMES[str(tl.kind[i])], host, a, w, **ext)
        yield host_x("cpu_op", "record_param_comms", host, a, w, **ext,
                     **comm_args(self.ctx, self.info, i))  # fmt: skip
        # syncStream: the NCCL stream waits for the work issued on the compute stream
        yield host_x("cuda_runtime", "cudaEventRecord", host, a + 0.1 * w, 0.1 * w,
                     correlation=c, **ext)  # fmt: skip
        wait = host_x("cuda_runtime", "cudaStreamWaitEvent", host, a + 0.3 * w, 0.1 * w,
                      correlation=c + 1, **ext)  # fmt: skip
        yield wait
        yield sync_record(wait, "Stream Wait Event", self.gpu, tid, False,
                          wait_on_stream=COMPUTE_STREAM_ID,
                          wait_on_cuda_event_record_corr_id=c)  # fmt: skip
        launch = host_x("cuda_runtime", "cudaLaunchKernelExC", host, a + 0.55 * w, 0.25 * w,
                        correlation=c + 2, **ext)  # fmt: skip
        yield launch
        yield host_x("cuda_runtime", "cudaEventRecord", host, a + 0.85 * w, 0.1 * w,
                     correlation=c + 3, **ext)  # fmt: skip
        self.end_record[i] = (c + 3, tid)
        yield from self._kernel(i, launch, c + 2)

    def _waits(self, waits: list[int], start: float, span: float) -> Iterator[Event]:
        """`handle.wait()` calls sharing `span` µs from `start`, binding one last."""
        if not waits:
            return
        ends = self.info.timeline.end_s
        target = self.info.wait_target
        order = sorted(waits, key=lambda w: float(ends[target[w]]) if target[w] >= 0 else -1.0)
        slot = span / len(order)
        for j, wi in enumerate(order):
            yield from self._wait(wi, start + j * slot, slot)

    def _wait(self, wi: int, ts: float, dur: float) -> Iterator[Event]:
        """`handle.wait()`: the compute stream waits for the collective's end event."""
        tl, host = self.info.timeline, self.host
        c, ext = self._next_ids(1)
        yield host_x("cpu_op", "record_param_comms", host, ts, dur, **ext,
                     **{"Collective name": "wait", "Group size": 1})  # fmt: skip
        call = host_x("cuda_runtime", "cudaStreamWaitEvent", host, ts + 0.25 * dur, 0.5 * dur,
                      correlation=c, **ext)  # fmt: skip
        yield call
        rec = self.end_record.get(int(self.info.wait_target[wi]))
        if rec is not None:
            tid = self.streams[str(tl.stream[wi])]
            yield sync_record(call, "Stream Wait Event", self.gpu, tid, False,
                              wait_on_stream=rec[1],
                              wait_on_cuda_event_record_corr_id=rec[0])  # fmt: skip

    def _synchronize(self) -> Iterator[Event]:
        """The step's closing `cudaDeviceSynchronize` and its Context Sync record."""
        c, ext = self._next_ids(1)
        call = host_x("cuda_runtime", "cudaDeviceSynchronize", self.host, self.sync_start,
                      self.step_end - 1.0 - self.sync_start, correlation=c, **ext)  # fmt: skip
        yield call
        yield sync_record(call, "Context Sync", self.gpu, NO_STREAM)
