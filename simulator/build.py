"""Building the simulation's inputs from the configuration (topology, cost model)."""

from __future__ import annotations

from simulator.config import ClusterConfig, ExperimentConfig
from simulator.cost.calibration import Calibration
from simulator.cost.interference import HardwareQueues
from simulator.cost.model import CostModel, KernelTimer
from simulator.cost.terms import Interference
from simulator.errors import ConfigError
from simulator.network.params import NetworkParams, network_params_for
from simulator.network.pricing import CollectivePricer
from topologies.hardware import gpu_spec
from topologies.types import Topology


def build_topology(cluster: ClusterConfig) -> Topology:
    """The cluster's topology: a machine preset at a size (with what-ifs) or a custom file."""
    if cluster.machine == "custom":
        from topologies.custom import load_custom_topology

        assert cluster.topology_file is not None
        return load_custom_topology(cluster.topology_file)
    from topologies.machines import build_machine

    nodes = cluster.num_nodes
    if nodes is None:
        raise ConfigError("cluster: give nodes or gpus")
    return build_machine(
        cluster.machine,
        nodes,
        gpu=cluster.gpu,
        nic_bandwidth_GBps=cluster.nic_bandwidth_GBps,
        nics_per_node=cluster.nics_per_node,
        intra_node_bandwidth_scale=cluster.intra_node_bandwidth_scale,
        fabric_link_bandwidth_GBps=cluster.fabric_link_bandwidth_GBps,
        routing=cluster.routing,
        gpudirect_rdma=cluster.gpudirect_rdma,
    )


def build_cost_model(
    config: ExperimentConfig,
    topology: Topology,
    kernels: KernelTimer,
    params: NetworkParams | None = None,
    overlap_slowdown: float | Interference = 1.0,
    calibration: Calibration | None = None,
    gpu: str | None = None,
) -> CostModel:
    """CostModel for an experiment: kernel timer, collective pricer (with the calibration's
    collective tables, if any), network fidelity, the runtime's hardware queues and the
    overlap factor a user or a calibration fixes (without one, simulator/api.py attaches
    the interference mechanism)."""
    pricer = CollectivePricer(
        topology,
        params or network_params_for(topology),
        config.engine.collective_algorithm,
        calibration=calibration,
        gpu=gpu,
        library=config.engine.collective_library,
    )
    # a user's single factor (engine.compute_slowdown_under_overlap) replaces both classes
    user = config.engine.compute_slowdown_under_overlap
    slowdown = Interference.uniform(user) if user is not None else overlap_slowdown
    vendor = gpu_spec(gpu or topology.gpu_type).vendor if (gpu or topology.gpu_type) else ""
    machine = topology.metadata.get("machine")
    queues = HardwareQueues(vendor, str(machine) if machine else None) if vendor else None
    return CostModel(
        kernels=kernels,
        pricer=pricer,
        network=config.engine.network,
        overlap_slowdown=slowdown,
        queues=queues,
    )
