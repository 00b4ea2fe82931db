"""Which GPUs of a node are interchangeable, for the engine's symmetric mode.

Why: the symmetric mode simulates one rank per workload class and activates all of a
class's group instances together, so they advance in lockstep. That is exact only when
the instances are equally fast. On a node whose GPUs are wired differently (Frontier:
the NICs hang off the odd GCDs, the Infinity Fabric links differ in width) instances
built from different GPU positions are not, and lockstep made the slowest set the pace
for all (0.3% off the full mode). Splitting the workload's classes by GPU position there
keeps the two modes equal; nodes whose GPUs look alike (NVSwitch boxes, Perlmutter, Alps)
keep their classes, and with them the symmetric mode's speed.
"""

from __future__ import annotations

import numpy as np

from topologies.types import Topology


def _profile(topology: Topology, device: int) -> tuple[object, ...]:
    """What a GPU's own links look like: kind, bandwidth and far-end kind of each link out
    and in, and for a far end that is not a GPU (a NIC, a switch) how many GPUs link to it."""
    links, kinds = topology.links, topology.devices.kind
    gpu_code = kinds[device]
    rows = []
    for link in np.flatnonzero(links.src == device).tolist():
        far = int(links.dst[link])
        shared = 0
        if kinds[far] != gpu_code:
            feeders = links.src[links.dst == far]
            shared = int((kinds[feeders] == gpu_code).sum())
        rows.append(
            (
                "out",
                int(links.kind[link]),
                float(links.bandwidth_Bps[link]),
                int(kinds[far]),
                shared,
            )
        )
    for link in np.flatnonzero(links.dst == device).tolist():
        far = int(links.src[link])
        rows.append(
            ("in", int(links.kind[link]), float(links.bandwidth_Bps[link]), int(kinds[far]), 0)
        )
    return tuple(sorted(rows))


def node_position_classes(topology: Topology) -> np.ndarray | None:
    """Per GPU index, its position in its node where positions differ; None where every
    GPU of a node is wired alike (or the nodes are not uniform enough to tell)."""
    per_node = topology.gpus_per_node
    if per_node <= 1 or not topology.metadata.get("homogeneous_nodes", False):
        return None
    if topology.num_gpus % per_node:
        return None
    first = topology.gpus[:per_node]
    profiles = {_profile(topology, int(d)) for d in first}
    if len(profiles) == 1:
        return None
    local = np.arange(per_node, dtype=np.int64)
    return np.tile(local, topology.num_gpus // per_node)
