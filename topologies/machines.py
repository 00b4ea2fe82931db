"""Machine presets at any size: a node template tiled N times, joined by a fabric.

`build_machine("frontier", 1024)` reads the preset from data/machines.yaml, builds the node
template (topologies.nodes), the fabric (dragonfly or fat tree) and lays out the columnar
device and link tables with numpy (no per-node Python work, no networkx graph), so a
65,536-GPU machine builds in about a second. Routing is structural (`MachineRouter`).

Layout (what `MachineRouter` and users can rely on):

- devices: node n's devices are `n * D + local` (the template's order: GPUs, then
  switches/CPUs/NICs as the node builder adds them); fabric switches follow all nodes.
- links: node n's links `n * L + local`; then two links per NIC endpoint e = n * K + k
  (NIC -> switch at `N * L + 2e`, switch -> NIC at `+ 1`, kind `nic`); then fabric links.
- GPU g is `gpus[g]`, node by node; node devices carry the dragonfly group / fat-tree pod.

What-ifs: `gpu` (type only), `nic_bandwidth_GBps` (the NIC <-> switch links),
`nics_per_node` (fewer NICs: GPUs share them, see topologies.nodes), `intra_node_bandwidth_scale`
(every link inside a node), `fabric_link_bandwidth_GBps` (every switch-to-switch link),
`routing` (a policy of topologies.fabric.ROUTING_POLICIES the fabric supports).
"""

from __future__ import annotations

import math

import numpy as np

from topologies.catalogue import MachinePreset, machine_preset
from topologies.dragonfly.build import DragonflySpec, build_dragonfly
from topologies.errors import TopologyError
from topologies.fabric import Fabric, spec_number
from topologies.fattree import FatTreeSpec, build_fat_tree
from topologies.hardware import gpu_spec
from topologies.host_staging import stage_through_host
from topologies.limits import BANDWIDTH_SCALE_RANGE, MAX_BANDWIDTH_GBPS, MIN_BANDWIDTH_GBPS
from topologies.nodes import NodeTemplate, build_node
from topologies.routing import MachineRouter
from topologies.types import (
    DeviceKind,
    DeviceTable,
    LinkKind,
    LinkTable,
    Topology,
    device_kind_code,
    link_kind_code,
)

# The largest machine axsim builds: 2^18 GPUs, over 3x Frontier's 78,848 GCDs (a 65,536-GPU
# machine takes ~0.4 GB; this bound keeps a typo'd count from exhausting memory).
MAX_GPUS = 2**18


