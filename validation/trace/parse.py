"""Assemble one rank's trace into a RankTimeline and side tables: `parse_trace(path)`.

Records are GPU activities (kernels, memcpy, memset) on their streams, plus, for CPU-only
runs (gloo), the `gloo:*` collectives on their worker threads and the main thread's ATen ops
by kind (GEMM, attention, elementwise, optimizer). Times are seconds since the trace's first event (`t0_us`).
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from simulator.engine.timeline import RankTimeline
from validation.trace.classify import (
    COLLECTIVE,
    FREE_OPS,
    GEMM_OPS,
    classify_kernel,
    is_attention_op,
    is_comm_op,
)
from validation.trace.comm import CollectiveInfo, parse_pg_config, resolve_collective
from validation.trace.events import (
    GpuActivity,
    RawTrace,
    detect_era,
    detect_vendor,
    distributed_info,
    load_raw,
)
from validation.trace.gloo import match_c10d, thread_groups
from validation.trace.link import CpuIndex
from validation.trace.model import GemmInfo, Iteration, KernelInfo, ParsedTrace, RankInfo
from validation.trace.shapes import attention_flops, gemm_shape
from validation.trace.traffic import op_traffic

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
_COLUMNS = ("stream", "name", "kind", "group", "start_s", "end_s", "bytes", "flops", "phase")


@dataclass
class _Rows:
    """Column lists of the timeline under construction, plus side-table rows."""

    cols: dict[str, list[Any]] = field(default_factory=lambda: {k: [] for k in _COLUMNS})
    gemms: list[GemmInfo] = field(default_factory=list)
    colls: list[CollectiveInfo] = field(default_factory=list)
    kernels: list[KernelInfo] = field(default_factory=list)

    def add(self, **row: Any) -> int:
        for key in _COLUMNS:
            self.cols[key].append(row[key])
        return len(self.cols["name"]) - 1


class _Steps:
    """ProfilerStep#N ranges (CPU, and GPU-projected when present) for iteration lookup."""

    def __init__(self, raw: RawTrace) -> None:
        cpu = sorted((r.ts, r.end, int(m.group(1))) for r in raw.cpu if (m := _STEP.match(r.name)))
        self.cpu = cpu
        self._starts = [s[0] for s in cpu]
        self.gpu = {
            int(m.group(1)): (a.ts, a.end)
            for a in raw.gpu_annotations
            if (m := _STEP.match(a.name))
        }

    def at(self, ts: float | None, gpu_ts: float | None = None) -> int:
        """Step whose CPU range holds `ts` (a launch), else whose GPU span holds `gpu_ts`."""
        if ts is not None:
            pos = bisect_right(self._starts, ts) - 1
            if pos >= 0 and ts <= self.cpu[pos][1]:
                return self.cpu[pos][2]
        if gpu_ts is not None:
            for step, (start, end) in self.gpu.items():
                if start <= gpu_ts <= end:
                    return step
        return -1


def _rank_info(raw: RawTrace, rank: int | None) -> RankInfo:
    meta = raw.metadata
    dist = distributed_info(meta)
    if rank is None:
        if isinstance(dist.get("rank"), int):
            rank = int(dist["rank"])
        else:
            match = _RANK_IN_NAME.search(raw.path.name)
            rank = int(match.group(1)) if match else 0
    known = isinstance(dist.get("world_size"), int)
    world = int(dist["world_size"]) if known else rank + 1
    devices = Counter(a.device for a in raw.gpu)
    device = devices.most_common(1)[0][0] if devices else -1
    listed = meta.get("deviceProperties")
    props = [p for p in listed if isinstance(p, dict)] if isinstance(listed, list) else []
    prop = next((p for p in props if p.get("id") == device), None)
    if prop is None and props and device >= 0:
        prop = props[0]
    gpu = str(prop.get("name", "")) if prop else ""
    sms, mem = (prop.get("numSms"), prop.get("totalGlobalMem")) if prop else (None, None)
    base = meta.get("baseTimeNanoseconds")
    backend = str(dist.get("backend", "gloo" if raw.features.gloo else ""))
    return RankInfo(
        path=str(raw.path), rank=rank, world_size=world, backend=backend, era=detect_era(raw),
        vendor=detect_vendor(raw), gpu=gpu, device=device,
        process_groups=parse_pg_config(dist), t0_us=raw.t0_us,
        base_time_ns=int(base) if isinstance(base, int | float) else None, n_events=raw.n_events,
        world_size_known=known,
        sm_count=int(sms) if isinstance(sms, int | float) and not isinstance(sms, bool) else None,
        memory_bytes=float(mem) if isinstance(mem, int | float) and not isinstance(mem, bool) else None,
    )  # fmt: skip


