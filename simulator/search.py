"""Configuration search for AxoNN: every valid 4D grid ranked by the analytical model, the
top K simulated.

Valid grids: X·Y·Z·data = GPUs with each factor a divisor, model dimensions divisible as
the layers require, the batch divisible by data·Z, and the model states plus one
microbatch fitting in GPU memory. Each grid is evaluated with the microbatch size
`simulate` would pick (the largest that fits), and the analytical model counts its Z
collectives once per microbatch (exactly the paper's model for one microbatch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from simulator.analytical import (
    BandwidthFn,
    PaperBandwidths,
    TopologyBandwidths,
    axonn_comm_estimate,
)
from simulator.config import ExperimentConfig
from simulator.errors import ConfigError
from topologies.hardware import GpuSpec
from workloads.axonn.params import AxonnParallel, Grid
from workloads.axonn.workload import (
    TrainingSetup,
    axonn_calls,
    check_grid,
    choose_microbatch,
    memory_for,
)
from workloads.errors import WorkloadError
from workloads.models import TransformerSpec
from workloads.run import divisors

if TYPE_CHECKING:
    from simulator.api import Result


@dataclass(frozen=True)
class Candidate:
    """One grid with its modelled (and, if simulated, simulated) cost."""

    grid: Grid
    microbatch_sequences: int
    microbatches: int
    memory_bytes: float
    model_comm_time_s: float
    model_comm_by_group_s: dict[str, float]
    model_rank: int = 0
    simulated_iteration_time_s: float | None = None
    simulated_rank: int | None = None

    def as_dict(self) -> dict[str, object]:
        g = self.grid
        return {
            "grid": {"x": g.x, "y": g.y, "z": g.z, "data": g.data},
            "microbatch_sequences": self.microbatch_sequences,
            "microbatches": self.microbatches,
            "memory_per_gpu_bytes": self.memory_bytes,
            "model_comm_time_s": self.model_comm_time_s,
            "model_comm_by_group_s": self.model_comm_by_group_s,
            "model_rank": self.model_rank,
            "simulated_iteration_time_s": self.simulated_iteration_time_s,
            "simulated_rank": self.simulated_rank,
        }


def all_grids(gpus: int) -> list[Grid]:
    """Every (x, y, z, data) with x·y·z·data = gpus."""
    out = []
    for x in divisors(gpus):
        for y in divisors(gpus // x):
            for z in divisors(gpus // (x * y)):
                out.append(Grid(x=x, y=y, z=z, data=gpus // (x * y * z)))
    return out


def bandwidth_provider(config: ExperimentConfig, source: str, gpus_per_node: int) -> BandwidthFn:
    """'topology' (axsim's collective model on the machine) or 'paper' (the paper's table)."""
    if source == "paper":
        return PaperBandwidths(config.cluster.machine)
    if source != "topology":
        raise ConfigError(f"--bandwidths must be 'topology' or 'paper', got '{source}'")
    from simulator.build import build_topology

    def build(nodes: int):
        return build_topology(config.cluster.model_copy(update={"nodes": nodes, "gpus": None}))

    return TopologyBandwidths(config.cluster.machine, gpus_per_node, build, config.engine.network)


def rank_grids(
    spec: TransformerSpec,
    params: AxonnParallel,
    training: TrainingSetup,
    gpus: int,
    gpu: GpuSpec,
    bandwidth: BandwidthFn,
) -> list[Candidate]:
    """All valid, memory-feasible grids, best first by the analytical model."""
    out: list[Candidate] = []
    for grid in all_grids(gpus):
        try:
            per_gpu = check_grid(spec, grid, params, training, gpus)
        except WorkloadError:
            continue
        if memory_for(spec, grid, params, training, 1).total > gpu.memory_bytes:
            continue
        mbs = training.microbatch_sequences or choose_microbatch(
            spec, grid, params, training, per_gpu, gpu.memory_bytes
        )
        if per_gpu % mbs:
            continue
        micro = per_gpu // mbs
        est = axonn_comm_estimate(axonn_calls(spec, grid, params, training, mbs), micro, bandwidth)
        mem = memory_for(spec, grid, params, training, mbs).total
        out.append(Candidate(grid, mbs, micro, mem, est.total_s, est.by_group_s))
    out.sort(key=lambda c: (c.model_comm_time_s, c.grid.z, c.grid.y, c.grid.x))
    return [replace(c, model_rank=i + 1) for i, c in enumerate(out)]


def simulate_candidates(
    config: ExperimentConfig,
    candidates: list[Candidate],
    top: int,
    on_done: Callable[[int, int], None] | None = None,
) -> tuple[list[Candidate], Result | None]:
    """Simulate the first `top` candidates; returns all candidates (simulated ranks set)
    and the Result of the best simulated one."""
    from simulator.api import simulate

    chosen = candidates[:top]
    results = []
    for i, c in enumerate(chosen):
        g = c.grid
        cfg = config.model_copy(
            update={
                "parallel": config.parallel.model_copy(update={"grid": g}),
                "training": config.training.model_copy(
                    update={"microbatch_sequences": c.microbatch_sequences}
                ),
            }
        )
        results.append(simulate(cfg))
        if on_done:
            on_done(i + 1, len(chosen))
    times = [r.report.iteration_time_s for r in results]
    order = sorted(range(len(chosen)), key=lambda i: times[i])
    sim_rank = {i: r + 1 for r, i in enumerate(order)}
    updated = [
        replace(c, simulated_iteration_time_s=times[i], simulated_rank=sim_rank[i])
        if i < len(chosen)
        else c
        for i, c in enumerate(candidates)
    ]
    best = results[order[0]] if results else None
    return updated, best


def search_training(config: ExperimentConfig) -> TrainingSetup:
    from simulator.plan import training_setup

    return training_setup(config)
