"""The Report: pure data describing one simulated iteration (rendered elsewhere).

`Report.to_json()` is the `axsim simulate --json` contract that scripts and sweeps rely
on; keys are stable: iteration_time_s, compute_time_s, exposed_comm_time_s,
overlapped_comm_time_s, comm_time_by_group_s (x, y, z, data), model_flops_per_iteration,
pflops_total, tflops_per_gpu, percent_of_advertised_peak, percent_of_empirical_peak,
memory_per_gpu_bytes, fits_in_memory, grid (x, y, z, data), machine, gpus, model,
engine_mode, wall_time_s, events, choices (each automatic choice with its reason)
(plus extra detail keys; `stages`: one row per pipeline
stage, empty without a pipeline), and `schema_version` /
`axsim_version` (simulator/outputs/versions.py; `axsim schema --report` prints the JSON Schema).

Group names: `comm_time_by_group_s` keeps the cross-strategy axes x, y, z, data (and pp
for pipeline send/recv) so sweeps compare strategies on one key set;
`comm_time_by_native_group_s` names the strategy's own groups (tp/dp/pp for Megatron,
shard/replicate for FSDP, row/col for Optimus, x/y/z/data for AxoNN) and `group_axes`
is the stable mapping from one to the other. A model whose shape differs from its preset
is reported as `custom (<preset> with <field>=<value>, ...)`.

`compute_by_kind_s` splits the compute of the critical rank into the kernels' own time by
kind (gemm, attention, elementwise: norms, activations, residuals, copies; optimizer, ...)
and the terms the step adds around them: `launch_gaps` (idle time between back-to-back
kernels) and `interference` (kernels slowed by communication running beside them).
`host_bound_s` is the time the GPU waited for the host to issue kernels (a launch-bound
step: kernels shorter than their host issue cost).
`kernel_terms` says what the kernel model priced with (GEMM peak and its source, HBM
bandwidth, launch gap, interference factors).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import cast

import numpy as np

from simulator.config import ModelConfig
from simulator.engine.core import EngineResult
from simulator.engine.ranks import Warp
from simulator.engine.timeline import Timeline
from simulator.outputs.analysis import RankBreakdown, with_skipped_periods
from simulator.outputs.memory_verdict import NOT_CATEGORIES, memory_verdict
from topologies.hardware import GpuSpec
from topologies.types import Topology
from workloads.models import model_preset

CONTRACT_GROUPS = ("x", "y", "z", "data")


@dataclass(frozen=True)
class LinkUsage:
    """A busy link: bytes carried and average utilisation over the iteration."""

    link: int
    src: str
    dst: str
    kind: str
    bandwidth_GBps: float
    bytes: float
    utilization: float


@dataclass(frozen=True)
class StagePlan:
    """One pipeline stage as built: its first rank (simulated in every engine mode), its
    transformer layers, whether it runs the embedding / the output layer and loss, and
    its memory per GPU."""

    stage: int
    rank: int
    layers: int
    embedding: bool
    head: bool
    memory_bytes: float


@dataclass(frozen=True)
class StageRow:
    """One pipeline stage: what it runs, how busy its first rank is, and its memory.

    load: its compute time over the busiest stage's (1.0 = the slowest stage);
    pipeline_wait_s: the time its rank neither computes nor waits on a non-pipeline
    collective: the pipeline bubble, plus exposed activation transfers."""

    stage: int
    rank: int
    layers: int
    embedding: bool
    head: bool
    compute_s: float
    load: float
    exposed_comm_s: float
    pipeline_wait_s: float
    memory_bytes: float


@dataclass(frozen=True)
class Report:
    iteration_time_s: float
    compute_time_s: float
    exposed_comm_time_s: float
    overlapped_comm_time_s: float
    comm_time_by_group_s: dict[str, float]
    comm_total_by_group_s: dict[str, float]
    compute_by_kind_s: dict[str, float]
    host_bound_s: float
    model_flops_per_iteration: float
    pflops_total: float
    tflops_per_gpu: float
    percent_of_advertised_peak: float
    percent_of_empirical_peak: float | None
    memory_per_gpu_bytes: float
    memory_breakdown_bytes: dict[str, float]
    memory_capacity_bytes: float
    fits_in_memory: bool
    grid: dict[str, int]
    parameters: dict[str, object]
    strategy: str
    machine: str
    gpu: str
    gpus: int
    model: str
    engine_mode: str
    network_model: str
    wall_time_s: float
    events: int
    ops_simulated: int
    ops_represented: int
    skipped_segments: int
    batch_tokens: int
    critical_rank: int
    busiest_links: list[LinkUsage] = field(default_factory=list)
    # every automatic choice of the run (grid, microbatch, degrees, algorithm per group and
    # collective, engine mode): {"what", "value", "reason"} (simulator/choices.py)
    choices: list[dict[str, str]] = field(default_factory=list)
    stages: list[StageRow] = field(default_factory=list)
    comm_time_by_native_group_s: dict[str, float] = field(default_factory=dict)
    comm_total_by_native_group_s: dict[str, float] = field(default_factory=dict)
    group_axes: dict[str, str] = field(default_factory=dict)
    model_preset: str = ""
    model_overrides: dict[str, object] = field(default_factory=dict)
    model_custom: bool = False
    kernel_terms: dict[str, object] = field(default_factory=dict)
    # the memory verdict with the model's uncertainty (simulator/outputs/memory_verdict.py):
    # "fits" / "uncertain" / "does-not-fit"; the lower estimate; capacity - upper estimate;
    # the largest categories
    memory_verdict: str = "fits"
    memory_lower_bytes: float = 0.0
    memory_margin_bytes: float = 0.0
    memory_top_terms: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        """The `--json` object: every field, `memory_per_gpu_GB`, and the versions."""
        from simulator.outputs.versions import stamp

        d = asdict(self)
        d["memory_per_gpu_GB"] = self.memory_per_gpu_bytes / 1e9
        return stamp(d)


def model_overrides(model: ModelConfig) -> dict[str, object]:
    """The fields of `model` whose values differ from its preset's (its custom shape)."""
    preset = model_preset(model.name)
    spec = model.spec()
    given = model.model_dump(exclude={"name"}, exclude_none=True)
    return {k: getattr(spec, k) for k in given if getattr(spec, k) != getattr(preset, k)}


