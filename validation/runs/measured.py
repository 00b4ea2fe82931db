"""A measured run as calibration and comparison see it: traces, run.json, resolved groups.

`load_run(files, run_json)` parses one run's per-rank traces (validation.trace), keeps a
torch4d run.json when one sits beside them (then the traced program is known exactly),
maps the device to the GPU catalogue, and resolves anonymous gloo worker threads to their
process groups (validation.runs.gloo_groups). `collective_records()` lists every
collective with its group members on a common clock; `instances()` joins the records of
one collective across its members (matched by group, ProfilerStep and order).

Clocks: ranks of a gloo (CPU) run share their host's clock, so their traces are put on it
directly; other runs use parse_traces' collective alignment.

`caller=True` (gloo runs) gives each collective the issuing thread's view instead of the
worker thread's: from the c10d op's start until the caller resumes (a blocking call) or
the worker finishes (an asynchronous one). That is what a calibrated gloo table stands
for (validation.calibration.collectives), so comparisons use it.
"""

from __future__ import annotations

import statistics
from bisect import bisect_left
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.engine.timeline import Timeline
from topologies.hardware import identify_gpu
from validation.errors import TraceError
from validation.runs.gloo_groups import Signature, resolve_threads
from validation.torch4d.config import RunSpec
from validation.torch4d.workload import (
    TORCH4D_GROUPS,
    build_torch4d_program,
    load_run_json,
    run_spec_from_json,
)
from validation.trace import parse_traces
from validation.trace.comm import ProcessGroup
from validation.trace.events import load_raw
from validation.trace.gloo import match_c10d
from validation.trace.model import ParsedTrace
from workloads.graph import Program
from workloads.ops import CollectiveOp


def catalogue_gpu(
    device_name: str,
    vendor: str,
    sm_count: int | None = None,
    memory_bytes: float | None = None,
) -> str | None:
    """The catalogue key of a trace's device ('cpu' for CPU-only traces); None if unknown.

    By name where the catalogue knows it, else by the device's properties (SM/CU count and
    memory: ROCm's generic "AMD Radeon Graphics"); see topologies.hardware.identify_gpu.
    """
    if not device_name and vendor == "cpu":
        return "cpu"
    return identify_gpu(device_name, vendor, sm_count, memory_bytes)


@dataclass(frozen=True, slots=True)
class CollRecord:
    """One rank's record of one collective, on the run's common clock."""

    rank: int
    row: int
    kind: str
    bytes: int
    group: str
    ranks: tuple[int, ...]
    group_size: int
    iteration: int
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Instance:
    """One collective across its members: each present member's duration."""

    kind: str
    bytes: int
    group: str
    ranks: tuple[int, ...]
    group_size: int
    durations_s: dict[int, float]

    @property
    def complete(self) -> bool:
        """Every member's record is present (then the minimum is the transfer itself)."""
        return bool(self.ranks) and set(self.durations_s) == set(self.ranks)


@dataclass
class MeasuredRun:
    """One run's traces (one per rank), with what is known about how they were made."""

    label: str
    files: list[Path]
    timeline: Timeline
    gpu: str
    run: dict[str, Any] | None = None
    spec: RunSpec | None = None
    program: Program | None = None
    threads: dict[int, dict[str, ProcessGroup]] = field(default_factory=dict)

    @property
    def traces(self) -> dict[int, ParsedTrace]:
        return self.timeline.metadata["traces"]  # type: ignore[return-value]

    @property
    def offsets_s(self) -> dict[int, float]:
        return self.timeline.metadata["offsets_s"]  # type: ignore[return-value]

    @property
    def backend(self) -> str:
        return str(self.timeline.metadata.get("backend", ""))

    def collective_records(self, caller: bool = False) -> list[CollRecord]:
        """Every collective of every rank, groups resolved, times on the common clock
        (`caller`: the issuing thread's view, for gloo runs; see module doc)."""
        out = []
        for rank, t in sorted(self.traces.items()):
            tl, shift, threads = t.timeline, self.offsets_s[rank], self.threads.get(rank, {})
            spans = _caller_spans(t) if caller and self.backend == "gloo" else {}
            for c in t.collectives:
                pg = threads.get(str(tl.stream[c.index]))
                if pg is not None:
                    label, ranks, size = pg.desc or f"pg{pg.name}", pg.ranks, pg.size
                else:
                    label, ranks, size = str(tl.group[c.index]), c.pg_ranks, c.group_size
                start, end = spans.get(
                    c.index, (float(tl.start_s[c.index]), float(tl.end_s[c.index]))
                )
                out.append(
                    CollRecord(
                        rank, c.index, c.kind, int(c.bytes), label, tuple(ranks), int(size),
                        c.iteration, start + shift, end + shift,
                    )
                )  # fmt: skip
        return out

    def instances(self) -> list[Instance]:
        """Records joined across ranks by (group members, step, order within them)."""
        seq: dict[tuple[Any, ...], list[CollRecord]] = defaultdict(list)
        for r in sorted(self.collective_records(), key=lambda r: r.start_s):
            seq[(r.rank, r.group, r.ranks, r.iteration)].append(r)
        joined: dict[tuple[Any, ...], list[CollRecord]] = defaultdict(list)
        for (_, group, ranks, it), rows in seq.items():
            for k, r in enumerate(rows):
                joined[(group, ranks, it, k)].append(r)
        out = []
        for rows in joined.values():
            first = rows[0]
            if any(r.kind != first.kind or r.bytes != first.bytes for r in rows):
                continue  # the sequences diverge: not one collective
            out.append(
                Instance(first.kind, first.bytes, first.group, first.ranks, first.group_size,
                         {r.rank: r.end_s - r.start_s for r in rows})
            )  # fmt: skip
        return out


