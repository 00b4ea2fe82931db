"""From the experiment config to a workload: strategy dispatch, grid and microbatch choice.

Each strategy returns a `WorkloadPlan`: the OpGraph, its memory per GPU and the
parameters actually used (a chosen grid, microbatch size). `group_aliases` maps the
strategy's process groups onto the report's X/Y/Z/data contract.
"""

from __future__ import annotations

from simulator.config import ExperimentConfig
from simulator.plan import PlanBuilder, WorkloadPlan, training_setup
from simulator.search.plans import STRATEGY_PLAN_BUILDERS
from topologies.hardware import GpuSpec
from topologies.types import Topology
from workloads.axonn.params import AxonnParallel
from workloads.models import TransformerSpec, model_flops_per_iteration
from workloads.run import TrainingSetup

__all__ = ["PLAN_BUILDERS", "PlanBuilder", "WorkloadPlan", "build_plan"]


def _axonn_plan(
    config: ExperimentConfig, spec: TransformerSpec, topology: Topology, gpu: GpuSpec
) -> WorkloadPlan:
    from workloads.axonn.workload import (
        build_axonn_workload,
        check_grid,
        choose_microbatch,
        memory_for,
    )

    params = config.parallel
    assert isinstance(params, AxonnParallel)
    t = config.training
    training = training_setup(config)
    gpus = topology.num_gpus if config.cluster.num_gpus is None else config.cluster.num_gpus
    if params.grid is None:
        params = _default_choice(config, spec, params, training, gpus, topology, gpu)
    grid = params.grid
    assert grid is not None
    per_gpu = check_grid(spec, grid, params, training, gpus)
    mbs = t.microbatch_sequences or choose_microbatch(
        spec, grid, params, training, per_gpu, gpu.memory_bytes
    )
    graph = build_axonn_workload(spec, params, grid, training, mbs)
    memory = memory_for(spec, grid, params, training, mbs).as_dict()
    return WorkloadPlan(
        graph=graph,
        memory=memory,
        parameters={
            "strategy": "axonn",
            "grid": {"x": grid.x, "y": grid.y, "z": grid.z, "data": grid.data},
            "microbatch_sequences": mbs,
            "microbatches": per_gpu // mbs,
            "overlap": list(params.overlap),
            "implementation": params.implementation,
            "weight_lifetime": graph.metadata["weight_lifetime"],
            "cached_layers": graph.metadata["cached_layers"],
            "expert_mode": params.expert_mode,
        },
        grid={"x": grid.x, "y": grid.y, "z": grid.z, "data": grid.data},
        group_aliases={"x": "x", "y": "y", "z": "z", "data": "data"},
        model_flops=model_flops_per_iteration(spec, t.batch_tokens, t.activation_checkpointing),
    )


def _default_choice(
    config: ExperimentConfig,
    spec: TransformerSpec,
    params: AxonnParallel,
    training: TrainingSetup,
    gpus: int,
    topology: Topology,
    gpu: GpuSpec,
) -> AxonnParallel:
    """The search's choice without simulating (simulator/search/grids.py stages 1 and 2): the
    grid, and the weight cache where it helps and the lifetime is not fixed; the simple
    heuristic grid for custom topologies, where sub-machines cannot be built to measure
    group bandwidths."""
    from workloads.axonn.workload import heuristic_grid

    if config.cluster.machine != "custom":
        from simulator.search.grids import (
            DEFAULT_SCREEN,
            bandwidth_provider,
            rank_grids,
            screen_candidates,
        )

        bandwidth = bandwidth_provider(config, "topology", topology.gpus_per_node)
        ranked = rank_grids(spec, params, training, gpus, gpu, bandwidth)
        if ranked:
            best = screen_candidates(config, ranked, DEFAULT_SCREEN, bandwidth, gpu)[0]
            return best.params(params)
    grid = heuristic_grid(spec, params, training, gpus, topology.gpus_per_node, gpu.memory_bytes)
    return params.model_copy(update={"grid": grid})


PLAN_BUILDERS: dict[str, PlanBuilder] = {"axonn": _axonn_plan, **STRATEGY_PLAN_BUILDERS}


def build_plan(config: ExperimentConfig, topology: Topology, gpu: GpuSpec) -> WorkloadPlan:
    """The workload plan of the configured strategy."""
    spec = config.model.spec()
    builder = PLAN_BUILDERS[config.parallel.strategy]
    return builder(config, spec, topology, gpu)
