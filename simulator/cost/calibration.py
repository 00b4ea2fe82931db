"""The calibration hook: measured data that overrides the kernel and network curves.

A calibration file is produced by the calibrator (validation/) from real traces and read
here; this module only defines the data, its validation and its lookups. It holds, per
GPU type (keys of topologies/data/gpus.yaml):

- `gemm`: measured GEMM kernel times keyed by (m, n, k, batch, dtype_bytes), each given
  as `time_s` or `flops_per_s` (achieved, 2·m·n·k·batch per second);
- `collectives`: per (collective, link tier, optional group size) piecewise alpha-beta
  segments (min_bytes, max_bytes, alpha_s, beta_s_per_byte) and/or (bytes, busbw_Bps)
  points, for the network model;
- `interference` (compute, memory): the factors by which compute-bound and memory-bound
  kernels stretch while a collective of the same GPU runs beside them
  (`overlap_slowdown`, the single factor of older files, stretches every kernel when a
  file has no `interference`);
- `rates` (optional): fitted rates and overheads that replace the spec-derived constants
  of the kernel model (the GEMM peak under the efficiency curve, or a flat GEMM rate for
  shapes off the table, memory bandwidth, attention rate, per-op launch and host issue
  overheads). A CPU host has no meaningful GEMM efficiency curve, so there the flat rate
  prices every GEMM the table does not cover.

GEMM lookup rules (`GemmIndex.match`); batch and dtype_bytes must match exactly:
- an exact (m, n, k) point gives its measured time;
- `interpolation: idw` (default): the table points whose m, n and k are each within a
  factor `neighbourhood` (default 2) of the query, at most the 8 nearest in log2(m, n, k)
  space, weighted by 1/distance²; the kernel model multiplies its own curve at the query by
  their weighted geometric mean of measured/curve ratios, so quantisation steps stay;
- `interpolation: nearest`: the same with only the nearest such point;
- `interpolation: exact`: exact points only. Outside the neighbourhood the curve is used.

Collective lookups: segments are sorted and may not overlap; a size below the first
segment uses it. Bus-bandwidth points are interpolated linearly in log(bytes)-log(busbw)
and clamped to the end values. Above `largest_bytes` (the measured maximum, written by the
calibrator) the table says nothing: the pricer scales its time at that size by the
network model's own growth (simulator/network/pricing.py), since an end segment fitted on
few points (a single point is flat) made every larger message as fast as the largest
measured one (the H100 table from Vidur's CSV: every all-reduce from 64 MiB to 16 GiB in
322 us).

The file is YAML or JSON (by suffix; SI units named in the fields) with a `provenance`
block (trace paths and hashes, sample counts, residuals, free extra keys) that a
load/save round trip preserves. Errors raise CostModelError naming the file and field.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from simulator.atomic import atomic_write_text
from simulator.errors import CostModelError
from simulator.network.protocols import CollectiveModelSpec
from topologies.hardware import gpu_catalogue
from topologies.types import LINK_KINDS
from topologies.user_input.files import read_user_text
from topologies.user_input.model import UserModel, first_error_line
from topologies.yaml_loader import NestingError, load_user_json, load_user_yaml, yaml_error_line
from workloads.ops import CollectiveKind

LINK_TIERS: frozenset[str] = frozenset({k.value for k in LINK_KINDS} | {"intra_node", "inter_node"})
MAX_NEIGHBOURS = 8


class GemmPoint(UserModel):
    """One measured GEMM shape: its kernel time (`time_s`) or achieved rate (`flops_per_s`)."""

    m: int = Field(gt=0)
    n: int = Field(gt=0)
    k: int = Field(gt=0)
    batch: int = Field(default=1, gt=0)
    dtype_bytes: int = Field(default=2, gt=0)
    time_s: float | None = Field(default=None, gt=0)
    flops_per_s: float | None = Field(default=None, gt=0)
    samples: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one_measure(self) -> GemmPoint:
        if (self.time_s is None) == (self.flops_per_s is None):
            raise ValueError("give exactly one of time_s and flops_per_s")
        return self

    @property
    def key(self) -> tuple[int, int, int, int, int]:
        """(m, n, k, batch, dtype_bytes): what the table is keyed by."""
        return (self.m, self.n, self.k, self.batch, self.dtype_bytes)

    @property
    def kernel_time_s(self) -> float:
        """The measured kernel time, from `time_s` or from the achieved FLOP/s."""
        if self.time_s is not None:
            return self.time_s
        rate = self.flops_per_s if self.flops_per_s is not None else math.nan
        return 2.0 * self.m * self.n * self.k * self.batch / rate


class GemmTable(UserModel):
    """Measured GEMM points of one GPU type and how to use them between points."""

    points: tuple[GemmPoint, ...] = ()
    interpolation: Literal["idw", "nearest", "exact"] = "idw"
    neighbourhood: float = Field(default=2.0, ge=1.0)

    @field_validator("points")
    @classmethod
    def _unique(cls, points: tuple[GemmPoint, ...]) -> tuple[GemmPoint, ...]:
        seen: set[tuple[int, ...]] = set()
        for i, p in enumerate(points):
            if p.key in seen:
                raise ValueError(f"point {i} repeats shape {p.key} (m, n, k, batch, dtype_bytes)")
            seen.add(p.key)
        return points


class AlphaBetaSegment(UserModel):
    """time = alpha_s + beta_s_per_byte · bytes, for min_bytes <= bytes < max_bytes."""

    min_bytes: float = Field(ge=0)
    max_bytes: float = Field(gt=0)
    alpha_s: float = Field(ge=0)
    beta_s_per_byte: float = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> AlphaBetaSegment:
        if self.max_bytes <= self.min_bytes:
            raise ValueError("max_bytes must exceed min_bytes")
        return self

    def time_s(self, nbytes: float) -> float:
        """The segment's line at `nbytes`."""
        return self.alpha_s + self.beta_s_per_byte * nbytes


