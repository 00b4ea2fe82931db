"""A plain-data summary of a topology: what `axsim topology` prints (rich or JSON).

Figures, all per direction:

- devices and links by kind: counts, bandwidth range, total bandwidth;
- injection per GPU: the bandwidth of all NIC -> switch links divided by the GPU count
  (node NIC bandwidth / GPUs per node on the presets);
- bisection: for machine presets, min(NIC injection of half the nodes, the fabric cut
  between the two halves of the nodes) as computed from the fabric's structure (see
  topologies.dragonfly.build and topologies.fattree; `minimal_bisection_GBps` counts only links
  minimal routes use); for custom topologies, the max flow between the first and second
  half of the GPUs on the whole graph;
- node bisection: the max flow inside one node between the first and second half of its
  GPUs (e.g. Frontier GCDs 0-3 -> 4-7);
- sample routes: an intra-node pair, an inter-node pair in the same group / pod, an
  inter-group pair, with hop count, bottleneck, latency and the bandwidth one flow gets
  when spread over the route's paths (shared links carry the sum of the weights).
"""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np

from topologies.types import DEVICE_KINDS, LINK_KINDS, DeviceKind, LinkKind, Route, Topology

MAX_FLOW_LINK_LIMIT = 200_000
"""Custom topologies with more links than this get no max-flow bisection (too slow)."""


def route_bandwidth_Bps(topology: Topology, route: Route) -> float:
    """Rate of one flow split over the route's paths by weight (link loads add up)."""
    load: dict[int, float] = {}
    for path, weight in zip(route.paths, route.weights, strict=True):
        for link in path:
            load[link] = load.get(link, 0.0) + weight
    bw = topology.links.bandwidth_Bps
    return min(float(bw[link]) / w for link, w in load.items() if w > 0)


def describe_route(topology: Topology, src_gpu: int, dst_gpu: int, label: str) -> dict[str, Any]:
    """Hops, bottleneck, latency and device names of one GPU-to-GPU route."""
    route = topology.route(src_gpu, dst_gpu)
    primary = route.primary
    devices = [topology.device_name(int(topology.gpus[src_gpu]))]
    devices += [topology.device_name(int(topology.links.dst[link])) for link in primary]
    return {
        "label": label,
        "src_gpu": src_gpu,
        "dst_gpu": dst_gpu,
        "paths": len(route.paths),
        "hops": len(primary),
        "max_hops": max(len(p) for p in route.paths),
        "bottleneck_GBps": topology.path_bottleneck_Bps(primary) / 1e9,
        "route_bandwidth_GBps": route_bandwidth_Bps(topology, route) / 1e9,
        "latency_us": topology.path_latency_s(primary) * 1e6,
        "path": devices,
    }


def sample_pairs(topology: Topology) -> list[tuple[str, int, int]]:
    """(label, src GPU, dst GPU): intra-node, same group, other group, farthest."""
    gpu_dev = topology.gpus
    node = topology.devices.node[gpu_dev]
    group = topology.devices.group[gpu_dev]
    out: list[tuple[str, int, int]] = []
    same_node = np.flatnonzero(node == node[0])
    if same_node.shape[0] > 1:
        out.append(("intra-node", 0, int(same_node[1])))
        if same_node.shape[0] > 2:
            out.append(("intra-node, last GPU", 0, int(same_node[-1])))
    other_node = np.flatnonzero(node != node[0])
    same_group = other_node[group[other_node] == group[0]]
    if same_group.shape[0]:
        out.append(("inter-node, same group/pod", 0, int(same_group[0])))
    other_group = other_node[group[other_node] != group[0]]
    if other_group.shape[0]:
        out.append(("inter-group/pod", 0, int(other_group[0])))
    last = topology.num_gpus - 1
    if last > 0 and all(dst != last for _, _, dst in out):
        out.append(("last GPU", 0, last))
    return out