def _group_label(coll: CollectiveInfo, world_size: int) -> str:
    if coll.pg_desc and coll.pg_desc != "undefined":
        return coll.pg_desc
    if coll.pg_name:
        return f"pg{coll.pg_name}"
    return "world" if coll.group_size == world_size else f"size{coll.group_size}"


class _Builder:
    """Walks the raw events of one trace and fills `_Rows`."""

    def __init__(self, raw: RawTrace, info: RankInfo) -> None:
        self.raw, self.info = raw, info
        self.index = CpuIndex(raw.cpu)
        self.steps = _Steps(raw)
        self.rows = _Rows()
        self.multi_device = len({a.device for a in raw.gpu}) > 1
        self._gemm_ops_seen: set[int] = set()

    def t(self, ts_us: float) -> float:
        return (ts_us - self.raw.t0_us) / 1e6

    def gpu_activity(self, act: GpuActivity) -> None:
        launch = self.raw.launches.get(act.correlation)
        op = self.index.link(act, launch)
        ctx = self.index.context(op)
        step = self.steps.at(launch.ts if launch else None, act.ts)
        stream = f"gpu{act.device}:{act.stream}" if self.multi_device else act.stream
        row: dict[str, Any] = dict(stream=stream, name=act.name, group="", start_s=self.t(act.ts),
                                   end_s=self.t(act.ts + act.dur), bytes=0.0, flops=0.0,
                                   phase=str(step) if step >= 0 else "")  # fmt: skip
        if act.kind != "kernel":
            nbytes = float(act.args.get("bytes") or 0)
            index = self.rows.add(kind="memcpy", **{**row, "bytes": nbytes})
            self._kernel(index, act, launch, op, nbytes or None)
            return
        kind, family = classify_kernel(act.name)
        if kind == COLLECTIVE:
            ops = [self.raw.cpu[i] for i in ctx.comm]
            coll = resolve_collective(-1, act.name, act.args, ops, self.info.world_size,
                                      self.info.process_groups, step)  # fmt: skip
            row.update(bytes=float(coll.bytes), group=_group_label(coll, self.info.world_size))
            self.rows.colls.append(replace(coll, index=self.rows.add(kind=coll.kind, **row)))
            return
        if ctx.gemm >= 0 and family == "other" and "at::native" not in act.name:
            kind, family = "gemm", "cublas"  # e.g. cuBLAS epilogue kernels of a GEMM op
        elif ctx.optimizer and kind == "elementwise":
            kind = "optimizer"
        if kind == "gemm":
            index = self._gemm(row, family, ctx.gemm, step)
            self._kernel(index, act, launch, op, row["bytes"] or None)
            return
        if kind == "attention":
            row["flops"] = self._attention_flops(op)
        traffic = self._traffic(op)
        index = self.rows.add(kind=kind, **row)
        self._kernel(index, act, launch, op, traffic)

    def _traffic(self, op: int) -> float | None:
        """Bytes the launching op moves (validation.trace.traffic)."""
        if op < 0:
            return None
        r = self.raw.cpu[op]
        args = r.args or {}
        return op_traffic(r.name, args.get("Input Dims"), args.get("Input type"))

    def _attention_flops(self, op: int) -> float:
        """FLOPs of the fused-attention op around a kernel, on its first kernel only."""
        outer = -1
        for i in self.index.ancestors(op):
            if is_attention_op(self.raw.cpu[i].name):
                outer = i
        if outer < 0 or outer in self._gemm_ops_seen:
            return 0.0
        self._gemm_ops_seen.add(outer)
        r = self.raw.cpu[outer]
        return attention_flops(r.name, r.args or {})

    def _kernel(
        self, index: int, act: GpuActivity, launch: Any, op: int, traffic: float | None
    ) -> None:
        name = self.raw.cpu[op].name if op >= 0 else ""
        self.rows.kernels.append(
            KernelInfo(
                index, op, name, traffic, self.t(launch.ts) if launch else None,
                str(act.args.get("grid", "")), str(act.args.get("block", "")),
            )
        )  # fmt: skip

    def _gemm(self, row: dict[str, Any], family: str, op: int, step: int) -> int:
        shape = None
        name = ""
        if op >= 0:
            cpu_op = self.raw.cpu[op]
            name = cpu_op.name
            args = cpu_op.args or {}
            shape = gemm_shape(name, args.get("Input Dims"), args.get("Input type"))
        if shape is not None and op not in self._gemm_ops_seen:
            self._gemm_ops_seen.add(op)  # the op's FLOPs go on its first kernel only
            row.update(flops=shape.flops, bytes=shape.bytes)
        index = self.rows.add(kind="gemm", **row)
        m, n, k, batch, dtype = (
            (shape.m, shape.n, shape.k, shape.batch, shape.dtype) if shape else (0, 0, 0, 0, "")
        )
        flops = shape.flops if shape else 0.0
        self.rows.gemms.append(
            GemmInfo(index, name, op, m, n, k, batch, dtype, flops, step, family)
        )
        return index

    def gloo(self) -> None:
        """Records for gloo:* annotations (CPU collectives), with their c10d ops' metadata."""
        cpu = self.raw.cpu
        matches = match_c10d(cpu)
        groups = thread_groups(cpu, matches, self.info.rank, self.info.process_groups)
        for g, r in enumerate(cpu):
            if not r.name.startswith("gloo:"):
                continue
            ops = [r] + ([cpu[matches[g]]] if g in matches else [])
            pg = groups.get(r.tid)
            step = self.steps.at(r.ts)
            coll = resolve_collective(-1, r.name, {}, ops, self.info.world_size,
                                      self.info.process_groups, step, pg.name if pg else "")  # fmt: skip
            stream = f"gloo:{pg.name}" if pg else f"gloo:tid{r.tid}"
            index = self.rows.add(stream=stream, name=r.name, kind=coll.kind,
                                  group=_group_label(coll, self.info.world_size),
                                  start_s=self.t(r.ts), end_s=self.t(r.end), bytes=float(coll.bytes),
                                  flops=0.0, phase=str(step) if step >= 0 else "")  # fmt: skip
            self.rows.colls.append(replace(coll, index=index))

    def cpu_compute(self) -> None:
        """CPU-only runs: the main thread's ATen ops on stream 'cpu', by the kind their GPU
        kernels would have: innermost GEMM ops (with shapes), the innermost fused-attention
        op, Optimizer.step ranges, and elementwise for every other innermost data-moving
        ATen op outside those (views and allocations, FREE_OPS, move no data; ops inside a
        GEMM, attention, optimizer or c10d range belong to it)."""
        cpu = self.raw.cpu
        main = next(((r.pid, r.tid) for r in cpu if _STEP.match(r.name)), None)
        role = [_cpu_role(r.name) for r in cpu]
        inner_of: list[set[str]] = [set() for _ in cpu]  # roles found strictly inside op i
        for i, found in enumerate(role):
            if found in ("gemm", "attention", "elementwise"):
                for j in self.index.ancestors(cpu[i].parent):
                    inner_of[j].add(found)
        for i, r in enumerate(cpu):
            kind = role[i]
            if kind == "gemm":
                keep = "gemm" not in inner_of[i]
            elif kind == "attention":
                keep = "attention" not in inner_of[i]
            elif kind == "elementwise":
                keep = (
                    (r.pid, r.tid) == main
                    and not inner_of[i]
                    and not any(role[j] in _OWNERS for j in self.index.ancestors(r.parent))
                )
            else:
                keep = kind == "optimizer"
            if not keep:
                continue
            step = self.steps.at(r.ts)
            row: dict[str, Any] = dict(stream="cpu", name=r.name, group="", start_s=self.t(r.ts),
                                       end_s=self.t(r.end), bytes=0.0, flops=0.0,
                                       phase=str(step) if step >= 0 else "")  # fmt: skip
            if kind == "gemm":
                self._gemm(row, "cpu", i, step)
            else:
                self.rows.add(kind=kind, **row)