def model_label(preset: str, overrides: dict[str, object]) -> str:
    """The report's model name: the preset's, or "custom (...)" when the shape differs."""
    if not overrides:
        return preset
    changes = ", ".join(f"{k}={v}" for k, v in overrides.items())
    return f"custom ({preset} with {changes})"


def busiest_links(
    topology: Topology, link_bytes: np.ndarray, span_s: float, top: int = 8
) -> list[LinkUsage]:
    """The links that carried the most bytes, with their average utilisation."""
    if link_bytes.size == 0 or span_s <= 0:
        return []
    idx = np.argsort(-link_bytes)[:top]
    out = []
    for i in idx:
        if link_bytes[i] <= 0:
            break
        link = topology.link(int(i))
        out.append(
            LinkUsage(
                link=int(i),
                src=topology.device_name(link.src),
                dst=topology.device_name(link.dst),
                kind=link.kind.value,
                bandwidth_GBps=link.bandwidth_Bps / 1e9,
                bytes=float(link_bytes[i]),
                utilization=float(link_bytes[i] / (link.bandwidth_Bps * span_s)),
            )
        )
    return out


def rank_warps(tl: Timeline, rank: int) -> list[Warp]:
    """The skipped periods a rank's records stand for (the engine lists them per simulated
    rank in the timeline's `warps` metadata; other ranks read their representative's)."""
    warps = cast("dict[int, list[Warp]]", tl.metadata.get("warps", {}))
    rep = rank if tl.representative is None else int(tl.representative[rank])
    return list(warps.get(rep, []))


def rank_breakdown(
    tl: Timeline, rank: int, known: dict[int, RankBreakdown] | None = None
) -> RankBreakdown:
    """A rank's breakdown with its skipped periods, found once per representative in
    `known` (a rank shares its representative's records and warps, hence its breakdown;
    the critical rank is often a stage's first rank too)."""
    rep = rank if tl.representative is None else int(tl.representative[rank])
    if known is not None and rep in known:
        return known[rep]
    bd = with_skipped_periods(tl.rank(rank), rank_warps(tl, rank))
    if known is not None:
        known[rep] = bd
    return bd


def stage_rows(
    tl: Timeline,
    stages: Sequence[StagePlan],
    span_s: float,
    known: dict[int, RankBreakdown] | None = None,
) -> list[StageRow]:
    """Per-stage rows from each stage's first rank ('pp' send/recv waits are the pipeline's)."""
    parts = [rank_breakdown(tl, st.rank, known) for st in stages]
    busiest = max((bd.compute_s for bd in parts), default=0.0)
    rows = []
    for st, bd in zip(stages, parts, strict=True):
        other = bd.exposed_comm_s - bd.exposed_by_group_s.get("pp", 0.0)
        rows.append(
            StageRow(
                stage=st.stage,
                rank=st.rank,
                layers=st.layers,
                embedding=st.embedding,
                head=st.head,
                compute_s=bd.compute_s,
                load=bd.compute_s / busiest if busiest > 0 else 0.0,
                exposed_comm_s=other,
                pipeline_wait_s=max(span_s - bd.compute_s - other, 0.0),
                memory_bytes=st.memory_bytes,
            )
        )
    return rows