def _max_flow_Bps(
    topology: Topology, devices: np.ndarray, side_a: list[int], side_b: list[int]
) -> float:
    """Max flow from device set A to device set B on the subgraph induced by `devices`."""
    keep = np.zeros(topology.num_devices, dtype=bool)
    keep[devices] = True
    lt = topology.links
    mask = keep[lt.src] & keep[lt.dst]
    g = nx.DiGraph()
    for s, d, bw in zip(
        lt.src[mask].tolist(), lt.dst[mask].tolist(), lt.bandwidth_Bps[mask].tolist(), strict=True
    ):
        g.add_edge(s, d, capacity=bw / 1e9)
    for a in side_a:
        g.add_edge("A", a)  # no capacity attribute: unbounded
    for b in side_b:
        g.add_edge(b, "B")
    return float(nx.maximum_flow_value(g, "A", "B")) * 1e9


def node_bisection_Bps(topology: Topology) -> float | None:
    """Max flow inside GPU 0's node from the first to the second half of its GPUs."""
    node = topology.devices.node
    first = int(node[topology.gpus[0]])
    if first < 0:
        return None
    gpus = [int(g) for g in topology.gpus if int(node[g]) == first]
    if len(gpus) < 2:
        return None
    half = len(gpus) // 2
    return _max_flow_Bps(topology, np.flatnonzero(node == first), gpus[:half], gpus[half:])


def graph_bisection_Bps(topology: Topology) -> float | None:
    """Max flow from the first to the second half of all GPUs (None if too large)."""
    if topology.num_gpus < 2 or topology.num_links > MAX_FLOW_LINK_LIMIT:
        return None
    gpus = [int(g) for g in topology.gpus]
    half = len(gpus) // 2
    return _max_flow_Bps(topology, np.arange(topology.num_devices), gpus[:half], gpus[half:])


def _link_stats(topology: Topology) -> dict[str, dict[str, float | int]]:
    lt = topology.links
    out: dict[str, dict[str, float | int]] = {}
    for code, kind in enumerate(LINK_KINDS):
        bw = lt.bandwidth_Bps[lt.kind == code]
        if bw.shape[0]:
            out[kind.value] = {
                "count": int(bw.shape[0]),
                "min_GBps": float(bw.min()) / 1e9,
                "max_GBps": float(bw.max()) / 1e9,
                "total_GBps": float(bw.sum()) / 1e9,
            }
    return out


def _injection_per_gpu_Bps(topology: Topology) -> float:
    lt, kinds = topology.links, topology.devices.kind
    nic = DEVICE_KINDS.index(DeviceKind.NIC)
    up = (
        (lt.kind == LINK_KINDS.index(LinkKind.NIC))
        & (kinds[lt.src] == nic)
        & (kinds[lt.dst] != nic)
    )
    return float(lt.bandwidth_Bps[up].sum()) / topology.num_gpus


def _gbps(x: float | None) -> float | None:
    return None if x is None else x / 1e9


def summarize_topology(topology: Topology, *, samples: bool = True) -> dict[str, Any]:
    """Everything `axsim topology` shows, as JSON-serialisable plain data."""
    meta = topology.metadata
    kinds = topology.devices.kind
    devices = {
        k.value: int((kinds == i).sum()) for i, k in enumerate(DEVICE_KINDS) if (kinds == i).any()
    }
    if "bisection_GBps" in meta:
        bisection, minimal = meta.get("bisection_GBps"), meta.get("minimal_bisection_GBps")
    else:
        bisection = minimal = _gbps(graph_bisection_Bps(topology))
    out: dict[str, Any] = {
        "name": topology.name,
        "description": topology.description,
        "machine": meta.get("machine", topology.name),
        "gpu_type": topology.gpu_type,
        "nodes": topology.num_nodes,
        "gpus": topology.num_gpus,
        "gpus_per_node": topology.gpus_per_node,
        "homogeneous_nodes": bool(meta.get("homogeneous_nodes", True)),
        "nics_per_node": meta.get("nics_per_node"),
        "package_size": meta.get("package_size", 1),
        "routing": meta.get("routing"),
        "fabric": meta.get("fabric", {}),
        "devices": devices,
        "links": _link_stats(topology),
        "num_devices": topology.num_devices,
        "num_links": topology.num_links,
        "injection_per_gpu_GBps": _injection_per_gpu_Bps(topology) / 1e9,
        "bisection_GBps": bisection,
        "minimal_bisection_GBps": minimal,
        "node_bisection_GBps": _gbps(node_bisection_Bps(topology)),
    }
    if samples:
        out["sample_routes"] = [
            describe_route(topology, s, d, label) for label, s, d in sample_pairs(topology)
        ]
    return out
