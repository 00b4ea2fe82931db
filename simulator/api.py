"""The Python API: everything the CLI does is one call from here.

from simulator.api import simulate
from simulator.config import load_config
result = simulate(load_config())           # the embedded default
print(result.report.iteration_time_s)
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from simulator.build import build_cost_model, build_gpu_mix, build_topology
from simulator.choices import Choice, algorithm_choices
from simulator.config import ExperimentConfig
from simulator.cost.interference import InterferenceModel
from simulator.cost.kernels import KernelModel
from simulator.cost.model import CostModel, GpuCompute
from simulator.cost.terms import Interference
from simulator.engine.core import Engine, EngineResult, ProgressFn
from simulator.errors import ConfigError, CostModelError
from simulator.network.params import network_params_for
from simulator.outputs.report import Report, build_report, model_overrides
from simulator.workload import WorkloadPlan, build_plan
from topologies.hardware import GpuSpec, gpu_spec
from topologies.types import Topology

if TYPE_CHECKING:  # the calibration models load only when a file is given
    from simulator.cost.calibration import Calibration


@dataclass(eq=False)
class Result:
    """A finished simulation: its inputs, the engine output and the report."""

    config: ExperimentConfig
    topology: Topology
    plan: WorkloadPlan
    engine: EngineResult
    report: Report


def run_choices(
    plan: WorkloadPlan, engine: Engine, decisions: dict[Hashable, tuple[str, dict[str, float]]]
) -> list[Choice]:
    """Every automatic choice of a run: the plan's, the engine mode and the tuner's."""
    mode = Choice("engine mode", engine.view.mode, engine.view.reason)
    sizes = {name: kind.size for name, kind in plan.graph.groups.items()}
    queues = [
        Choice(
            "hardware queue",
            ", ".join(sorted(streams)),
            "shares the compute stream's HIP hardware queue (GPU_MAX_HW_QUEUES "
            "streams per priority, taken in creation order), so its collectives run "
            "between compute kernels instead of beside them",
        )
        for streams in sorted(set(engine.serialised.values()), key=sorted)
    ]
    return [
        *plan.choices,
        mode,
        *queues,
        *algorithm_choices(decisions, plan.group_aliases, sizes),
    ]


def interference_model(kernels: KernelModel, gpu: GpuSpec, topology: Topology) -> InterferenceModel:
    """The interference mechanism of a GPU in a machine (simulator/cost/interference.py),
    with the kernel model's achievable HBM bandwidth and GEMM curve."""
    machine = topology.metadata.get("machine")
    return InterferenceModel.for_gpu(
        gpu,
        str(machine) if machine else None,
        kernels.hbm_Bps,
        kernels.efficiency_on,
        kernels.gemm_tiles,
    )


def kernel_terms(kernels: KernelModel, cost: CostModel) -> dict[str, object]:
    """What the kernel model priced with, and how interference was priced."""
    out = kernels.describe()
    if cost.interference is not None:
        out["interference"] = {"mechanism": cost.interference.describe()}
    if cost.queues is not None:
        out["hardware_queues"] = cost.queues.vendor
    return out


def calibrated_what_ifs(
    config: ExperimentConfig, calibration: Calibration | None, gpu: str
) -> list[Choice]:
    """Say so when bandwidth what-ifs meet calibrated collectives: a table gives the time
    measured on the measured hardware, so a what-if that changes the links of its tier
    does not change that time (only how it shares links with other traffic)."""
    g = calibration.for_gpu(gpu) if calibration is not None else None
    if g is None or not g.collectives:
        return []
    c = config.cluster
    by_tier = {
        "intra_node": [f"cluster.intra_node_bandwidth_scale={c.intra_node_bandwidth_scale:g}"]
        if c.intra_node_bandwidth_scale != 1.0
        else [],
        "inter_node": [
            f"cluster.{k}={v:g}"
            for k, v in (
                ("nic_bandwidth_GBps", c.nic_bandwidth_GBps),
                ("fabric_link_bandwidth_GBps", c.fabric_link_bandwidth_GBps),
                ("nics_per_node", c.nics_per_node),
            )
            if v is not None
        ],
    }
    tables = sorted(
        {f"{t.collective.value} {t.tier}" for t in g.collectives if by_tier.get(t.tier)}
    )
    whatifs = sorted({w for t in g.collectives for w in by_tier.get(t.tier, [])})
    if not tables:
        return []
    return [
        Choice(
            "calibrated collectives",
            "measured times",
            f"engine.calibration's tables ({', '.join(tables)}) give {gpu} times measured on "
            f"real links; the what-ifs {', '.join(whatifs)} do not change them, only the "
            "sharing of links with other traffic",
        )
    ]


