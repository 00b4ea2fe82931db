"""Measured against simulated: one run's traces joined with a simulation of the same run.

`compare(traces, config=None, calibration=None, tolerance=0.2) -> Comparison`:

- the measured side is the run's traces (validation.runs.measured): the iteration time is the
  median over its ProfilerStep iterations (the first skipped when there are several) of
  the slowest rank's step; per op kind, the busy time per step (mean over ranks); per
  process group, the time its collectives are in flight (the union of their records,
  per step, mean over ranks). For gloo runs collectives are seen from the issuing
  thread (c10d call to resume), as calibrated gloo tables are, and CPU runs get an
  `overhead` kind: the part of the main thread's step that no op or collective covers
  (dispatcher, autograd, Python);
- the simulated side is `config`: a torch4d `run.json` (default: the one beside the
  traces) replayed exactly (validation.torch4d.workload) on `machine` (`cpu-host` for a
  CPU run), or an axsim YAML experiment config run through `simulate()`; `calibration`
  is the calibration file both use. Simulated compute ops carry the kernel model's
  per-op launch overhead, the host time between ops that traces show as gaps: it is
  taken out of their kinds' busy time and reported as the `overhead` kind.

Measured process groups map to the simulation's group kinds by their members (torch4d's
run.json lists every group instance), else by group size when that is unambiguous.
Errors (CompareError, TraceError, ConfigError) name the file; a config whose world size
differs from the traces' is one of them.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulator.engine.timeline import COMM_KINDS, COMPUTE_KINDS, Timeline
from simulator.errors import SimulatorError
from simulator.outputs.analysis import length
from validation.runs.measured import (
    CollRecord,
    MeasuredRun,
    counted_steps,
    load_run,
    measured_steps,
)
from validation.torch4d.workload import TORCH4D_GROUPS

DEFAULT_TOLERANCE = 0.2


class CompareError(SimulatorError):
    """A comparison that cannot be made (mismatched run and config, missing input)."""


@dataclass(frozen=True)
class Row:
    """One compared quantity (seconds per iteration); error = simulated / measured - 1."""

    scope: str
    name: str
    measured_s: float | None
    simulated_s: float | None

    @property
    def error(self) -> float | None:
        if not self.measured_s or self.simulated_s is None:
            return None
        return self.simulated_s / self.measured_s - 1.0


@dataclass
class Comparison:
    """All rows, the measured steps and whether the iteration time is within tolerance."""

    traces: str
    config: str
    calibration: str | None
    tolerance: float
    rows: list[Row]
    measured_steps_s: list[float]

    @property
    def iteration(self) -> Row:
        return next(r for r in self.rows if r.scope == "iteration")

    @property
    def passed(self) -> bool:
        err = self.iteration.error
        return err is not None and abs(err) <= self.tolerance

    def to_json(self) -> dict[str, Any]:
        return {
            "traces": self.traces, "config": self.config, "calibration": self.calibration,
            "tolerance": self.tolerance, "passed": self.passed,
            "iteration_error": self.iteration.error,
            "measured_steps_s": self.measured_steps_s,
            "rows": [{**asdict(r), "error": r.error} for r in self.rows],
        }  # fmt: skip


# ------------------------------------------------------------------ measured side
def group_kind_map(run: MeasuredRun, sim_groups: dict[str, int]) -> dict[tuple[int, ...], str]:
    """Measured group members -> simulated group kind (members, else an unambiguous size)."""
    out: dict[tuple[int, ...], str] = {}
    for kind, instances in ((run.run or {}).get("groups") or {}).items():
        for members in instances:
            out.setdefault(tuple(members), TORCH4D_GROUPS.get(kind, kind))
    by_size: dict[int, list[str]] = defaultdict(list)
    for kind, size in sim_groups.items():
        by_size[size].append(kind)
    for rec in run.collective_records():
        if rec.ranks not in out and len(by_size.get(rec.group_size, [])) == 1:
            out[rec.ranks] = by_size[rec.group_size][0]
    return out


def measured_breakdown(
    run: MeasuredRun, steps: list[int], kinds_map: dict[tuple[int, ...], str]
) -> tuple[dict[str, float], dict[str, float]]:
    """(busy time per op kind, in-flight time per group kind) per step, mean over ranks."""
    kinds: dict[str, float] = defaultdict(float)
    groups: dict[str, float] = defaultdict(float)
    norm = max(len(steps) * len(run.traces), 1)
    wanted = {str(s) for s in steps}
    for t in run.traces.values():
        tl = t.timeline
        keep = np.isin(tl.phase.astype(str), list(wanted)) & ~tl.mask_comm()
        for k in set(tl.kind[keep].astype(str)):
            m = keep & (tl.kind == k)
            kinds[k] += float((tl.end_s[m] - tl.start_s[m]).sum()) / norm
    spans: dict[tuple[str, int, int], list[tuple[float, float]]] = defaultdict(list)
    callers = run.collective_records(caller=True)
    for rec in callers:
        if rec.iteration in steps:
            label = _sim_kind(rec.group) or kinds_map.get(rec.ranks, rec.group)
            spans[(label, rec.rank, rec.iteration)].append((rec.start_s, rec.end_s))
            kinds[rec.kind] += (rec.end_s - rec.start_s) / norm
    for (label, _, _), iv in spans.items():
        groups[label] += length(np.array([a for a, _ in iv]), np.array([b for _, b in iv])) / norm
    if run.gpu == "cpu":
        kinds["overhead"] = _host_overhead(run, steps, callers) / norm
    return dict(kinds), dict(groups)


def _host_overhead(run: MeasuredRun, steps: list[int], callers: list[CollRecord]) -> float:
    """CPU runs: main-thread step time covered by no op row and no collective call, summed
    over ranks and steps (the ops are on stream 'cpu', the calls seen from the caller)."""
    blocked: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for rec in callers:
        shift = run.offsets_s[rec.rank]
        blocked[(rec.rank, rec.iteration)].append((rec.start_s - shift, rec.end_s - shift))
    total = 0.0
    for rank, t in run.traces.items():
        tl = t.timeline
        on_cpu = tl.stream.astype(str) == "cpu"
        for it in t.iterations:
            if it.step not in steps:
                continue
            m = on_cpu & (tl.phase.astype(str) == str(it.step))
            iv = blocked[(rank, it.step)]
            starts = np.concatenate([tl.start_s[m], [a for a, _ in iv]])
            ends = np.concatenate([tl.end_s[m], [b for _, b in iv]])
            starts = np.clip(starts, it.cpu_start_s, it.cpu_end_s)
            ends = np.clip(ends, it.cpu_start_s, it.cpu_end_s)
            span = it.cpu_end_s - it.cpu_start_s
            total += max(span - (length(starts, ends) if starts.size else 0.0), 0.0)
    return total


def _sim_kind(label: str) -> str | None:
    """torch4d names its groups axsim_<kind> (members alone cannot tell Z from data)."""
    kind = label.removeprefix("axsim_")
    return TORCH4D_GROUPS.get(kind) if label.startswith("axsim_") else None


# ----------------------------------------------------------------- simulated side
def simulated_breakdown(
    tl: Timeline, op_overhead_s: float = 0.0
) -> tuple[dict[str, float], dict[str, float]]:
    """(busy time per op kind, in-flight time per group kind), mean over all ranks; each
    compute op's launch overhead (`op_overhead_s`) goes to the `overhead` kind."""
    kinds: dict[str, float] = defaultdict(float)
    groups: dict[str, float] = defaultdict(float)
    world = tl.world_size
    for r in range(world):
        t = tl.rank(r)
        for k in set(t.kind.astype(str)) - {"wait"}:
            m = t.kind == k
            busy = t.end_s[m] - t.start_s[m]
            if op_overhead_s > 0 and k in COMPUTE_KINDS:
                cut = np.minimum(busy, op_overhead_s)
                kinds["overhead"] += float(cut.sum()) / world
                busy = busy - cut
            kinds[k] += float(busy.sum()) / world
        comm = np.isin(t.kind, list(COMM_KINDS))
        for g in set(t.group[comm].astype(str)):
            m = comm & (t.group == g)
            groups[g] += length(t.start_s[m], t.end_s[m]) / world
    return dict(kinds), dict(groups)


