"""From the experiment config to a workload: strategy dispatch, grid and microbatch choice.

Each strategy returns a `WorkloadPlan`: the OpGraph, its memory per GPU and the
parameters actually used (a chosen grid, microbatch size). `group_aliases` maps the
strategy's process groups onto the report's X/Y/Z/data contract.
"""

from __future__ import annotations

from simulator.choices import Choice, memory_reason
from simulator.config import ExperimentConfig
from simulator.plan import PlanBuilder, WorkloadPlan, training_setup
from simulator.search.plans import STRATEGY_PLAN_BUILDERS
from topologies.hardware import GpuSpec, gpu_catalogue
from topologies.types import Topology
from workloads.axonn.params import AxonnParallel
from workloads.errors import WorkloadError
from workloads.models import TransformerSpec, model_flops_per_iteration
from workloads.run import TrainingSetup
from workloads.strategies import check_model_support

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
    choices: list[Choice] = []
    if params.grid is None:
        params, chosen = _default_choice(config, spec, params, training, gpus, topology, gpu)
        choices += chosen
    grid = params.grid
    assert grid is not None
    per_gpu = check_grid(spec, grid, params, training, gpus)
    mbs = t.microbatch_sequences or choose_microbatch(
        spec, grid, params, training, per_gpu, gpu.memory_bytes
    )
    graph = build_axonn_workload(spec, params, grid, training, mbs)
    memory = memory_for(spec, grid, params, training, mbs).as_dict()
    if t.microbatch_sequences is None:
        choices.append(_axonn_microbatch_choice(mbs, per_gpu, memory["total"], gpu))
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
        choices=tuple(choices),
    )


def _axonn_microbatch_choice(mbs: int, per_gpu: int, needed: float, gpu: GpuSpec) -> Choice:
    n = per_gpu // mbs
    value = f"{mbs} sequence{'s' if mbs > 1 else ''} x {n} microbatch{'es' if n > 1 else ''}"
    cap = gpu.memory_bytes
    if needed <= cap:
        why = f"the largest divisor of the {per_gpu} sequences per GPU that fits ({memory_reason(needed, cap)})"
    else:
        why = f"no microbatch fits; the smallest needs {memory_reason(needed, cap)}"
    return Choice("microbatch", value, why)


def _default_choice(
    config: ExperimentConfig,
    spec: TransformerSpec,
    params: AxonnParallel,
    training: TrainingSetup,
    gpus: int,
    topology: Topology,
    gpu: GpuSpec,
) -> tuple[AxonnParallel, list[Choice]]:
    """The search's choice without simulating (simulator/search/grids.py stages 1 and 2): the
    grid, and the weight cache where it helps and the lifetime is not fixed; the simple
    heuristic grid for custom topologies, where sub-machines cannot be built to measure
    group bandwidths. With the reasons, for the report's choices."""
    from workloads.axonn.workload import heuristic_grid

    if config.cluster.machine != "custom":
        from simulator.search.grids import (
            DEFAULT_SCREEN,
            bandwidth_provider,
            priced_comm,
            rank_grids,
            screen_candidates,
        )

        bandwidth = bandwidth_provider(config, "topology", topology.gpus_per_node)
        ranked = rank_grids(spec, params, training, gpus, gpu, bandwidth)
        if ranked:
            priced = priced_comm(config, topology)
            screened = screen_candidates(config, ranked, DEFAULT_SCREEN, bandwidth, gpu, priced)
            best = screened[0]
            replayed = min(DEFAULT_SCREEN, len(ranked))
            how = (
                f"best of the analytical model's top {replayed} of {len(ranked)} valid, "
                f"memory-feasible grids replayed statically ({best.estimated_iteration_time_s:.3f} s "
                f"estimated, every collective priced by axsim's collective model on "
                f"{config.cluster.machine} at its group's real size; ranking by AxoNN's "
                f"Eqs. 1-7; `axsim search` simulates the top ones)"
                if best.estimated_iteration_time_s is not None
                else f"the analytical model's best of {len(ranked)} valid, memory-feasible grids "
                f"(AxoNN's Eqs. 1-7, group bandwidths from axsim's collective model on "
                f"{config.cluster.machine}: {best.model_comm_time_s:.3f} s of communication "
                "predicted; `axsim search` simulates the top ones)"
            )
            chosen = best.params(params)
            choices = [Choice("grid", str(best.grid), how)]
            if (
                params.weight_lifetime is None
            ):  # the search tried caching (simulator/search/grids.py)
                cached = chosen.cached_layers or 0
                value = (
                    f"cache {cached} layer{'s' if cached != 1 else ''}"
                    if chosen.weight_lifetime == "cache"
                    else f"the {params.implementation} implementation's own"
                )
                choices.append(
                    Choice(
                        "weight lifetime",
                        value,
                        "searched with the grid under the memory limit; this candidate ranked first",
                    )
                )
            return chosen, choices
        why = "no grid is memory-feasible for the analytical ranking; the heuristic grid"
    else:
        why = "custom topology (no sub-machines to measure group bandwidths): the heuristic grid"
    grid = heuristic_grid(spec, params, training, gpus, topology.gpus_per_node, gpu.memory_bytes)
    reason = f"{why}, the smallest tensor-parallel size whose model states fit, X inside a node"
    return params.model_copy(update={"grid": grid}), [Choice("grid", str(grid), reason)]


PLAN_BUILDERS: dict[str, PlanBuilder] = {"axonn": _axonn_plan, **STRATEGY_PLAN_BUILDERS}


def build_plan(config: ExperimentConfig, topology: Topology, gpu: GpuSpec) -> WorkloadPlan:
    """The workload plan of the configured strategy (its programs within one op budget,
    workloads.builder.MAX_BUILT_OPS, so no value inside the config's bounds builds for
    hours)."""
    from workloads.builder import op_budget

    spec = config.model.spec()
    check_model_support(spec, config.parallel.strategy)
    if spec.fp8 and not gpu.has_fp8:
        fp8_gpus = ", ".join(n for n, g in gpu_catalogue().items() if g.has_fp8)
        raise WorkloadError(
            f"model.dtype fp8 needs FP8 tensor cores ({fp8_gpus}); the {gpu.name} has none"
        )
    builder = PLAN_BUILDERS[config.parallel.strategy]
    with op_budget():
        return builder(config, spec, topology, gpu)
