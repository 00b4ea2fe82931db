"""Simulating a traced run: a torch4d run.json replayed exactly, or an axsim config.

Why here and not in simulator/api.py: a torch4d run is not an axsim strategy (its program
comes from validation.torch4d.workload), and the simulator never imports validation. The
cost model is assembled as `simulate()` assembles it: the kernel model and the collective
pricer of the GPU type, both fed by the calibration file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from simulator.cost.calibration import Calibration, load_calibration, require_gpu
from simulator.cost.kernels import KernelModel
from simulator.cost.model import CostModel
from simulator.engine.core import Engine
from simulator.engine.timeline import Timeline
from simulator.errors import SimulatorError
from simulator.network.params import network_params_for
from simulator.network.pricing import CollectivePricer
from topologies.catalogue import machine_preset
from topologies.hardware import gpu_spec
from topologies.machines import build_machine
from validation.torch4d.config import RunSpec
from validation.torch4d.workload import build_torch4d_graph, load_run_json, run_spec_from_json


class SimulationInputError(SimulatorError):
    """A config that cannot describe the traced run (world size, machine)."""


@dataclass
class SimRun:
    """A finished simulation of one iteration."""

    timeline: Timeline
    iteration_s: float
    group_sizes: dict[str, int]
    op_overhead_s: float = 0.0
    """The kernel model's launch overhead, included in every compute op's duration."""


def simulate_torch4d(
    spec: RunSpec,
    calibration: Calibration | None = None,
    machine: str = "cpu-host",
    network: str = "contention",
) -> SimRun:
    """One torch4d step on `machine` (ranks packed on consecutive GPUs / slots)."""
    preset = machine_preset(machine)
    world = spec.grid.world_size
    topology = build_machine(machine, max(1, math.ceil(world / preset.gpus_per_node)))
    kernels = KernelModel(topology.gpu_type, calibration=calibration)
    pricer = CollectivePricer(
        topology,
        network_params_for(topology),
        "auto",
        calibration=calibration,
        gpu=topology.gpu_type,
    )
    cost = CostModel(kernels, pricer, network, overlap_slowdown=kernels.interference or 1.0)
    graph = build_torch4d_graph(spec)
    result = Engine(graph, topology, cost, mode="full", steady_state=False).run()
    sizes = {name: graph.groups[name].size for name in graph.groups}
    return SimRun(result.timeline, result.iteration_time_s, sizes, kernels.launch_overhead_s)


def simulate_config(
    config: str | Path,
    calibration: str | Path | None,
    machine: str | None,
    network: str,
    world_size: int,
    sets: Sequence[str] = (),
) -> SimRun:
    """Simulate a torch4d run.json or an axsim YAML config of a `world_size`-rank run
    (`sets`: --set overrides of a YAML config, applied last as in `axsim simulate`)."""
    cfg = Path(config)
    cal = load_calibration(calibration) if calibration is not None else None
    if sets and cfg.suffix == ".json":
        raise SimulationInputError(
            f"--set: {cfg} is a torch4d run.json, replayed as traced (no axsim config to "
            "override); give a YAML --config"
        )
    if cfg.suffix == ".json":
        run = load_run_json(cfg)
        spec = run_spec_from_json(run, str(cfg))
        if spec.grid.world_size != world_size:
            raise SimulationInputError(
                f"{cfg}: grid {spec.grid} has {spec.grid.world_size} ranks but the traces "
                f"have {world_size}"
            )
        on_cpu = run.get("device", "cpu") == "cpu"
        if machine is None:
            if not on_cpu:
                raise SimulationInputError(f"{cfg}: a GPU run; give --machine (e.g. dgx-h100)")
            machine = "cpu-host"
        elif on_cpu and machine != "cpu-host":
            raise SimulationInputError(
                f"--machine {machine}: {cfg} is a CPU run, replayed on cpu-host (a GPU machine "
                "would compare GPU timings with CPU measurements)"
            )
        if cal is not None:  # simulate() checks the same for configs
            require_gpu(cal, machine_preset(machine).gpu, f"--calibration {calibration}")
        return simulate_torch4d(spec, cal, machine, network)
    from simulator.api import simulate
    from simulator.config import load_config

    # compared op by op with the traces: keep every microbatch in the timeline
    overrides = [f"engine.network={network}", "engine.virtual_microbatches=false"]
    if calibration is not None:
        overrides.append(f"engine.calibration={calibration}")
    exp = load_config(cfg, [*overrides, *sets])
    gpus = exp.cluster.num_gpus
    if gpus is not None and gpus != world_size:
        raise SimulationInputError(
            f"{cfg}: the config has {gpus} GPUs but the traces have {world_size} ranks"
        )
    result = simulate(exp)
    graph = result.plan.graph
    if graph.world_size != world_size:
        raise SimulationInputError(
            f"{cfg}: the config has {graph.world_size} ranks but the traces have {world_size}"
        )
    sizes = {name: graph.groups[name].size for name in graph.groups}
    gpu = gpu_spec(exp.cluster.gpu or result.topology.gpu_type)
    overhead = KernelModel(gpu, calibration=cal).launch_overhead_s
    return SimRun(result.engine.timeline, result.engine.iteration_time_s, sizes, overhead)