def build_machine(
    name: str,
    nodes: int,
    *,
    gpu: str | None = None,
    nic_bandwidth_GBps: float | None = None,
    nics_per_node: int | None = None,
    intra_node_bandwidth_scale: float = 1.0,
    fabric_link_bandwidth_GBps: float | None = None,
    routing: str | None = None,
    gpudirect_rdma: bool = True,
) -> Topology:
    """The topology of a machine preset with `nodes` nodes, with optional what-if overrides.

    Parameters
    ----------
    name : a preset of data/machines.yaml (perlmutter, frontier, alps, dgx-h100, dgx-h200,
        frontera-rtx).
    nodes : number of nodes (>= 1); they fill consecutive dragonfly groups / fat-tree leaves.
    gpu, nic_bandwidth_GBps, nics_per_node, intra_node_bandwidth_scale,
    fabric_link_bandwidth_GBps, routing : what-if overrides of the preset (None = preset).
    gpudirect_rdma : False stages every GPU <-> NIC transfer through host memory (the
        collective library without GPUDirect RDMA: topologies/host_staging.py).

    Returns
    -------
    A `Topology` with a structural router and `metadata`: machine, nodes, gpus_per_node,
    nics_per_node, package_size, node_type, nic_bandwidth_GBps, injection_per_gpu_GBps,
    bisection_GBps (None for one node), minimal_bisection_GBps, routing, fabric (its
    parameters), gpu_nic (NIC number used by each GPU of a node), homogeneous_nodes, link_efficiency
    (the preset's measured per-kind efficiencies) and collectives (its measured collective
    library terms, a raw mapping; simulator/network/params.py validates and applies both).

    Raises
    ------
    TopologyError : unknown machine or GPU, or an invalid count, bandwidth or policy; the
        message names the field.
    """
    preset = machine_preset(name)
    n = _positive_int("nodes", nodes)
    if n * preset.gpus_per_node > MAX_GPUS:
        raise TopologyError(
            f"nodes: {n:,} {preset.name} nodes are {n * preset.gpus_per_node:,} GPUs, more than "
            f"the {MAX_GPUS:,} axsim builds"
        )
    gpu_type = preset.gpu if gpu is None else gpu_spec(gpu).name
    nic_GBps = (
        preset.nic_bandwidth_GBps
        if nic_bandwidth_GBps is None
        else _bounded("nic_bandwidth_GBps", nic_bandwidth_GBps)
    )
    k = (
        preset.nics_per_node
        if nics_per_node is None
        else _positive_int("nics_per_node", nics_per_node)
    )
    scale = _bounded(
        "intra_node_bandwidth_scale", intra_node_bandwidth_scale, BANDWIDTH_SCALE_RANGE
    )
    if fabric_link_bandwidth_GBps is not None:
        _bounded("fabric_link_bandwidth_GBps", fabric_link_bandwidth_GBps)
    where = f"machines.yaml: {preset.name}.fabric"
    nic_latency_s = spec_number(preset.fabric, "nic_latency_us", where, default=1.0) * 1e-6
    template = build_node(preset.node, nics=k, bandwidth_scale=scale)
    if not gpudirect_rdma:
        template = stage_through_host(template)
    nic_link_base = n * template.num_links
    fabric = _build_fabric(
        preset, n, template, nic_link_base + 2 * n * k, routing, fabric_link_bandwidth_GBps
    )
    links = _links(template, fabric, n, nic_GBps * 1e9, nic_latency_s)
    d = template.num_devices
    gpus = (
        np.arange(n, dtype=np.int64)[:, None] * d + np.array(template.gpus, dtype=np.int64)
    ).ravel()
    router = MachineRouter(template, fabric.router, nodes=n, nic_link_base=nic_link_base)
    half = n // 2
    bisection = None if n < 2 else min(half * k * nic_GBps * 1e9, fabric.cut_Bps) / 1e9
    minimal = None if n < 2 else min(half * k * nic_GBps * 1e9, fabric.minimal_cut_Bps) / 1e9
    metadata: dict[str, object] = {
        "machine": preset.name,
        "nodes": n,
        "gpus_per_node": template.gpus_per_node,
        "nics_per_node": k,
        "package_size": template.package_size,
        "node_type": template.name,
        "gpu": gpu_type,
        "nic_bandwidth_GBps": nic_GBps,
        "nic_latency_us": nic_latency_s * 1e6,
        "intra_node_bandwidth_scale": scale,
        "injection_per_gpu_GBps": k * nic_GBps / template.gpus_per_node,
        "bisection_GBps": bisection,
        "minimal_bisection_GBps": minimal,
        "routing": fabric.parameters.get("routing"),
        "fabric": dict(fabric.parameters),
        "gpu_nic": list(template.gpu_nic),
        "gpudirect_rdma": bool(gpudirect_rdma),
        "homogeneous_nodes": True,
        "links_per_node": template.num_links,
        "link_efficiency": dict(preset.link_efficiency),
        "collectives": dict(preset.collectives),
    }
    return Topology(
        name=f"{preset.name}-{n}n",
        devices=_devices(template, fabric, n),
        links=links,
        gpus=gpus,
        gpus_per_node=template.gpus_per_node,
        router=router,
        gpu_type=gpu_type,
        description=preset.description,
        metadata=metadata,
    )


