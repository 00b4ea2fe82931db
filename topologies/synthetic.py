"""Idealised topologies for closed-form checks and what-if studies.

`build_full_mesh`: every GPU has a direct link of the same bandwidth and latency to every
other GPU, so a ring step's flow uses exactly one link: the setting of the textbook
alpha-beta formulas. `build_switched`: GPUs hang off one non-blocking crossbar (each GPU
has one up and one down link), like an NVSwitch.
"""

from __future__ import annotations

import numpy as np

from topologies.errors import TopologyError
from topologies.types import (
    DeviceKind,
    DeviceTable,
    LinkKind,
    LinkTable,
    Route,
    Topology,
    device_kind_code,
    link_kind_code,
)


class _DirectRouter:
    """Routes over the direct link src -> dst (full mesh)."""

    def route(self, topology: Topology, src: int, dst: int) -> Route:
        link = topology.link_between(src, dst)
        if link is None:
            raise TopologyError(
                f"no direct link {topology.device_name(src)} -> {topology.device_name(dst)}"
            )
        return Route(paths=((link,),), weights=(1.0,))


class _StarRouter:
    """Routes GPU -> switch -> GPU (one crossbar)."""

    def __init__(self, switch: int):
        self.switch = switch

    def route(self, topology: Topology, src: int, dst: int) -> Route:
        up = topology.link_between(src, self.switch)
        down = topology.link_between(self.switch, dst)
        if up is None or down is None:
            raise TopologyError("star topology is missing a GPU link")
        return Route(paths=((up, down),), weights=(1.0,))


def _check(num_gpus: int, bandwidth_Bps: float, latency_s: float, gpus_per_node: int) -> None:
    if num_gpus < 2:
        raise TopologyError(f"num_gpus must be at least 2, got {num_gpus}")
    if bandwidth_Bps <= 0:
        raise TopologyError(f"bandwidth must be positive, got {bandwidth_Bps}")
    if latency_s < 0:
        raise TopologyError(f"latency must be non-negative, got {latency_s}")
    if gpus_per_node < 1 or num_gpus % gpus_per_node:
        raise TopologyError(f"gpus_per_node={gpus_per_node} must divide num_gpus={num_gpus}")


def build_full_mesh(
    num_gpus: int,
    bandwidth_Bps: float,
    latency_s: float = 0.0,
    gpus_per_node: int | None = None,
    kind: LinkKind = LinkKind.NVLINK,
) -> Topology:
    """A full mesh of `num_gpus` GPUs, one directed link per ordered pair.

    Parameters
    ----------
    num_gpus: number of GPUs (>= 2).
    bandwidth_Bps, latency_s: of every link.
    gpus_per_node: only labels GPUs with node numbers (default: all on one node).
    """
    per_node = gpus_per_node or num_gpus
    _check(num_gpus, bandwidth_Bps, latency_s, per_node)
    n = num_gpus
    ids = np.arange(n, dtype=np.int64)
    devices = DeviceTable(
        kind=np.full(n, device_kind_code(DeviceKind.GPU), dtype=np.int8),
        node=(ids // per_node).astype(np.int32),
        local_index=(ids % per_node).astype(np.int32),
        group=np.full(n, -1, dtype=np.int32),
    )
    src, dst = np.meshgrid(ids, ids, indexing="ij")
    mask = src != dst
    src, dst = src[mask], dst[mask]
    m = src.shape[0]
    links = LinkTable(
        src=src,
        dst=dst,
        kind=np.full(m, link_kind_code(kind), dtype=np.int8),
        bandwidth_Bps=np.full(m, float(bandwidth_Bps)),
        latency_s=np.full(m, float(latency_s)),
    )
    return Topology(
        name=f"full-mesh-{n}",
        devices=devices,
        links=links,
        gpus=ids.copy(),
        gpus_per_node=per_node,
        router=_DirectRouter(),
        gpu_type="h100",
        description=f"{n} GPUs, full mesh of {bandwidth_Bps / 1e9:g} GB/s links",
        metadata={
            "machine": "full-mesh",
            "nodes": n // per_node,
            "gpus_per_node": per_node,
            "package_size": 1,
        },
    )


def build_switched(
    num_gpus: int,
    bandwidth_Bps: float,
    latency_s: float = 0.0,
    gpus_per_node: int | None = None,
) -> Topology:
    """`num_gpus` GPUs on one non-blocking switch (up and down link per GPU)."""
    per_node = gpus_per_node or num_gpus
    _check(num_gpus, bandwidth_Bps, latency_s, per_node)
    n = num_gpus
    ids = np.arange(n + 1, dtype=np.int64)
    kinds = np.full(n + 1, device_kind_code(DeviceKind.GPU), dtype=np.int8)
    kinds[n] = device_kind_code(DeviceKind.SWITCH)
    node = (ids // per_node).astype(np.int32)
    node[n] = -1
    local = (ids % per_node).astype(np.int32)
    local[n] = 0
    devices = DeviceTable(
        kind=kinds, node=node, local_index=local, group=np.full(n + 1, -1, dtype=np.int32)
    )
    gpu = np.arange(n, dtype=np.int64)
    sw = np.full(n, n, dtype=np.int64)
    links = LinkTable(
        src=np.concatenate([gpu, sw]),
        dst=np.concatenate([sw, gpu]),
        kind=np.full(2 * n, link_kind_code(LinkKind.NVLINK), dtype=np.int8),
        bandwidth_Bps=np.full(2 * n, float(bandwidth_Bps)),
        latency_s=np.full(2 * n, float(latency_s)),
    )
    return Topology(
        name=f"switched-{n}",
        devices=devices,
        links=links,
        gpus=gpu,
        gpus_per_node=per_node,
        router=_StarRouter(n),
        gpu_type="h100",
        description=f"{n} GPUs on one crossbar, {bandwidth_Bps / 1e9:g} GB/s per GPU",
        metadata={
            "machine": "switched",
            "nodes": n // per_node,
            "gpus_per_node": per_node,
            "package_size": 1,
        },
    )
