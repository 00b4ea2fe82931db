"""Collective samples from traces and from Vidur's benchmark CSVs, and their tables.

A *sweep* is one (GPU, collective, link tier, group size) measured at several message
sizes. Each size gets one representative time:

- traces: a collective kernel (or gloo worker range) on one rank lasts from that rank's
  launch until every peer has arrived and the transfer is done, so where all members of a
  collective are traced its transfer time is the *minimum over the members*; the size's
  time is the median (or mean) of those minima. Sizes seen only on some members fall back
  to the lower envelope (the minimum over all their samples).
- Vidur CSVs: each row is one rank's median of repeated launches; the size's time is the
  minimum over ranks (the lower envelope), duplicate rows first reduced to their median.

gloo on a CPU host ("host terms", on by default for gloo runs): a table there is the
time a blocking collective costs its caller, the transfer plus two terms per collective.
(1) The issuing thread pays the c10d enqueue, the hand-off to a worker thread and its own
wake-up (measured per step and rank as the time blocked in collectives minus the worker
durations, per collective; the median over ranks and steps). (2) Ranks share the host's
cores with each other and with their gloo threads, so every synchronisation waits for
partners the OS has not scheduled yet; the simulator replays symmetric ranks in lockstep
and cannot produce that wait, so its mean over the sweep's complete instances (mean over
members minus the minimum: `arrival_wait_s`) is added. `host_terms=False` gives pure
transfer tables (the waits then end up in the fitted per-op overhead).

Tables: `fit_piecewise` per sweep, plus for each (GPU, collective, tier) with a group of
two or more a size-agnostic table (group_size unset) of bus bandwidths from the largest
measured group, used by the simulator for group sizes never measured: its bandwidth term
then scales with the nccl-tests bus factor of the new size (e.g. ring all-reduce
2(p-1)/p); its latency does not, which underestimates latency-bound sizes of larger groups.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simulator.cost.calibration import BusBwPoint, CollectiveTable
from simulator.errors import SimulatorError
from validation.calibrate_fit import SizePoint, fit_piecewise, segment_time_s
from validation.calibrate_host import HostStats
from validation.calibrate_kernels import Statistic, resolve_statistic
from validation.measured import MeasuredRun
from workloads.ops import CollectiveKind, bus_factor

SweepKey = tuple[str, str, str, int]
"""(GPU, collective kind, tier, group size)."""
VIDUR_GPUS = {"h100": "h100", "a100": "a100-80gb", "a40": "a40"}
"""File-name prefix -> catalogue GPU (Vidur's README: A100 80 GB, H100 80 GB, A40)."""
AGNOSTIC_POINTS = 24


class CalibrationError(SimulatorError):
    """Calibration input that cannot be used; the message names the file."""


@dataclass
class Sweep:
    """Representative times per message size of one (GPU, collective, tier, group)."""

    key: SweepKey
    sizes: dict[int, list[float]] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    method: str = ""
    host_overhead_s: float = 0.0
    arrival_wait_s: float = 0.0
    benchmark: bool = False  # from a benchmark file (not pooled with another one)

    def points(self, statistic: str = "median") -> list[SizePoint]:
        center = np.mean if statistic == "mean" else np.median
        return [
            SizePoint(
                float(b), float(center(v)) + self.host_overhead_s + self.arrival_wait_s, len(v)
            )
            for b, v in sorted(self.sizes.items())
            if b > 0
        ]


def is_vidur_csv(path: Path) -> bool:
    """A Vidur collective benchmark CSV: its header has `time_stats.` columns."""
    try:
        with path.open(newline="") as fh:
            return "time_stats." in fh.readline()
    except (OSError, UnicodeDecodeError):
        return False


def read_vidur_csv(path: Path, gpu: str | None = None) -> list[Sweep]:
    """Sweeps of one Vidur network CSV (GPU from `gpu` or the file name prefix)."""
    prefix = path.name.split("_")[0].lower()
    gpu = gpu or VIDUR_GPUS.get(prefix)
    if gpu is None:
        raise CalibrationError(f"{path}: cannot tell the GPU from the file name (give --gpu)")
    try:
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise CalibrationError(f"{path}: cannot read the CSV ({exc})") from None
    per: dict[tuple[str, str, int, int], dict[int, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for i, row in enumerate(rows, start=2):
        try:
            name = row["collective"]
            workers, per_node = int(row["num_workers"]), int(row["devices_per_node"])
            size, rank = int(row["size"]), int(row["rank"])
            ms = float(row[f"time_stats.{name}.median"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CalibrationError(f"{path}: line {i}: missing or bad field ({exc})") from None
        if not (size > 0 and ms > 0 and math.isfinite(ms)):
            raise CalibrationError(
                f"{path}: line {i}: size and time_stats.{name}.median must be positive "
                f"and finite (got {size} bytes, {ms} ms)"
            )
        if per_node < 1 or not 0 <= rank < workers:
            raise CalibrationError(
                f"{path}: line {i}: rank {rank}, num_workers {workers} and devices_per_node "
                f"{per_node} are inconsistent"
            )
        tier = "intra_node" if workers <= per_node else "inter_node"
        per[(name, tier, workers, rank)][size].append(ms * 1e-3)
    sweeps: dict[SweepKey, Sweep] = {}
    for (name, tier, workers, _rank), sizes in per.items():
        try:
            kind = CollectiveKind(name.replace("_", "-")).value
        except ValueError:
            raise CalibrationError(f"{path}: unknown collective '{name}'") from None
        key = (gpu, kind, tier, workers)
        sweep = sweeps.setdefault(
            key, Sweep(key, sources=[str(path)], method="min over ranks of medians", benchmark=True)
        )
        for size, values in sizes.items():
            med = statistics.median(values)
            sweep.sizes[size] = [min(*sweep.sizes.get(size, [med]), med)]
    if not sweeps:
        raise CalibrationError(f"{path}: no rows")
    return list(sweeps.values())


def gloo_host_overhead(run: MeasuredRun, stats: list[HostStats]) -> float:
    """Median over ranks and steps of (blocked in collectives - worker durations) / count."""
    values = []
    by_path = {s.path: s for s in stats}
    for t in run.traces.values():
        s = by_path.get(t.info.path)
        if s is None:
            continue
        tl = t.timeline
        for b in s.steps:
            rows = [c.index for c in t.collectives if c.iteration == b.step]
            if rows:
                worker = float(sum(tl.end_s[i] - tl.start_s[i] for i in rows))
                values.append((b.comm_blocked_s - worker) / len(rows))
    return max(statistics.median(values), 0.0) if values else 0.0


def trace_sweeps(
    run: MeasuredRun,
    gpus_per_node: int | None = None,
    host_overhead_s: float = 0.0,
    arrival_wait: bool = False,
) -> list[Sweep]:
    """Sweeps of one traced run (min over members per collective, else lower envelope);
    `arrival_wait` adds the mean wait for the last member (host runs, see module doc)."""
    per_node = gpus_per_node or max((t.info.device for t in run.traces.values()), default=0) + 1
    complete: dict[SweepKey, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    partial: dict[SweepKey, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    waits: dict[SweepKey, list[float]] = defaultdict(list)
    for inst in run.instances():
        ranks = inst.ranks or tuple(inst.durations_s)
        one_node = run.gpu == "cpu" or len({r // max(per_node, 1) for r in ranks}) == 1
        key = (run.gpu, inst.kind, "intra_node" if one_node else "inter_node", inst.group_size)
        if inst.complete:
            d = list(inst.durations_s.values())
            complete[key][inst.bytes].append(min(d))
            waits[key].append(float(np.mean(d)) - min(d))
        else:
            partial[key][inst.bytes].extend(inst.durations_s.values())
    out = []
    for key in sorted(set(complete) | set(partial)):
        sizes = {b: list(v) for b, v in complete.get(key, {}).items()}
        for b, v in partial.get(key, {}).items():
            sizes.setdefault(b, [min(v)])
        method = "min over members" if key in complete else "lower envelope"
        wait = float(np.mean(waits[key])) if arrival_wait and waits.get(key) else 0.0
        out.append(Sweep(key, sizes, [run.label], method, host_overhead_s, wait))
    return out


def merge_sweeps(sweeps: list[Sweep]) -> dict[SweepKey, Sweep]:
    """One sweep per key: traces pool their samples; two benchmark files may not collide."""
    out: dict[SweepKey, Sweep] = {}
    for s in sweeps:
        have = out.get(s.key)
        if have is None:
            out[s.key] = Sweep(s.key, {b: list(v) for b, v in s.sizes.items()}, list(s.sources),
                               s.method, s.host_overhead_s, s.arrival_wait_s, s.benchmark)  # fmt: skip
            continue
        if s.benchmark or have.benchmark:
            raise CalibrationError(
                f"{have.sources[0]} and {s.sources[0]} both measure {s.key[1]} on {s.key[0]} "
                f"({s.key[2]}, group of {s.key[3]}); calibrate them separately"
            )
        for b, v in s.sizes.items():
            have.sizes.setdefault(b, []).extend(v)
        have.sources += s.sources
        have.host_overhead_s = max(have.host_overhead_s, s.host_overhead_s)
        have.arrival_wait_s = max(have.arrival_wait_s, s.arrival_wait_s)
    return out


def build_tables(
    sweeps: dict[SweepKey, Sweep], tolerance: float, statistic: Statistic
) -> tuple[dict[str, list[CollectiveTable]], dict[str, object]]:
    """Per GPU: the fitted tables (plus size-agnostic ones) and residuals for provenance."""
    tables: dict[str, list[CollectiveTable]] = defaultdict(list)
    residuals: dict[str, object] = {}
    largest: dict[tuple[str, str, str], tuple[int, CollectiveTable, list[SizePoint]]] = {}
    for key, sweep in sorted(sweeps.items()):
        gpu, kind, tier, group = key
        points = sweep.points(resolve_statistic(statistic, gpu))
        if not points:
            continue
        fit = fit_piecewise(points, tolerance)
        table = CollectiveTable(
            collective=CollectiveKind(kind), tier=tier, group_size=group,
            segments=fit.segments, samples=max(fit.samples, 1),
            measured_max_bytes=max(p.bytes for p in points),
        )  # fmt: skip
        tables[gpu].append(table)
        residuals[f"{gpu}/{kind}/{tier}/{group}"] = {
            **fit.residuals(), "method": sweep.method, "host_overhead_s": sweep.host_overhead_s,
            "arrival_wait_s": sweep.arrival_wait_s,
            "sources": sorted(set(sweep.sources)),
        }  # fmt: skip
        if group > 1 and group >= largest.get((gpu, kind, tier), (0,))[0]:
            largest[(gpu, kind, tier)] = (group, table, points)
    for (gpu, kind, tier), (group, table, points) in largest.items():
        lo, hi = points[0].bytes, points[-1].bytes
        sizes = np.unique(np.geomspace(lo, hi, min(AGNOSTIC_POINTS, len(points))).round())
        factor = bus_factor(CollectiveKind(kind), group)
        bus = [
            BusBwPoint(
                bytes=float(s), busbw_Bps=float(s) * factor / segment_time_s(table.segments, s)
            )
            for s in sizes
        ]
        tables[gpu].append(
            CollectiveTable(
                collective=CollectiveKind(kind),
                tier=tier,
                points=tuple(bus),
                measured_max_bytes=hi,
            )
        )
        residuals[f"{gpu}/{kind}/{tier}/any"] = {
            "derived_from_group_size": group,
            "note": "bus bandwidths of the largest measured group; the bandwidth term scales "
            "with the bus factor of other group sizes, the latency does not",
        }
    return tables, residuals