def build_report(
    result: EngineResult,
    *,
    topology: Topology,
    gpu: GpuSpec,
    model_name: str,
    machine: str,
    strategy: str,
    grid: dict[str, int],
    parameters: dict[str, object],
    group_aliases: dict[str, str],
    memory: dict[str, float],
    model_flops: float,
    batch_tokens: int,
    choices: list[dict[str, str]] | None = None,
    stages: Sequence[StagePlan] = (),
    model_overrides: dict[str, object] | None = None,
    kernel_terms: dict[str, object] | None = None,
) -> Report:
    """Summarise an engine result (breakdowns on the rank that finishes last)."""
    tl = result.timeline
    critical = max(tl.ranks, key=tl.rank_end_s)
    known: dict[int, RankBreakdown] = {}
    bd = rank_breakdown(tl, critical, known)
    t = result.iteration_time_s
    gpus = tl.world_size
    by_group = dict.fromkeys(CONTRACT_GROUPS, 0.0)
    total_by_group = dict.fromkeys(CONTRACT_GROUPS, 0.0)
    for g, v in bd.exposed_by_group_s.items():
        key = group_aliases.get(g, g)
        by_group[key] = by_group.get(key, 0.0) + v
    for g, v in bd.comm_by_group_s.items():
        key = group_aliases.get(g, g)
        total_by_group[key] = total_by_group.get(key, 0.0) + v
    native = sorted(set(bd.comm_by_group_s) | set(bd.exposed_by_group_s))
    overrides = dict(model_overrides or {})
    flops_rate = model_flops / t if t > 0 else 0.0
    per_gpu = flops_rate / gpus if gpus else 0.0
    emp = gpu.empirical_gemm_flops
    mem_total = float(memory.get("total", 0.0))
    verdict = memory_verdict(memory, gpu.memory_bytes)
    return Report(
        iteration_time_s=t,
        compute_time_s=bd.compute_s,
        exposed_comm_time_s=bd.exposed_comm_s,
        overlapped_comm_time_s=bd.overlapped_comm_s,
        comm_time_by_group_s=by_group,
        comm_total_by_group_s=total_by_group,
        compute_by_kind_s=bd.compute_by_kind_s,
        host_bound_s=bd.host_bound_s,
        model_flops_per_iteration=model_flops,
        pflops_total=flops_rate / 1e15,
        tflops_per_gpu=per_gpu / 1e12,
        percent_of_advertised_peak=100.0 * per_gpu / gpu.peak_flops,
        percent_of_empirical_peak=None if emp is None else 100.0 * per_gpu / emp,
        memory_per_gpu_bytes=mem_total,
        memory_breakdown_bytes={k: float(v) for k, v in memory.items() if k not in NOT_CATEGORIES},
        memory_capacity_bytes=gpu.memory_bytes,
        fits_in_memory=verdict.verdict != "does-not-fit",
        grid=dict(grid),
        parameters=dict(parameters),
        strategy=strategy,
        machine=machine,
        gpu=gpu.name,
        gpus=gpus,
        model=model_label(model_name, overrides),
        engine_mode=result.mode,
        network_model=result.network_model,
        wall_time_s=result.wall_time_s,
        events=result.events,
        ops_simulated=result.ops_processed,
        ops_represented=result.ops_represented,
        skipped_segments=result.skipped_segments,
        batch_tokens=batch_tokens,
        critical_rank=int(critical),
        busiest_links=busiest_links(topology, result.link_bytes, t),
        choices=list(choices or []),
        stages=stage_rows(tl, stages, t, known),
        comm_time_by_native_group_s={g: bd.exposed_by_group_s.get(g, 0.0) for g in native},
        comm_total_by_native_group_s={g: bd.comm_by_group_s.get(g, 0.0) for g in native},
        group_axes={g: group_aliases.get(g, g) for g in native},
        model_preset=model_name,
        model_overrides=overrides,
        model_custom=bool(overrides),
        kernel_terms=dict(kernel_terms or {}),
        memory_verdict=verdict.verdict,
        memory_lower_bytes=verdict.lower_bytes,
        memory_margin_bytes=verdict.margin_bytes,
        memory_top_terms=verdict.top_terms,
    )
