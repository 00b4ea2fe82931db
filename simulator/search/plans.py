"""Plan builders of the seed papers' other strategies, and their maximum batch.

Each builder resolves the strategy's open degrees and microbatch size (workloads/*
choose the smallest model-parallel degrees that fit in memory), builds the OpGraph and
maps its process groups onto the report's x / y / z / data contract (the mapping per
strategy is tabulated in workloads/strategies.py).
"""

from __future__ import annotations

from simulator.choices import Choice, memory_reason
from simulator.config import ExperimentConfig
from simulator.plan import PlanBuilder, StagePlan, WorkloadPlan, cluster_shape, training_setup
from topologies.hardware import GpuSpec
from topologies.types import Topology
from workloads.axonn.params import AxonnParallel
from workloads.axonn.workload import memory_for
from workloads.hybrid.configure import choose_setup
from workloads.hybrid.memory import hybrid_memory, max_batch_sequences, stage_memory
from workloads.hybrid.params import HybridParallel
from workloads.hybrid.setup import HybridSetup, stage_chunks
from workloads.hybrid.workload import build_hybrid_workload
from workloads.memory import largest_fitting
from workloads.models import TransformerSpec, model_flops_per_iteration
from workloads.optimus.memory import optimus_max_batch_sequences, optimus_memory
from workloads.optimus.params import OptimusParallel
from workloads.optimus.program import OptimusSetup
from workloads.optimus.workload import build_optimus_workload, choose_optimus_setup

ZERO_LEVEL_GROUPS = ("zpair", "zpair_x", "znode", "znode_x", "zinter")


def hybrid_aliases(setup: HybridSetup) -> dict[str, str]:
    """Strategy group -> report key (pipeline send/recv keeps its own 'pp' key)."""
    aliases = {"tp": "x", "shard": "z", "replicate": "data", "embed": "data", "amax": "data"}
    aliases["dp"] = "z" if setup.sharded else "data"
    aliases.update(dict.fromkeys(ZERO_LEVEL_GROUPS, "z"))
    return aliases


def hybrid_grid(setup: HybridSetup) -> dict[str, int]:
    """x = tensor parallel, z = shard group, data = replicas; 'pipeline' when pp > 1."""
    grid = {
        "x": setup.tp,
        "y": 1,
        "z": setup.shard if setup.sharded else 1,
        "data": setup.replicate if setup.sharded else setup.dp,
    }
    if setup.cp > 1:
        grid["context"] = setup.cp
    if setup.pp > 1:
        grid["pipeline"] = setup.pp
    return grid


def hybrid_stages(spec: TransformerSpec, setup: HybridSetup) -> tuple[StagePlan, ...]:
    """The pipeline stages of a setup (none without a pipeline)."""
    if setup.pp == 1:
        return ()
    per_stage = setup.world // setup.pp  # ranks are stage-major
    out = []
    for s in range(setup.pp):
        chunks = stage_chunks(spec, setup, s)
        out.append(
            StagePlan(
                stage=s,
                rank=s * per_stage,
                layers=sum(c.stop - c.start for c in chunks),
                embedding=any(c.first for c in chunks),
                head=any(c.last for c in chunks),
                memory_bytes=stage_memory(spec, setup, s).total,
            )
        )
    return tuple(out)


def hybrid_parameters(params: HybridParallel, setup: HybridSetup) -> dict[str, object]:
    """The strategy parameters as given, with the degrees and microbatching used."""
    out: dict[str, object] = dict(params.model_dump(mode="json"))
    out.update(
        tp=setup.tp,
        pp=setup.pp,
        dp=setup.dp,
        microbatch_sequences=setup.microbatch_sequences,
        microbatches=setup.microbatches,
        recompute=setup.recompute,
    )
    if setup.stage_layers:
        out["layers_per_stage"] = list(setup.stage_layers)
    if setup.sharded:
        out["shard"] = setup.shard
    return out


def resolve_hybrid(config: ExperimentConfig, topology: Topology, gpu: GpuSpec) -> HybridSetup:
    """The hybrid setup a config runs (open degrees and microbatch chosen)."""
    params = config.parallel
    if not isinstance(params, HybridParallel):  # pragma: no cover - dispatch guarantees it
        raise TypeError(f"not a hybrid strategy: {params.strategy}")
    spec = config.model.spec()
    return choose_setup(spec, params, training_setup(config), cluster_shape(config, topology, gpu))


def _hybrid_plan(
    config: ExperimentConfig, spec: TransformerSpec, topology: Topology, gpu: GpuSpec
) -> WorkloadPlan:
    params = config.parallel
    if not isinstance(params, HybridParallel):  # pragma: no cover - dispatch guarantees it
        raise TypeError(f"not a hybrid strategy: {params.strategy}")
    setup = resolve_hybrid(config, topology, gpu)
    memory = hybrid_memory(spec, setup).as_dict()
    return WorkloadPlan(
        graph=build_hybrid_workload(spec, setup),
        memory=memory,
        parameters=hybrid_parameters(params, setup),
        grid=hybrid_grid(setup),
        group_aliases=hybrid_aliases(setup),
        model_flops=model_flops_per_iteration(
            spec, config.training.batch_tokens, setup.recompute == "full"
        ),
        choices=hybrid_choices(config, setup, memory["total"], gpu.memory_bytes),
        stages=hybrid_stages(spec, setup),
    )


