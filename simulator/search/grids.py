"""Configuration search for AxoNN: every valid 4D grid ranked by the analytical model, the
most promising re-ranked by a static replay of their programs, the best few simulated.

Valid grids: X·Y·Z·data = GPUs with each factor a divisor, model dimensions divisible as
the layers require, the batch divisible by data·Z, and the model states plus one
microbatch fitting in GPU memory. Each grid is evaluated with the microbatch size
`simulate` would pick (the largest that fits). Unless the config fixes the weight
lifetime, a grid is also tried with weight caching (Megatron-AxoNN's cache) for as many
blocks as fit beside that microbatch: caching is a searched knob under the memory limit.

Three stages, each cheaper per candidate than the next:
1. `rank_grids`: the analytical model (simulator/search/analytical.py) over every candidate —
   every collective of the program on its group's measured bandwidth;
2. `screen_candidates`: the `screen` best of them replayed statically
   (simulator/search/estimate.py): compute from the kernel model, overlap as issued;
3. `simulate_candidates` (simulator/trials/simulated.py): the `top` best of the replay
   simulated; the fastest wins.
The paper's procedure is stage 1 then 3 (its top 10); stage 2 catches grids whose
communication hides (or fails to hide) behind compute differently than their volume says.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from simulator.config import ExperimentConfig
from simulator.errors import ConfigError
from simulator.search.analytical import (
    BandwidthFn,
    PaperBandwidths,
    TopologyBandwidths,
    axonn_comm_estimate,
    inner_products,
    own_sizes,
)
from topologies.hardware import GpuSpec
from workloads.axonn.params import AxonnParallel, Grid
from workloads.axonn.workload import (
    TrainingSetup,
    axonn_calls,
    build_axonn_workload,
    check_grid,
    choose_microbatch,
    memory_for,
)
from workloads.errors import WorkloadError
from workloads.models import TransformerSpec
from workloads.ops import bus_factor
from workloads.run import divisors

if TYPE_CHECKING:
    from simulator.engine.compiled import CommInfo
    from simulator.search.estimate import PricedComm
    from topologies.types import Topology

DEFAULT_SCREEN = 40  # candidates replayed statically (stage 2), a few seconds at 32,768 GPUs


@dataclass(frozen=True)
class Candidate:
    """One grid and weight policy with its modelled, estimated and simulated cost."""

    grid: Grid
    microbatch_sequences: int
    microbatches: int
    memory_bytes: float
    model_comm_time_s: float
    model_comm_by_group_s: dict[str, float]
    weight_lifetime: str | None = None  # None: the implementation's own
    cached_layers: int | None = None
    model_rank: int = 0
    estimated_iteration_time_s: float | None = None
    estimated_rank: int | None = None
    simulated_iteration_time_s: float | None = None
    simulated_rank: int | None = None

    def params(self, base: AxonnParallel) -> AxonnParallel:
        """The parallel settings this candidate stands for."""
        return base.model_copy(
            update={
                "grid": self.grid,
                "weight_lifetime": self.weight_lifetime,
                "cached_layers": self.cached_layers,
            }
        )

    @property
    def label(self) -> str:
        g = self.grid
        cache = f", cache {self.cached_layers}" if self.cached_layers else ""
        return f"{g.x},{g.y},{g.z},{g.data}{cache}"

    def as_dict(self) -> dict[str, object]:
        g = self.grid
        return {
            "grid": {"x": g.x, "y": g.y, "z": g.z, "data": g.data},
            "weight_lifetime": self.weight_lifetime,
            "cached_layers": self.cached_layers,
            "microbatch_sequences": self.microbatch_sequences,
            "microbatches": self.microbatches,
            "memory_per_gpu_bytes": self.memory_bytes,
            "model_comm_time_s": self.model_comm_time_s,
            "model_comm_by_group_s": self.model_comm_by_group_s,
            "model_rank": self.model_rank,
            "estimated_iteration_time_s": self.estimated_iteration_time_s,
            "estimated_rank": self.estimated_rank,
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

    return _measurable(
        TopologyBandwidths(config.cluster.machine, gpus_per_node, build, config.engine.network)
    )


UNMEASURABLE_BPS = 1.0
"""Bandwidth given to groups the topology probe cannot measure (ranks them last)."""


def _measurable(bw: BandwidthFn) -> BandwidthFn:
    """The topology bandwidths, except that a group the probe cannot place (its machine
    fails to build) gets UNMEASURABLE_BPS instead of failing the whole ranking: such
    grids go to the end of the model's order."""

    def beta(inner: int, own: int) -> float:
        try:
            return bw(inner, own)
        except ConfigError:
            return UNMEASURABLE_BPS

    return beta


