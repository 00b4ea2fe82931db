"""Building the simulation's inputs from the configuration (topology, cost model)."""

from __future__ import annotations

import numpy as np

from simulator.config import ClusterConfig, ExperimentConfig, check_node_gpus
from simulator.cost.calibration import Calibration
from simulator.cost.interference import HardwareQueues
from simulator.cost.model import CostModel, KernelTimer
from simulator.cost.terms import Interference
from simulator.errors import ConfigError
from simulator.network.params import NetworkParams, network_params_for
from simulator.network.pricing import CollectivePricer
from topologies.hardware import GpuSpec, gpu_spec
from topologies.types import Topology


def build_topology(cluster: ClusterConfig) -> Topology:
    """The cluster's topology: a machine preset at a size (with what-ifs) or a custom file."""
    if cluster.machine == "custom":
        from topologies.custom import load_custom_topology

        assert cluster.topology_file is not None
        topology = load_custom_topology(cluster.topology_file)
        _check_custom_size(cluster, topology)
        return topology
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


def _check_custom_size(cluster: ClusterConfig, topology: Topology) -> None:
    """A run may use part of a custom topology, never more GPUs or nodes than the file
    has (8 ranks on a 4-GPU file indexed past its GPU table: IndexError)."""
    where = f"the custom topology {cluster.topology_file}"
    if cluster.gpus is not None and cluster.gpus > topology.num_gpus:
        raise ConfigError(f"cluster.gpus={cluster.gpus}: {where} has {topology.num_gpus} GPUs")
    nodes = topology.metadata.get("nodes")
    if cluster.nodes is not None and isinstance(nodes, int) and cluster.nodes != nodes:
        raise ConfigError(
            f"cluster.nodes={cluster.nodes}: {where} has {nodes} nodes (give cluster.gpus to "
            "use part of it)"
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


def build_gpu_mix(
    cluster: ClusterConfig, topology: Topology, gpu: GpuSpec
) -> tuple[np.ndarray | None, list[GpuSpec]]:
    """Per GPU index the code of its type (0: `gpu`, the run's; k: the k-th of the list
    returned, the others `cluster.node_gpus` names, in order of first appearance), or
    (None, []) where every GPU is the run's type."""
    if not cluster.node_gpus:
        return None, []
    node = topology.devices.node[topology.gpus].astype(np.int64)
    nodes = int(node.max(initial=-1)) + 1
    try:
        check_node_gpus(cluster.node_gpus, nodes)
    except ValueError as e:
        raise ConfigError(f"cluster.{e}") from None
    types = [gpu]
    code_of = {gpu.name: 0}
    per_node = np.zeros(nodes, dtype=np.int64)
    for run in cluster.node_gpus:
        code = code_of.get(run.gpu)
        if code is None:
            code = code_of[run.gpu] = len(types)
            types.append(gpu_spec(run.gpu))
        per_node[run.first_node : run.first_node + run.nodes] = code
    codes = per_node[node]
    if not codes.any():
        return None, []
    return codes, types[1:]