def _positive_int(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise TopologyError(f"{field} must be a positive integer, got {value!r}")
    return int(value)


def _positive(field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise TopologyError(f"{field} must be a positive number, got {value!r}")
    if not (value > 0 and math.isfinite(float(value))):
        raise TopologyError(f"{field} must be positive and finite, got {value!r}")
    return float(value)


def _bounded(
    field: str,
    value: object,
    bounds: tuple[float, float] = (MIN_BANDWIDTH_GBPS, MAX_BANDWIDTH_GBPS),
) -> float:
    """A positive what-if number inside `bounds` (topologies/limits.py: 1e300 made the
    max-flow capacity infinite)."""
    number = _positive(field, value)
    if not bounds[0] <= number <= bounds[1]:
        raise TopologyError(
            f"{field} must be between {bounds[0]:g} and {bounds[1]:g}, got {value!r}"
        )
    return number


def _build_fabric(
    preset: MachinePreset,
    nodes: int,
    template: NodeTemplate,
    link_base: int,
    routing: str | None,
    link_GBps: float | None,
) -> Fabric:
    where = f"machines.yaml: {preset.name}.fabric"
    kind = str(preset.fabric.get("kind", ""))
    k = template.nics_per_node
    if kind == "dragonfly":
        df = DragonflySpec.from_fabric(
            preset.fabric, where, routing=routing, link_bandwidth_GBps=link_GBps
        )
        return build_dragonfly(
            df,
            nodes=nodes,
            nics_per_node=k,
            link_base=link_base,
            cabled_nics_per_node=preset.nics_per_node,
        )
    if kind == "fat-tree":
        ft = FatTreeSpec.from_fabric(
            preset.fabric, where, routing=routing, link_bandwidth_GBps=link_GBps
        )
        return build_fat_tree(
            ft,
            nodes=nodes,
            nics_per_node=k,
            gpus_per_node=template.gpus_per_node,
            link_base=link_base,
        )
    raise TopologyError(f"{where}.kind: unknown fabric '{kind}' (known: dragonfly, fat-tree)")


def _devices(template: NodeTemplate, fabric: Fabric, nodes: int) -> DeviceTable:
    d, s = template.num_devices, fabric.num_switches
    return DeviceTable(
        kind=np.concatenate(
            [
                np.tile(template.device_kind, nodes),
                np.full(s, device_kind_code(DeviceKind.SWITCH), np.int8),
            ]
        ),
        node=np.concatenate(
            [np.repeat(np.arange(nodes, dtype=np.int32), d), np.full(s, -1, np.int32)]
        ),
        local_index=np.concatenate(
            [np.tile(template.device_local_index, nodes), fabric.switch_local_index]
        ),
        group=np.concatenate([np.repeat(fabric.node_group, d), fabric.switch_group]).astype(
            np.int32
        ),
    )


def _links(
    template: NodeTemplate, fabric: Fabric, nodes: int, nic_Bps: float, nic_latency_s: float
) -> LinkTable:
    d = template.num_devices
    base = np.arange(nodes, dtype=np.int64)[:, None] * d
    nic_dev = (base + np.array(template.nics, dtype=np.int64)).ravel()
    switch_dev = nodes * d + fabric.endpoint_switch
    e2 = 2 * nic_dev.shape[0]
    return LinkTable(
        src=np.concatenate(
            [
                (base + template.link_src).ravel(),
                np.stack([nic_dev, switch_dev], axis=1).ravel(),
                nodes * d + fabric.link_src,
            ]
        ),
        dst=np.concatenate(
            [
                (base + template.link_dst).ravel(),
                np.stack([switch_dev, nic_dev], axis=1).ravel(),
                nodes * d + fabric.link_dst,
            ]
        ),
        kind=np.concatenate(
            [
                np.tile(template.link_kind, nodes),
                np.full(e2, link_kind_code(LinkKind.NIC), np.int8),
                fabric.link_kind,
            ]
        ),
        bandwidth_Bps=np.concatenate(
            [
                np.tile(template.link_bandwidth_Bps, nodes),
                np.full(e2, nic_Bps),
                fabric.link_bandwidth_Bps,
            ]
        ),
        latency_s=np.concatenate(
            [
                np.tile(template.link_latency_s, nodes),
                np.full(e2, nic_latency_s),
                fabric.link_latency_s,
            ]
        ),
    )