def _gpu_compute(
    config: ExperimentConfig,
    spec: GpuSpec,
    calibration: Calibration | None,
    topology: Topology,
) -> GpuCompute:
    """The compute pricing of one more GPU type of a mixed machine, built as the run's:
    its kernel model (the calibration's tables for it, which must exist when a
    calibration is given) and its interference: the user's or its own fixed factors where
    given, else the mechanism for this GPU."""
    if calibration is not None:
        from simulator.cost.calibration import require_gpu

        label = f"engine.calibration: {config.engine.calibration} (cluster.node_gpus)"
        require_gpu(calibration, spec.name, label)
    kernels = KernelModel(spec, calibration=calibration)
    user = config.engine.compute_slowdown_under_overlap
    fixed = kernels.interference  # this GPU's calibration or preset factors, if any
    slowdown: float | Interference = (
        Interference.uniform(user) if user is not None else fixed if fixed is not None else 1.0
    )
    own = user is None and fixed is None
    mech = interference_model(kernels, spec, topology) if own else None
    return GpuCompute(spec.name, kernels, slowdown, mech)


def mixed_gpu(types: list[GpuSpec], codes: np.ndarray) -> GpuSpec:
    """What the report reads of a mixed machine's GPUs: the first type's name, the least
    memory (a run must fit every GPU) and the mean peak rates over the GPUs (the
    percentage of peak is of the machine's aggregate)."""
    counts = np.bincount(codes, minlength=len(types)).astype(np.float64)
    weights = counts / counts.sum()
    peak = float(sum(w * t.peak_flops for w, t in zip(weights, types, strict=True)))
    emp = [t.empirical_gemm_flops for t in types]
    empirical = (
        None
        if any(e is None for e in emp)
        else float(sum(w * e for w, e in zip(weights, emp, strict=True)))
    )
    return replace(
        types[0],
        memory_bytes=min(t.memory_bytes for t in types),
        peak_flops=peak,
        empirical_gemm_flops=empirical,
    )


def simulate(config: ExperimentConfig, *, progress: ProgressFn | None = None) -> Result:
    """Simulate one training iteration of `config` and summarise it."""
    t0 = time.perf_counter()
    topology = build_topology(config.cluster)
    gpu = gpu_spec(config.cluster.gpu or topology.gpu_type)
    calibration = None
    if config.engine.calibration:
        from simulator.cost.calibration import load_calibration, require_gpu

        calibration = load_calibration(config.engine.calibration)
        require_gpu(calibration, gpu.name, f"engine.calibration: {config.engine.calibration}")
    kernels = KernelModel(
        gpu, calibration=calibration, attention_kernel=config.training.attention_kernel
    )
    params = network_params_for(topology)
    fixed = kernels.interference  # a calibration's or preset's factors, else the mechanism
    cost = build_cost_model(
        config,
        topology,
        kernels,
        params,
        overlap_slowdown=fixed if fixed is not None else 1.0,
        calibration=calibration,
        gpu=gpu.name,
    )
    if fixed is None and config.engine.compute_slowdown_under_overlap is None:
        cost.interference = interference_model(kernels, gpu, topology)
    codes, others = build_gpu_mix(config.cluster, topology, gpu)
    if codes is not None:
        cost.mixed = tuple(_gpu_compute(config, spec, calibration, topology) for spec in others)
        cost.gpu_mix = codes
    # a mixed machine's plan must fit every GPU: it is made for the one with least memory
    plan_gpu = min([gpu, *others], key=lambda g: g.memory_bytes)
    plan = build_plan(config, topology, plan_gpu)
    stragglers = {s.rank: s.slowdown for s in config.cluster.stragglers}

    engine = Engine(
        plan.graph,
        topology,
        cost,
        mode=config.engine.mode,
        stragglers=stragglers,
        steady_state=config.engine.steady_state,
        progress=progress,
    )
    try:
        result = engine.run()
    except CostModelError as e:
        algorithm = config.engine.collective_algorithm
        if algorithm == "auto":
            raise
        # a fixed algorithm applies to every collective: name the field that fixed it
        raise ConfigError(
            f"engine.collective_algorithm={algorithm}: {e}, in this {config.parallel.strategy} "
            "run; use auto, which picks an algorithm per collective"
        ) from None
    engine_wall = result.wall_time_s
    result.wall_time_s = time.perf_counter() - t0
    result.setup_time_s += result.wall_time_s - engine_wall  # topology, workload, report
    report = build_report(
        result,
        topology=topology,
        gpu=gpu if codes is None else mixed_gpu([gpu, *others], codes),
        model_name=config.model.spec().name,
        machine=config.cluster.machine,
        strategy=config.parallel.strategy,
        grid=plan.grid,
        parameters=plan.parameters,
        group_aliases=plan.group_aliases,
        memory=plan.memory,
        model_flops=plan.model_flops,
        batch_tokens=config.training.batch_tokens,
        choices=[
            c.as_dict()
            for c in [
                *run_choices(plan, engine, cost.pricer.decisions),
                *calibrated_what_ifs(config, calibration, gpu.name),
            ]
        ],
        stages=plan.stages,
        model_overrides=model_overrides(config.model),
        kernel_terms=kernel_terms(kernels, cost),
    )
    return Result(config=config, topology=topology, plan=plan, engine=result, report=report)
