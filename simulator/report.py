"""The Report: pure data describing one simulated iteration (rendered elsewhere).

`Report.to_json()` is the `axsim simulate --json` contract that scripts and sweeps rely
on; keys are stable: iteration_time_s, compute_time_s, exposed_comm_time_s,
overlapped_comm_time_s, comm_time_by_group_s (x, y, z, data), model_flops_per_iteration,
pflops_total, tflops_per_gpu, percent_of_advertised_peak, percent_of_empirical_peak,
memory_per_gpu_bytes, fits_in_memory, grid (x, y, z, data), machine, gpus, model,
engine_mode, wall_time_s, events (plus extra detail keys).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import cast

import numpy as np

from simulator.analysis import with_skipped_periods
from simulator.engine.core import EngineResult
from simulator.engine.periodic import Warp
from topologies.hardware import GpuSpec
from topologies.types import Topology

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
class Report:
    iteration_time_s: float
    compute_time_s: float
    exposed_comm_time_s: float
    overlapped_comm_time_s: float
    comm_time_by_group_s: dict[str, float]
    comm_total_by_group_s: dict[str, float]
    compute_by_kind_s: dict[str, float]
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

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d["memory_per_gpu_GB"] = self.memory_per_gpu_bytes / 1e9
        return d


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
) -> Report:
    """Summarise an engine result (breakdowns on the rank that finishes last)."""
    tl = result.timeline
    critical = max(tl.ranks, key=lambda r: float(tl.rank(r).end_s.max(initial=0.0)))
    rank_tl = tl.rank(critical)
    # the engine lists the skipped periods of the ranks whose records stand for them
    warps = cast("dict[int, list[Warp]]", tl.metadata.get("warps", {}))
    rep = critical if tl.representative is None else int(tl.representative[critical])
    bd = with_skipped_periods(rank_tl, warps.get(rep, []))
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
    flops_rate = model_flops / t if t > 0 else 0.0
    per_gpu = flops_rate / gpus if gpus else 0.0
    emp = gpu.empirical_gemm_flops
    mem_total = float(memory.get("total", 0.0))
    return Report(
        iteration_time_s=t,
        compute_time_s=bd.compute_s,
        exposed_comm_time_s=bd.exposed_comm_s,
        overlapped_comm_time_s=bd.overlapped_comm_s,
        comm_time_by_group_s=by_group,
        comm_total_by_group_s=total_by_group,
        compute_by_kind_s=bd.compute_by_kind_s,
        model_flops_per_iteration=model_flops,
        pflops_total=flops_rate / 1e15,
        tflops_per_gpu=per_gpu / 1e12,
        percent_of_advertised_peak=100.0 * per_gpu / gpu.peak_flops,
        percent_of_empirical_peak=None if emp is None else 100.0 * per_gpu / emp,
        memory_per_gpu_bytes=mem_total,
        memory_breakdown_bytes={k: float(v) for k, v in memory.items() if k != "total"},
        memory_capacity_bytes=gpu.memory_bytes,
        fits_in_memory=mem_total <= gpu.memory_bytes,
        grid=dict(grid),
        parameters=dict(parameters),
        strategy=strategy,
        machine=machine,
        gpu=gpu.name,
        gpus=gpus,
        model=model_name,
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
    )