_OWNERS = frozenset({"gemm", "attention", "optimizer", "comm"})
"""Roles whose ranges own the ATen ops inside them (an elementwise op under them is theirs)."""


def _cpu_role(name: str) -> str | None:
    """The kind a CPU op stands for in a CPU-only run, or None (wrappers, free ops)."""
    if name in GEMM_OPS:
        return "gemm"
    if is_attention_op(name):
        return "attention"
    if name.startswith("Optimizer.step"):
        return "optimizer"
    if is_comm_op(name):
        return "comm"
    if name.startswith("aten::") and name not in FREE_OPS:
        return "elementwise"
    return None


def _finish(
    b: _Builder,
) -> tuple[RankTimeline, tuple[GemmInfo, ...], tuple[CollectiveInfo, ...], tuple[KernelInfo, ...]]:
    cols = b.rows.cols
    start = np.asarray(cols["start_s"], dtype=np.float64)
    order = np.argsort(start, kind="stable")
    new = np.empty_like(order)
    new[order] = np.arange(order.size)

    def arr(key: str, dtype: Any) -> np.ndarray:
        return (
            np.asarray(cols[key], dtype=dtype)[order] if order.size else np.asarray([], dtype=dtype)
        )

    tl = RankTimeline(
        rank=b.info.rank, stream=arr("stream", object), name=arr("name", object),
        kind=arr("kind", object), group=arr("group", object), start_s=arr("start_s", np.float64),
        end_s=arr("end_s", np.float64), bytes=arr("bytes", np.float64),
        flops=arr("flops", np.float64), phase=arr("phase", object),
    )  # fmt: skip
    gemms = tuple(
        sorted((replace(g, index=int(new[g.index])) for g in b.rows.gemms), key=lambda g: g.index)
    )
    colls = tuple(
        sorted((replace(c, index=int(new[c.index])) for c in b.rows.colls), key=lambda c: c.index)
    )
    kernels = tuple(
        sorted((replace(k, index=int(new[k.index])) for k in b.rows.kernels), key=lambda k: k.index)
    )
    return tl, gemms, colls, kernels