class BusBwPoint(UserModel):
    """A measured bus bandwidth (nccl-tests convention) at one message size."""

    bytes: float = Field(gt=0)
    busbw_Bps: float = Field(gt=0)


class CollectiveTable(UserModel):
    """Measured cost of one collective on one link tier (optionally one group size)."""

    collective: CollectiveKind
    tier: str
    group_size: int | None = Field(default=None, gt=0)
    segments: tuple[AlphaBetaSegment, ...] = ()
    points: tuple[BusBwPoint, ...] = ()
    samples: int | None = Field(default=None, ge=1)
    # the largest message size measured (the calibrator writes it; segments extend past
    # it by convention): beyond it the pricer scales the table by the network model
    measured_max_bytes: float | None = Field(default=None, gt=0)

    @field_validator("tier")
    @classmethod
    def _known_tier(cls, tier: str) -> str:
        if tier not in LINK_TIERS:
            raise ValueError(f"unknown link tier '{tier}' (known: {', '.join(sorted(LINK_TIERS))})")
        return tier

    @model_validator(mode="after")
    def _consistent(self) -> CollectiveTable:
        if not self.segments and not self.points:
            raise ValueError("give segments or points")
        segs = self.segments
        for a, b in itertools.pairwise(segs):
            if b.min_bytes < a.max_bytes:
                raise ValueError("segments must be sorted by min_bytes and must not overlap")
        sizes = [p.bytes for p in self.points]
        if any(b <= a for a, b in itertools.pairwise(sizes)):
            raise ValueError("points must have strictly increasing bytes")
        return self

    @property
    def largest_bytes(self) -> float:
        """The largest message size the table speaks for: its measured maximum, else its
        last point or the end of its last segment."""
        if self.measured_max_bytes is not None:
            return self.measured_max_bytes
        ends = [p.bytes for p in self.points[-1:]] + [s.max_bytes for s in self.segments[-1:]]
        return max(ends)

    def segment_for(self, nbytes: float) -> AlphaBetaSegment | None:
        """The segment covering `nbytes` (end segments beyond the table); None if no segments."""
        if not self.segments:
            return None
        starts = [s.min_bytes for s in self.segments]
        i = max(bisect.bisect_right(starts, nbytes) - 1, 0)
        return self.segments[i]

    def time_s(self, nbytes: float) -> float | None:
        """alpha + beta · bytes from the covering segment; None if the table has no segments."""
        seg = self.segment_for(nbytes)
        return None if seg is None else seg.time_s(nbytes)

    def busbw_Bps(self, nbytes: float) -> float | None:
        """Bus bandwidth at `nbytes`, log-log interpolated and clamped; None without points."""
        if not self.points:
            return None
        xs = np.log([p.bytes for p in self.points])
        ys = np.log([p.busbw_Bps for p in self.points])
        return float(np.exp(np.interp(math.log(max(nbytes, 1e-300)), xs, ys)))


