"""From the experiment config to a workload: strategy dispatch, grid and microbatch choice.

Each strategy returns a `WorkloadPlan`: the OpGraph, its memory per GPU and the
parameters actually used (a chosen grid, microbatch size). `group_aliases` maps the
strategy's process groups onto the report's X/Y/Z/data contract.
"""

from __future__ import annotations

from simulator.config import ExperimentConfig
from simulator.plan import PlanBuilder, WorkloadPlan
from simulator.strategy_plans import STRATEGY_PLAN_BUILDERS
from topologies.hardware import GpuSpec
from topologies.types import Topology
from workloads.axonn.params import AxonnParallel
from workloads.models import TransformerSpec, model_flops_per_iteration

__all__ = ["PLAN_BUILDERS", "PlanBuilder", "WorkloadPlan", "build_plan"]


def _axonn_plan(
    config: ExperimentConfig, spec: TransformerSpec, topology: Topology, gpu: GpuSpec
) -> WorkloadPlan:
    from workloads.axonn.workload import (
        TrainingSetup,
        build_axonn_workload,
        check_grid,
        choose_microbatch,
        heuristic_grid,
        memory_for,
    )

    params = config.parallel
    assert isinstance(params, AxonnParallel)
    t = config.training
    training = TrainingSetup(
        t.batch_tokens, t.microbatch_sequences, t.activation_checkpointing, t.optimizer
    )
    gpus = topology.num_gpus if config.cluster.num_gpus is None else config.cluster.num_gpus
    grid = params.grid or heuristic_grid(
        spec, params, training, gpus, topology.gpus_per_node, gpu.memory_bytes
    )
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
            "cache_weights": params.cache_weights,
            "expert_mode": params.expert_mode,
        },
        grid={"x": grid.x, "y": grid.y, "z": grid.z, "data": grid.data},
        group_aliases={"x": "x", "y": "y", "z": "z", "data": "data"},
        model_flops=model_flops_per_iteration(spec, t.batch_tokens, t.activation_checkpointing),
    )


PLAN_BUILDERS: dict[str, PlanBuilder] = {"axonn": _axonn_plan, **STRATEGY_PLAN_BUILDERS}


def build_plan(config: ExperimentConfig, topology: Topology, gpu: GpuSpec) -> WorkloadPlan:
    """The workload plan of the configured strategy."""
    spec = config.model.spec()
    builder = PLAN_BUILDERS[config.parallel.strategy]
    return builder(config, spec, topology, gpu)