def _most_cached_layers(
    spec: TransformerSpec,
    grid: Grid,
    params: AxonnParallel,
    training: TrainingSetup,
    mbs: int,
    capacity: float,
) -> int:
    """The most blocks whose gathered weights fit in memory beside microbatch `mbs` (memory
    grows with every cached block, so bisect)."""

    def fits(k: int) -> bool:
        p = params.model_copy(update={"weight_lifetime": "cache", "cached_layers": k})
        return memory_for(spec, grid, p, training, mbs).total <= capacity

    lo, hi = 0, spec.layers
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _candidate(
    spec: TransformerSpec,
    grid: Grid,
    params: AxonnParallel,
    training: TrainingSetup,
    mbs: int,
    micro: int,
    bandwidth: BandwidthFn,
) -> Candidate:
    est = axonn_comm_estimate(axonn_calls(spec, grid, params, training, mbs), micro, bandwidth)
    mem = memory_for(spec, grid, params, training, mbs).total
    return Candidate(
        grid,
        mbs,
        micro,
        mem,
        est.total_s,
        est.by_group_s,
        params.weight_lifetime,
        params.cached_layers,
    )


def feasible_candidate(
    spec: TransformerSpec,
    grid: Grid,
    params: AxonnParallel,
    training: TrainingSetup,
    gpu: GpuSpec,
    bandwidth: BandwidthFn,
) -> Candidate | None:
    """The grid as a candidate with the microbatch `simulate` would pick (the largest that
    fits), or None when the grid is invalid for the model or its smallest microbatch
    does not fit in memory."""
    try:
        per_gpu = check_grid(spec, grid, params, training, grid.size)
    except WorkloadError:
        return None
    if memory_for(spec, grid, params, training, 1).total > gpu.memory_bytes:
        return None
    mbs = training.microbatch_sequences or choose_microbatch(
        spec, grid, params, training, per_gpu, gpu.memory_bytes
    )
    if per_gpu % mbs:
        return None
    return _candidate(spec, grid, params, training, mbs, per_gpu // mbs, bandwidth)


def rank_grids(
    spec: TransformerSpec,
    params: AxonnParallel,
    training: TrainingSetup,
    gpus: int,
    gpu: GpuSpec,
    bandwidth: BandwidthFn,
) -> list[Candidate]:
    """All valid, memory-feasible candidates, best first by the analytical model."""
    out: list[Candidate] = []
    search_cache = params.weight_lifetime is None
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
        out.append(_candidate(spec, grid, params, training, mbs, micro, bandwidth))
        if search_cache and grid.z > 1:
            k = _most_cached_layers(spec, grid, params, training, mbs, gpu.memory_bytes)
            if k > 0:
                cached = params.model_copy(update={"weight_lifetime": "cache", "cached_layers": k})
                out.append(_candidate(spec, grid, cached, training, mbs, micro, bandwidth))
    out.sort(
        key=lambda c: (c.model_comm_time_s, c.grid.z, c.grid.y, c.grid.x, c.cached_layers or 0)
    )
    return [replace(c, model_rank=i + 1) for i, c in enumerate(out)]


def analytical_comm_time(grid: Grid, bandwidth: BandwidthFn) -> Callable[[CommInfo], float]:
    """A collective's time alone on its group's bandwidth: bus factor x bytes / β (the
    analytical model's price of one call)."""
    inner, own = inner_products(grid), own_sizes(grid)
    beta: dict[str, float] = {}

    def time_s(info: CommInfo) -> float:
        p = own.get(info.group, 1)
        if p <= 1:
            return 0.0
        if info.group not in beta:
            beta[info.group] = bandwidth(inner[info.group], p)
        return bus_factor(info.kind, p) * info.nbytes / beta[info.group]

    return time_s


def screen_candidates(
    config: ExperimentConfig,
    candidates: list[Candidate],
    screen: int,
    bandwidth: BandwidthFn,
    gpu: GpuSpec,
    priced: PricedComm | None = None,
) -> list[Candidate]:
    """Replay the first `screen` candidates' programs statically and put them in the order
    of their estimated iteration time (the rest follow in the model's order). Collectives
    cost `priced`'s price (the run's pricer, every instance at once) or, without it, the
    analytical one on `bandwidth`; communicators sharing the compute stream's hardware
    queue hold compute as the engine makes them (simulator/cost/interference.py)."""
    from simulator.cost.interference import comm_stream_order, serialised_streams, stream_setup
    from simulator.plan import training_setup
    from simulator.search.estimate import replay_iteration_s
    from workloads.axonn.grid import axonn_groups

    if screen <= 0 or not candidates:
        return candidates
    kernels = _kernel_model(config, gpu)
    base = config.parallel
    assert isinstance(base, AxonnParallel)
    spec, training = config.model.spec(), training_setup(config)
    machine = config.cluster.machine
    head, tail = candidates[:screen], candidates[screen:]
    estimated = []
    for c in head:
        graph = build_axonn_workload(spec, c.params(base), c.grid, training, c.microbatch_sequences)
        program = graph.programs[0]
        serial = serialised_streams(
            comm_stream_order(program), gpu.vendor, stream_setup(graph.metadata), machine
        )
        comm = (
            priced.for_groups(axonn_groups(c.grid))
            if priced is not None
            else analytical_comm_time(c.grid, bandwidth)
        )
        t = replay_iteration_s(program, kernels, comm, serial)
        estimated.append(replace(c, estimated_iteration_time_s=t))
    estimated.sort(key=lambda c: (c.estimated_iteration_time_s, c.model_rank))
    estimated = [replace(c, estimated_rank=i + 1) for i, c in enumerate(estimated)]
    return estimated + tail


def priced_comm(config: ExperimentConfig, topology: Topology | None = None) -> PricedComm:
    """The run's collective pricer on its machine (built here unless given), for the
    screen's `PricedComm`."""
    from simulator.build import build_topology
    from simulator.cost.calibration import load_calibration
    from simulator.network.params import network_params_for
    from simulator.network.pricing import CollectivePricer
    from simulator.search.estimate import PricedComm

    topo = topology if topology is not None else build_topology(config.cluster)
    calibration = load_calibration(config.engine.calibration) if config.engine.calibration else None
    algorithm = config.engine.collective_algorithm
    pricer = CollectivePricer(
        topo,
        network_params_for(topo),
        algorithm,
        calibration=calibration,
        gpu=config.cluster.gpu or topo.gpu_type,
    )
    return PricedComm(pricer, None if algorithm == "auto" else algorithm)


def _kernel_model(config: ExperimentConfig, gpu: GpuSpec) -> Any:
    from simulator.cost.calibration import load_calibration
    from simulator.cost.kernels import KernelModel

    calibration = None
    if config.engine.calibration:
        calibration = load_calibration(config.engine.calibration)
    return KernelModel(
        gpu, calibration=calibration, attention_kernel=config.training.attention_kernel
    )


def search_training(config: ExperimentConfig) -> TrainingSetup:
    from simulator.plan import training_setup

    return training_setup(config)