def _iterations(b: _Builder, tl: RankTimeline) -> tuple[Iteration, ...]:
    out = []
    gpu_rows = np.array([not str(s).startswith("cpu") for s in tl.stream], dtype=bool)
    for ts, end, step in b.steps.cpu:
        if step in b.steps.gpu:
            g0, g1 = (b.t(x) for x in b.steps.gpu[step])
        else:
            mask = gpu_rows & (tl.phase == str(step))
            g0, g1 = (
                (float(tl.start_s[mask].min()), float(tl.end_s[mask].max()))
                if mask.any()
                else (math.nan, math.nan)
            )
        out.append(Iteration(step, b.t(ts), b.t(end), g0, g1))
    return tuple(out)


def parse_trace(path: str | Path, rank: int | None = None) -> ParsedTrace:
    """Parse one rank's PyTorch profiler trace (plain or gzipped JSON, any era 2021-2026).

    `rank` overrides distributedInfo.rank (else a `rank<N>`/`worker<N>` file name, else 0).
    Raises TraceError naming the file when it cannot be read or is not a Kineto trace.
    """
    raw = load_raw(path)
    info = _rank_info(raw, rank)
    builder = _Builder(raw, info)
    for act in raw.gpu:
        builder.gpu_activity(act)
    if raw.features.gloo:
        builder.gloo()
    if not raw.gpu:
        builder.cpu_compute()
    tl, gemms, colls, kernels = _finish(builder)
    return ParsedTrace(
        info=info, timeline=tl, gemms=gemms, collectives=colls,
        iterations=_iterations(builder, tl), kernels=kernels,
    )  # fmt: skip