class KernelRates(UserModel):
    """Fitted rates and overheads; each one set replaces the kernel model's own constant.

    `gemm_peak_flops` replaces P, the bf16/fp16 rate of a large GEMM under the efficiency
    curve (fitted on the traces' GEMMs of this GPU). `gemm_flops_per_s` (+
    `gemm_overhead_s`) replaces the curve itself for GEMMs off the table (a CPU host):
    time = max(FLOPs / rate, bytes / memory bandwidth) + overhead.
    `attention_flops_per_s` prices attention FLOPs (forward and backward alike);
    `memory_bandwidth_Bps` the memory-bound kinds; `min_kernel_s` their fixed time;
    `launch_overhead_s` is added to every op; `issue_*_s` are host dispatch costs.
    """

    gemm_peak_flops: float | None = Field(default=None, gt=0)
    gemm_flops_per_s: float | None = Field(default=None, gt=0)
    gemm_overhead_s: float | None = Field(default=None, ge=0)
    attention_flops_per_s: float | None = Field(default=None, gt=0)
    memory_bandwidth_Bps: float | None = Field(default=None, gt=0)
    min_kernel_s: float | None = Field(default=None, ge=0)
    launch_overhead_s: float | None = Field(default=None, ge=0)
    issue_compute_s: float | None = Field(default=None, ge=0)
    issue_collective_s: float | None = Field(default=None, ge=0)


class InterferenceFit(UserModel):
    """Fitted stretch factors of kernels that overlap communication (None = not fitted)."""

    compute: float | None = Field(default=None, ge=1.0)
    memory: float | None = Field(default=None, ge=1.0)


class GpuCalibration(UserModel):
    """Everything calibrated for one GPU type."""

    gemm: GemmTable | None = None
    collectives: tuple[CollectiveTable, ...] = ()
    overlap_slowdown: float | None = Field(default=None, gt=0)
    interference: InterferenceFit | None = None
    rates: KernelRates | None = None
    # fitted collective-library terms (protocol latencies, bandwidth factors, link
    # efficiencies) that replace the machine's in the network model
    network: CollectiveModelSpec | None = None

    @field_validator("collectives")
    @classmethod
    def _unique(cls, tables: tuple[CollectiveTable, ...]) -> tuple[CollectiveTable, ...]:
        seen: set[tuple[str, str, int | None]] = set()
        for t in tables:
            key = (t.collective.value, t.tier, t.group_size)
            if key in seen:
                raise ValueError(f"two tables for collective/tier/group_size {key}")
            seen.add(key)
        return tables


class TraceRef(BaseModel):
    """A trace the calibration was fitted on."""

    model_config = ConfigDict(frozen=True, extra="allow")
    path: str
    sha256: str | None = None
    samples: int | None = Field(default=None, ge=0)


class Provenance(BaseModel):
    """Where a calibration came from; extra keys are kept as they are."""

    model_config = ConfigDict(frozen=True, extra="allow")
    created: str | None = None
    tool: str | None = None
    traces: tuple[TraceRef, ...] = ()
    residuals: dict[str, Any] = Field(default_factory=dict)
    notes: str = ""


def _known_gpu(name: str) -> str:
    """A GPU key must be in the catalogue (a typo would otherwise be silently unused)."""
    known = gpu_catalogue()
    if name not in known:
        raise ValueError(f"unknown GPU '{name}' (known: {', '.join(sorted(known))})")
    return name


GpuName = Annotated[str, AfterValidator(_known_gpu)]


class Calibration(UserModel):
    """A calibration file: per-GPU measured tables plus provenance."""

    version: Literal[1] = 1
    provenance: Provenance = Field(default_factory=Provenance)
    gpus: dict[GpuName, GpuCalibration] = Field(default_factory=dict)

    def for_gpu(self, gpu: str) -> GpuCalibration | None:
        """The calibration of one GPU type, if the file has one."""
        return self.gpus.get(gpu)

    def network_spec(self, gpu: str) -> CollectiveModelSpec | None:
        """The fitted collective-library terms of one GPU type, if the file has them."""
        g = self.gpus.get(gpu)
        return None if g is None else g.network

    def overlap_slowdown(self, gpu: str) -> float | None:
        """The calibrated compute slowdown under overlapping communication, if any."""
        g = self.gpus.get(gpu)
        return None if g is None else g.overlap_slowdown

    def collective(
        self, gpu: str, tier: str, collective: CollectiveKind | str, group_size: int | None = None
    ) -> CollectiveTable | None:
        """The table for a collective on a tier: exact group size first, then size-agnostic."""
        g = self.gpus.get(gpu)
        if g is None:
            return None
        try:
            kind = CollectiveKind(collective)
        except ValueError as exc:
            raise CostModelError(f"unknown collective '{collective}'") from exc
        fallback = None
        for t in g.collectives:
            if t.collective is kind and t.tier == tier:
                if t.group_size == group_size:
                    return t
                if t.group_size is None:
                    fallback = t
        return fallback


