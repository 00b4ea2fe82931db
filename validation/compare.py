"""Measured against simulated: one run's traces joined with a simulation of the same run.

`compare(traces, config=None, calibration=None, tolerance=0.2) -> Comparison`:

- the measured side is the run's traces (validation.measured): the iteration time is the
  median over its ProfilerStep iterations (the first skipped when there are several) of
  the slowest rank's step; per op kind, the busy time per step (mean over ranks); per
  process group, the time its collectives are in flight (the union of their records,
  per step, mean over ranks). For gloo runs collectives are seen from the issuing
  thread (c10d call to resume), as calibrated gloo tables are;
- the simulated side is `config`: a torch4d `run.json` (default: the one beside the
  traces) replayed exactly (validation.torch4d_workload) on `machine` (`cpu-host` for a
  CPU run), or an axsim YAML experiment config run through `simulate()`; `calibration`
  is the calibration file both use.

Measured process groups map to the simulation's group kinds by their members (torch4d's
run.json lists every group instance), else by group size when that is unambiguous.
Errors (CompareError, TraceError, ConfigError) name the file; a config whose world size
differs from the traces' is one of them.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulator.analysis import length
from simulator.errors import SimulatorError
from simulator.timeline import COMM_KINDS, Timeline
from validation.measured import MeasuredRun, counted_steps, load_run, measured_steps
from validation.torch4d_workload import TORCH4D_GROUPS

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
    for rec in run.collective_records(caller=True):
        if rec.iteration in steps:
            label = _sim_kind(rec.group) or kinds_map.get(rec.ranks, rec.group)
            spans[(label, rec.rank, rec.iteration)].append((rec.start_s, rec.end_s))
    for rec in run.collective_records(caller=True):
        if rec.iteration in steps:
            kinds[rec.kind] += (rec.end_s - rec.start_s) / norm
    for (label, _, _), iv in spans.items():
        groups[label] += length(np.array([a for a, _ in iv]), np.array([b for _, b in iv])) / norm
    return dict(kinds), dict(groups)


def _sim_kind(label: str) -> str | None:
    """torch4d names its groups axsim_<kind> (members alone cannot tell Z from data)."""
    kind = label.removeprefix("axsim_")
    return TORCH4D_GROUPS.get(kind) if label.startswith("axsim_") else None


# ----------------------------------------------------------------- simulated side
def simulated_breakdown(tl: Timeline) -> tuple[dict[str, float], dict[str, float]]:
    """(busy time per op kind, in-flight time per group kind), mean over all ranks."""
    kinds: dict[str, float] = defaultdict(float)
    groups: dict[str, float] = defaultdict(float)
    world = tl.world_size
    for r in range(world):
        t = tl.rank(r)
        for k in set(t.kind.astype(str)) - {"wait"}:
            m = t.kind == k
            kinds[k] += float((t.end_s[m] - t.start_s[m]).sum()) / world
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
) -> Comparison:
    """Simulate the traced run and join it with the traces (see module doc)."""
    from validation.calibrate import collect_inputs
    from validation.simulate_run import simulate_config

    inputs = collect_inputs([traces])
    if len(inputs.runs) != 1:
        raise CompareError(f"{traces}: expected the traces of one run (one directory)")
    files, run_json = inputs.runs[0]
    cfg = Path(config) if config is not None else run_json
    if cfg is None:
        raise CompareError(f"{traces}: no run.json beside the traces; give --config")
    is_run_json = cfg.suffix == ".json"
    run = load_run(files, cfg if is_run_json else None)
    sim = simulate_config(cfg, calibration, machine, network, run.timeline.world_size)
    steps = measured_steps(run)
    counted = counted_steps(steps)
    if not counted:
        raise CompareError(f"{traces}: no ProfilerStep present on every rank")
    measured = statistics.median(steps[s] for s in counted)
    kinds_map = group_kind_map(run, sim.group_sizes)
    m_kinds, m_groups = measured_breakdown(run, counted, kinds_map)
    s_kinds, s_groups = simulated_breakdown(sim.timeline)
    return Comparison(
        traces=str(traces), config=str(cfg),
        calibration=None if calibration is None else str(calibration), tolerance=tolerance,
        rows=_rows((measured, sim.iteration_s), (m_kinds, s_kinds), (m_groups, s_groups)),
        measured_steps_s=[steps[s] for s in counted],
    )  # fmt: skip