def hybrid_choices(
    config: ExperimentConfig, setup: HybridSetup, needed: float, capacity: float
) -> tuple[Choice, ...]:
    """The degrees a hybrid strategy left open and the microbatch, with their reasons
    (workloads/hybrid/configure.py: choose_setup's rules)."""
    params = config.parallel
    fits = needed <= capacity
    mem = memory_reason(needed, capacity)
    out = []
    chosen = {"tp": setup.tp, "pp": setup.pp, "shard": setup.shard}
    open_fields = [
        f for f in chosen if f in type(params).model_fields and getattr(params, f) is None
    ]
    if open_fields:
        value = " ".join(f"{f}={chosen[f]}" for f in open_fields)
        why = (
            f"the smallest model-parallel degrees whose memory fits ({mem})"
            if fits
            else f"no degrees fit in memory; these need the least ({mem})"
        )
        out.append(Choice("degrees", value, why))
    if config.training.microbatch_sequences is None:
        value = f"{setup.microbatch_sequences} sequences x {setup.microbatches} microbatches"
        why = "the largest microbatch that fits with these degrees"
        if setup.pp > 1:
            why += " keeping >= 4 microbatches per stage where possible (bubble <= ~20%)"
        out.append(Choice("microbatch", value, why if fits else f"none fits ({mem})"))
    return tuple(out)


def resolve_optimus(config: ExperimentConfig, topology: Topology, gpu: GpuSpec) -> OptimusSetup:
    """The Optimus setup a config runs (mesh side and microbatch chosen when open)."""
    params = config.parallel
    if not isinstance(params, OptimusParallel):  # pragma: no cover - dispatch guarantees it
        raise TypeError(f"not optimus: {params.strategy}")
    return choose_optimus_setup(
        config.model.spec(), params, training_setup(config), cluster_shape(config, topology, gpu)
    )


def _optimus_plan(
    config: ExperimentConfig, spec: TransformerSpec, topology: Topology, gpu: GpuSpec
) -> WorkloadPlan:
    params = config.parallel
    if not isinstance(params, OptimusParallel):  # pragma: no cover - dispatch guarantees it
        raise TypeError(f"not optimus: {params.strategy}")
    setup = resolve_optimus(config, topology, gpu)
    parameters: dict[str, object] = dict(params.model_dump(mode="json"))
    parameters.update(
        q=setup.q,
        data=setup.data,
        microbatch_sequences=setup.microbatch_sequences,
        microbatches=setup.microbatches,
    )
    memory = optimus_memory(spec, setup).as_dict()
    cap, fits = gpu.memory_bytes, memory["total"] <= gpu.memory_bytes
    choices = []
    if params.q is None:
        why = "the smallest mesh (q > 1 where the GPUs allow) that fits" if fits else "none fits"
        choices.append(
            Choice("mesh", f"q={setup.q}", f"{why} ({memory_reason(memory['total'], cap)})")
        )
    if config.training.microbatch_sequences is None:
        choices.append(
            Choice(
                "microbatch",
                f"{setup.microbatch_sequences} sequences x {setup.microbatches} microbatches",
                "the largest microbatch that fits on this mesh" if fits else "none fits",
            )
        )
    return WorkloadPlan(
        graph=build_optimus_workload(spec, setup),
        memory=memory,
        parameters=parameters,
        grid={"x": setup.q, "y": setup.q, "z": 1, "data": setup.data},
        group_aliases={"row": "x", "col": "y", "dp": "data"},
        model_flops=model_flops_per_iteration(
            spec, config.training.batch_tokens, config.training.activation_checkpointing
        ),
        choices=tuple(choices),
    )


STRATEGY_PLAN_BUILDERS: dict[str, PlanBuilder] = {
    **dict.fromkeys(
        (
            "megatron",
            "zero3",
            "fsdp",
            "hsdp",
            "deepspeed",
            "zeropp",
            "zeropp-hier",
            "fsdp-tp",
            "fsdp-pp",
        ),
        _hybrid_plan,
    ),
    "optimus": _optimus_plan,
}


def plan_max_batch_sequences(
    config: ExperimentConfig, plan: WorkloadPlan, topology: Topology, gpu: GpuSpec
) -> int:
    """The largest global batch (sequences) the plan's degrees fit without gradient
    accumulation (pipelines: pp microbatches); 0 if none fits."""
    spec = config.model.spec()
    cap = gpu.memory_bytes
    params = config.parallel
    if isinstance(params, AxonnParallel):
        return _axonn_max_batch(config, plan, spec, cap)
    if isinstance(params, OptimusParallel):
        return optimus_max_batch_sequences(spec, resolve_optimus(config, topology, gpu), cap)
    return max_batch_sequences(spec, resolve_hybrid(config, topology, gpu), cap)


def _axonn_max_batch(
    config: ExperimentConfig, plan: WorkloadPlan, spec: TransformerSpec, cap: float
) -> int:
    from workloads.axonn.params import Grid

    params = config.parallel
    if not isinstance(params, AxonnParallel):  # pragma: no cover - checked by the caller
        raise TypeError("not axonn")
    g = plan.grid
    grid = Grid(x=g["x"], y=g["y"], z=g["z"], data=g["data"])

    def fits(b: int) -> bool:
        return memory_for(spec, grid, params, training_setup(config), b).total <= cap

    return largest_fitting(fits) * grid.z * grid.data