def _rows(
    iteration: tuple[float, float],
    kinds: tuple[dict[str, float], dict[str, float]],
    groups: tuple[dict[str, float], dict[str, float]],
) -> list[Row]:
    rows = [Row("iteration", "step", *iteration)]
    for scope, (meas, sim) in (("kind", kinds), ("group", groups)):
        for name in sorted(set(meas) | set(sim)):
            rows.append(Row(scope, name, meas.get(name), sim.get(name)))
    return rows


def compare(
    traces: str | Path,
    config: str | Path | None = None,
    calibration: str | Path | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    machine: str | None = None,
    network: str = "contention",
    sets: Sequence[str] = (),
) -> Comparison:
    """Simulate the traced run and join it with the traces (see module doc)."""
    from validation.calibration.calibrate import collect_inputs
    from validation.runs.simulate import simulate_config

    inputs = collect_inputs([traces])
    if len(inputs.runs) != 1:
        raise CompareError(f"{traces}: expected the traces of one run (one directory)")
    files, run_json = inputs.runs[0]
    cfg = Path(config) if config is not None else run_json
    if cfg is None:
        raise CompareError(f"{traces}: no run.json beside the traces; give --config")
    is_run_json = cfg.suffix == ".json"
    run = load_run(files, cfg if is_run_json else None)
    missing = sorted(set(range(run.timeline.world_size)) - set(run.timeline.ranks))
    if missing:
        shown = ", ".join(str(r) for r in missing[:8]) + (", ..." if len(missing) > 8 else "")
        raise CompareError(
            f"{traces}: no trace of rank {shown} (world size {run.timeline.world_size}); "
            "the per-kind and per-group means need one trace per rank"
        )
    sim = simulate_config(cfg, calibration, machine, network, run.timeline.world_size, sets)
    steps = measured_steps(run)
    counted = counted_steps(steps)
    if not counted:
        raise CompareError(f"{traces}: no ProfilerStep present on every rank")
    measured = statistics.median(steps[s] for s in counted)
    kinds_map = group_kind_map(run, sim.group_sizes)
    m_kinds, m_groups = measured_breakdown(run, counted, kinds_map)
    s_kinds, s_groups = simulated_breakdown(sim.timeline, sim.op_overhead_s)
    return Comparison(
        traces=str(traces), config=str(cfg),
        calibration=None if calibration is None else str(calibration), tolerance=tolerance,
        rows=_rows((measured, sim.iteration_s), (m_kinds, s_kinds), (m_groups, s_groups)),
        measured_steps_s=[steps[s] for s in counted],
    )  # fmt: skip