def _caller_spans(trace: ParsedTrace) -> dict[int, tuple[float, float]]:
    """Timeline row of each gloo collective -> (c10d start, caller resume or worker end)."""
    raw = load_raw(trace.info.path)
    cpu = raw.cpu
    steps = [r for r in cpu if r.name.startswith("ProfilerStep#")]
    if not steps:
        return {}
    main = sorted(r.ts for r in cpu if r.tid == steps[0].tid and r.cat == "cpu_op")
    tl = trace.timeline
    rows = {
        round(float(tl.start_s[c.index]), 9): c.index
        for c in trace.collectives
        if str(tl.stream[c.index]).startswith("gloo:")
    }
    out = {}
    for g, c in match_c10d(cpu).items():
        row = rows.get(round((cpu[g].ts - raw.t0_us) / 1e6, 9))
        if row is None:
            continue
        nxt = bisect_left(main, cpu[c].end)
        resume = main[nxt] if nxt < len(main) else cpu[g].end
        end = resume if resume >= cpu[g].end else cpu[g].end
        out[row] = ((cpu[c].ts - raw.t0_us) / 1e6, (end - raw.t0_us) / 1e6)
    return out


def measured_steps(run: MeasuredRun) -> dict[int, float]:
    """Step number -> the slowest rank's duration, for steps every rank has."""
    per: dict[int, list[float]] = defaultdict(list)
    for t in run.traces.values():
        for it in t.iterations:
            per[it.step].append(it.end_s - it.start_s)
    n = len(run.traces)
    return {s: max(v) for s, v in sorted(per.items()) if len(v) == n}


def counted_steps(steps: dict[int, float]) -> list[int]:
    """The steps that count: all but the first when there are several."""
    keys = sorted(steps)
    return keys[1:] if len(keys) > 1 else keys


def iteration_time_s(run: MeasuredRun) -> float | None:
    """The run's iteration time: median over the counted steps of the slowest rank."""
    steps = measured_steps(run)
    counted = counted_steps(steps)
    return statistics.median(steps[s] for s in counted) if counted else None


def program_signature(program: Program) -> Signature:
    """Per torch4d group description (axsim_X...): (kind, bytes) counts of one step."""
    inverse = {v: k for k, v in TORCH4D_GROUPS.items()}
    sig: dict[str, Counter[tuple[str, int]]] = defaultdict(Counter)
    for op in program.ops:
        if isinstance(op, CollectiveOp):
            sig[f"axsim_{inverse.get(op.group, op.group)}"][(op.kind.value, int(op.bytes))] += 1
    return sig


def _gpu_of(timeline: Timeline, gpu: str | None, label: str) -> str:
    if gpu is not None:
        return gpu
    traces: dict[int, ParsedTrace] = timeline.metadata["traces"]  # type: ignore[assignment]
    found = {}
    for rank, t in traces.items():
        key = catalogue_gpu(t.info.gpu, t.info.vendor, t.info.sm_count, t.info.memory_bytes)
        if key is None:
            props = (
                f" ({t.info.sm_count} SMs/CUs, {t.info.memory_bytes / 2**30:.1f} GiB)"
                if t.info.sm_count and t.info.memory_bytes
                else ""
            )
            raise TraceError(
                f"{t.info.path} rank {rank}: device '{t.info.gpu}'{props} is not in the GPU "
                f"catalogue (give --gpu NAME)"
            )
        found[rank] = key
    if len(set(found.values())) > 1:
        raise TraceError(
            f"{label}: ranks ran on different GPU types {found} (calibrate them apart)"
        )
    return next(iter(found.values()))


def load_run(
    files: list[Path], run_json: Path | None = None, gpu: str | None = None
) -> MeasuredRun:
    """Parse one run's traces (TraceError names the file and rank on bad input)."""
    label = str(files[0].parent) if files else "(no files)"
    tl = parse_traces(files, align="collective")
    if str(tl.metadata.get("backend", "")) == "gloo":
        tl = parse_traces(files, align="none")  # one host, one clock (gloo traces are small)
    run = spec = program = None
    if run_json is not None:
        run = load_run_json(run_json)
        spec = run_spec_from_json(run, str(run_json))
        program = build_torch4d_program(spec)
        if int(run.get("world_size", spec.grid.world_size)) != tl.world_size:
            raise TraceError(
                f"{run_json}: world size {run.get('world_size')} but the traces in {label} "
                f"have {tl.world_size} ranks (traces of different runs mixed)"
            )
    measured = MeasuredRun(label, files, tl, _gpu_of(tl, gpu, label), run, spec, program)
    if measured.backend == "gloo":
        sig = program_signature(program) if program is not None else None
        measured.threads = {r: resolve_threads(t, sig) for r, t in measured.traces.items()}
    return measured