@dataclass(frozen=True, slots=True)
class GemmMatch:
    """What the table says about one query: an exact time, or weighted neighbours."""

    exact_time_s: float | None = None
    neighbours: tuple[tuple[GemmPoint, float], ...] = ()


class GemmIndex:
    """A numpy index over a GemmTable for fast lookups (built once per kernel model)."""

    def __init__(self, table: GemmTable) -> None:
        self.table = table
        self._exact = {p.key: p for p in table.points}
        by_group: dict[tuple[int, int], list[GemmPoint]] = {}
        for p in table.points:
            by_group.setdefault((p.batch, p.dtype_bytes), []).append(p)
        self._groups = {
            key: (pts, np.log2(np.array([[p.m, p.n, p.k] for p in pts], dtype=np.float64)))
            for key, pts in by_group.items()
        }

    def match(
        self, m: int, n: int, k: int, batch: int = 1, dtype_bytes: int = 2
    ) -> GemmMatch | None:
        """Apply the table's lookup rule to one shape; None when the curve should be used."""
        hit = self._exact.get((m, n, k, batch, dtype_bytes))
        if hit is not None:
            return GemmMatch(exact_time_s=hit.kernel_time_s)
        group = self._groups.get((batch, dtype_bytes))
        if group is None or self.table.interpolation == "exact" or min(m, n, k) <= 0:
            return None
        pts, logs = group
        delta = np.abs(logs - np.log2(np.array([m, n, k], dtype=np.float64)))
        inside = np.flatnonzero(delta.max(axis=1) <= math.log2(self.table.neighbourhood) + 1e-12)
        if inside.size == 0:
            return None
        dist = np.sqrt((delta[inside] ** 2).sum(axis=1))
        order = np.argsort(dist, kind="stable")
        keep = order[: 1 if self.table.interpolation == "nearest" else MAX_NEIGHBOURS]
        weights = 1.0 / dist[keep] ** 2
        weights /= weights.sum()
        return GemmMatch(
            neighbours=tuple(
                (pts[int(inside[i])], float(w)) for i, w in zip(keep, weights, strict=True)
            )
        )


def calibration_from_mapping(raw: Any, source: str = "<mapping>") -> Calibration:
    """Validate a parsed mapping as a Calibration; errors name `source` and the field."""
    if not isinstance(raw, dict):
        raise CostModelError(f"calibration file {source}: expected a mapping at the top level")
    try:
        return Calibration.model_validate(raw)
    except ValidationError as exc:
        raise CostModelError(first_error_line(exc, f"calibration file {source}")) from exc


def require_gpu(calibration: Calibration, gpu: str, label: str) -> None:
    """ConfigError unless `calibration` has tables for `gpu`: a calibration speaks only
    for the GPU type it was fitted on, and applying none of it silently would report an
    uncalibrated run as calibrated. `label` names the file and flag for the message."""
    from simulator.errors import ConfigError

    if calibration.for_gpu(gpu) is None:
        fitted = ", ".join(sorted(calibration.gpus)) or "none"
        raise ConfigError(f"{label} has no tables for GPU '{gpu}' (it calibrates: {fitted})")


def _json_problem(exc: ValueError) -> str:
    return exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration file (JSON if it ends in .json, else YAML)."""
    p = Path(path)
    try:
        text = read_user_text(p)
    except OSError as exc:
        raise CostModelError(f"calibration file {p}: cannot read ({exc.strerror})") from exc
    except UnicodeDecodeError:
        raise CostModelError(f"calibration file {p}: not a text file (not UTF-8)") from None
    try:
        raw = load_user_json(text) if p.suffix.lower() == ".json" else load_user_yaml(text)
    except (json.JSONDecodeError, yaml.YAMLError, NestingError) as exc:
        detail = yaml_error_line(exc) if isinstance(exc, yaml.YAMLError) else _json_problem(exc)
        raise CostModelError(
            f"calibration file {p}: not valid {p.suffix or 'YAML'} ({detail})"
        ) from exc
    return calibration_from_mapping(raw, str(p))


def save_calibration(cal: Calibration, path: str | Path) -> None:
    """Write a calibration file (JSON if it ends in .json, else YAML); loads back equal."""
    p = Path(path)
    data = cal.model_dump(mode="json", exclude_none=True)
    text = (
        json.dumps(data, indent=2) + "\n"
        if p.suffix.lower() == ".json"
        else yaml.safe_dump(data, sort_keys=False)
    )
    try:  # a temporary file renamed over `p`: a failed write leaves the old file whole
        atomic_write_text(p, text)
    except OSError as exc:
        raise CostModelError(f"calibration file {p}: cannot write ({exc.strerror})") from None
