"""Typed raw events of one Kineto trace, era detection, and ingestion from the reader.

Ingestion keeps only what parsing needs, in slim slotted records: CPU ranges (ops and
annotations, with their args only when the op can matter: GEMMs, collectives, steps),
CPU-side launches keyed by correlation id, GPU activities (kernels, memcpy, memset) and
GPU-projected annotations. Field-name differences between eras (2021 `Operator`/`Kernel`
cats, lower-case `Input dims` / `external id`) are normalised here, so later stages see
one vocabulary. The era label itself is informational: linking and classification are
driven by which fields each event carries, not by the label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from validation.errors import TraceError
from validation.trace.reader import TraceStream

CAT_ALIASES = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Driver": "cuda_driver",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
}
ARG_ALIASES = {"Input dims": "Input Dims", "external id": "External id", "input type": "Input type"}
CPU_CATS = frozenset({"cpu_op", "user_annotation"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
# Kernel args worth keeping: NCCL/RCCL comm metadata and memcpy/memset sizes.
GPU_ARG_KEYS = frozenset(
    {
        "Collective name",
        "In msg nelems",
        "Out msg nelems",
        "Group size",
        "dtype",
        "Process Group Name",
        "Process Group Description",
        "Process Group Ranks",
        "bytes",
        "grid",
        "block",
    }
)
# Shape args of every other ATen op (the launching op sizes a memory-bound kernel).
SHAPE_ARG_KEYS = ("Input Dims", "Input type")
_KEEP_ARGS = re.compile(
    r"^(aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm|.*attention.*|.*convolution.*)"
    r"|c10d::|record_param_comms|(nccl|rccl|gloo):|ProfilerStep#)"
)
_STREAM_DIGITS = re.compile(r"(\d+)\s*$")
_EMPTY: dict[str, Any] = {}  # shared by the many GPU activities with no args worth keeping


@dataclass(slots=True)
class CpuRange:
    """A CPU op or annotation: [ts, end] in µs on thread (pid, tid)."""

    ts: float
    end: float
    pid: Any
    tid: Any
    name: str
    cat: str
    ext_id: int
    args: dict[str, Any] | None
    parent: int = -1


@dataclass(slots=True)
class Launch:
    """A CPU-side runtime or driver call (cudaLaunchKernel, hipLaunchKernel, cuLaunchKernel...)."""

    ts: float
    pid: Any
    tid: Any
    name: str
    correlation: int
    ext_id: int


@dataclass(slots=True)
class GpuActivity:
    """A kernel, memcpy or memset on `device`, `stream`; `kind` is kernel|memcpy|memset."""

    ts: float
    dur: float
    device: int
    stream: str
    name: str
    kind: str
    correlation: int
    ext_id: int
    args: dict[str, Any]


@dataclass(slots=True)
class GpuAnnotation:
    """A `gpu_user_annotation` (ProfilerStep#N, nccl:<coll>) projected onto a GPU stream."""

    ts: float
    end: float
    device: int
    name: str
    ext_id: int


@dataclass
class Features:
    """Which era-distinguishing fields and names were seen while ingesting."""

    legacy_cats: bool = False
    trace_name_args: bool = False
    async_cpu_to_gpu: bool = False
    nccl_workelem: bool = False
    ac2g: bool = False
    ev_idx: bool = False
    comm_args: bool = False
    gpu_annotations: bool = False
    cuda_driver: bool = False
    nccl_dev_kernel: bool = False
    concrete_inputs: bool = False
    hip: bool = False
    gloo: bool = False


@dataclass
class RawTrace:
    """Everything parsing needs from one file, in trace time units (µs)."""

    path: Path
    metadata: dict[str, Any]
    cpu: list[CpuRange] = field(default_factory=list)
    launches: dict[int, Launch] = field(default_factory=dict)
    gpu: list[GpuActivity] = field(default_factory=list)
    gpu_annotations: list[GpuAnnotation] = field(default_factory=list)
    features: Features = field(default_factory=Features)
    t0_us: float = float("inf")
    n_events: int = 0


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _int(value: Any, default: int = -1) -> int:
    num = _num(value)
    return default if num is None else int(num)


def _norm_args(args: Any) -> dict[str, Any]:
    if not isinstance(args, dict):
        return {}
    if any(k in ARG_ALIASES for k in args):
        return {str(ARG_ALIASES.get(k, k)): v for k, v in args.items()}
    return args


def stream_label(tid: Any, args: dict[str, Any]) -> str:
    """'stream N' from the kernel's `stream` arg, else from its tid ("stream 7 " or 7)."""
    stream = args.get("stream")
    if isinstance(stream, int):
        return f"stream {stream}"
    match = _STREAM_DIGITS.search(str(tid))
    return f"stream {match.group(1)}" if match else str(tid).strip()


class _Ingest:
    """Turns decoded events into a RawTrace, validating the fields each kind needs."""

    def __init__(self, raw: RawTrace) -> None:
        self.raw = raw
        self.f = raw.features
        self._strings: dict[str, str] = {}  # one copy of each name: kernel names are long

    def intern(self, text: Any) -> str:
        text = str(text)
        return self._strings.setdefault(text, text)

    def fail(self, index: int, event: dict[str, Any], problem: str) -> TraceError:
        cat, name = event.get("cat", "?"), str(event.get("name", "?"))[:60]
        return TraceError(f"{self.raw.path}: traceEvents[{index}] ({cat} {name!r}) {problem}")

    def add(self, index: int, ev: dict[str, Any]) -> None:
        ph = ev.get("ph")
        cat = ev.get("cat")
        if ph != "X":
            self._flow(cat)
            return
        legacy = cat in CAT_ALIASES
        if legacy:
            cat = CAT_ALIASES[str(cat)]
            self.f.legacy_cats = True
        if "name" not in ev or "pid" not in ev or "tid" not in ev:
            missing = next(k for k in ("name", "pid", "tid") if k not in ev)
            raise self.fail(index, ev, f"lacks {missing!r}")
        ts, dur = ev.get("ts"), ev.get("dur")
        if type(ts) is not float and type(ts) is not int:
            ts = _num(ts)
            if ts is None:
                raise self.fail(index, ev, "lacks a numeric 'ts'")
        if type(dur) is not float and type(dur) is not int:
            dur = _num(dur)
            if dur is None:
                raise self.fail(index, ev, "lacks a numeric 'dur'")
        if ts < self.raw.t0_us:
            self.raw.t0_us = ts
        args = ev.get("args")
        if not isinstance(args, dict):
            args = {}
        elif legacy:
            args = _norm_args(args)
        if cat in CPU_CATS:
            self._cpu(ev, cat, ts, dur, args)
        elif cat in LAUNCH_CATS:
            self._launch(ev, cat, ts, args)
        elif cat in GPU_CATS:
            self._gpu(index, ev, GPU_CATS[cat], ts, dur, args)
        elif cat == "gpu_user_annotation":
            self.f.gpu_annotations = True
            dev = _int(args.get("device", ev["pid"]), 0)
            self.raw.gpu_annotations.append(
                GpuAnnotation(
                    ts, ts + dur, dev, self.intern(ev["name"]), _int(args.get("External id"))
                )
            )

    def _flow(self, cat: Any) -> None:
        if cat == "ac2g":
            self.f.ac2g = True
        elif cat == "async_cpu_to_gpu":
            self.f.async_cpu_to_gpu = True
        elif cat == "async":
            self.f.legacy_cats = True

    def _cpu(
        self, ev: dict[str, Any], cat: str, ts: float, dur: float, args: dict[str, Any]
    ) -> None:
        name = self.intern(ev["name"])
        f = self.f
        f.ev_idx = f.ev_idx or "Ev Idx" in args
        f.trace_name_args = f.trace_name_args or "Trace name" in args
        f.concrete_inputs = f.concrete_inputs or "Concrete Inputs" in args
        f.gloo = f.gloo or name.startswith("gloo:")
        if name == "record_param_comms" and "Collective name" in args:
            f.comm_args = True
        if _KEEP_ARGS.match(name) or name.startswith("Optimizer.step"):
            kept: dict[str, Any] | None = args
        elif name.startswith("aten::") and "Input Dims" in args:
            kept = {k: args[k] for k in SHAPE_ARG_KEYS if k in args}
        else:
            kept = None
        self.raw.cpu.append(
            CpuRange(
                ts, ts + dur, ev["pid"], ev["tid"], name, cat, _int(args.get("External id")), kept
            )
        )

    def _launch(self, ev: dict[str, Any], cat: str, ts: float, args: dict[str, Any]) -> None:
        name = self.intern(ev["name"])
        if cat == "cuda_driver":
            self.f.cuda_driver = True
        if name.startswith("hip"):
            self.f.hip = True
        corr = _int(args.get("correlation"))
        if corr >= 0:
            ext = _int(args.get("External id"))
            self.raw.launches[corr] = Launch(ts, ev["pid"], ev["tid"], name, corr, ext)

    def _gpu(
        self, index: int, ev: dict[str, Any], kind: str, ts: float, dur: float, args: dict[str, Any]
    ) -> None:
        name = self.intern(ev["name"])
        if kind == "kernel" and "nccl" in name:
            self.f.nccl_dev_kernel = self.f.nccl_dev_kernel or name.startswith("ncclDevKernel")
            self.f.nccl_workelem = self.f.nccl_workelem or "(ncclWorkElem)" in name
        if "Collective name" in args:
            self.f.comm_args = True
        kept = {k: v for k, v in args.items() if k in GPU_ARG_KEYS} or _EMPTY
        device = _int(args.get("device", ev["pid"]), 0)
        corr = _int(args.get("correlation"))
        ext = _int(args.get("External id"))
        self.raw.gpu.append(
            GpuActivity(
                ts,
                dur,
                device,
                self.intern(stream_label(ev["tid"], args)),
                name,
                kind,
                corr,
                ext,
                kept,
            )
        )


def load_raw(path: str | Path) -> RawTrace:
    """Stream `path` once and keep the events parsing needs (see module docstring)."""
    stream = TraceStream(path)
    raw = RawTrace(path=Path(path), metadata=stream.metadata)
    ingest = _Ingest(raw)
    for index, event in enumerate(stream):
        ingest.add(index, event)
    raw.n_events = stream.n_events
    if raw.t0_us == float("inf"):
        raw.t0_us = 0.0
    return raw


def distributed_info(metadata: dict[str, Any]) -> dict[str, Any]:
    """The trace's distributedInfo object ({} when absent or malformed)."""
    dist = metadata.get("distributedInfo")
    return dist if isinstance(dist, dict) else {}


def detect_era(raw: RawTrace) -> str:
    """Label the profiler era: 2021, 2022, 2023, 2024, 2025+ or unknown (kineto-format.md)."""
    f, meta = raw.features, raw.metadata
    dist = distributed_info(meta)
    if f.legacy_cats:
        return "2021"
    if f.cuda_driver or f.nccl_dev_kernel or f.concrete_inputs:
        return "2025+"
    if f.comm_args or f.gpu_annotations or "pg_config" in dist or "baseTimeNanoseconds" in meta:
        return "2024"
    if f.trace_name_args or f.async_cpu_to_gpu or f.nccl_workelem:
        return "2022"
    if f.ac2g or f.ev_idx:
        return "2023"
    return "unknown"


def detect_vendor(raw: RawTrace) -> str:
    """'amd' (HIP/ROCm), 'nvidia' (CUDA) or 'cpu' (no GPU activity at all)."""
    meta = raw.metadata
    if raw.features.hip or "hip_runtime_version" in meta or "roctracer_version" in meta:
        return "amd"
    if raw.gpu or raw.launches:
        return "nvidia"
    return "cpu"
