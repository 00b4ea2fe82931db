"""Which GPUs of a node are interchangeable, for the engine's symmetric mode.

Why: the symmetric mode simulates one rank per workload class and activates all of a
class's group instances together, so they advance in lockstep. That is exact only when
the instances are equally fast. On a node whose GPUs are wired differently (Frontier:
the NICs hang off the odd GCDs, the Infinity Fabric links differ in width) instances
built from different GPU positions are not, and lockstep made the slowest set the pace
for all (0.3% off the full mode). Splitting the workload's classes by GPU position there
keeps the two modes equal (checked on Frontier grids by tests). Positions whose own links
look alike share a class (Frontier: even and odd GCDs), which keeps the representatives
few: one class per GCD cost 6x the engine time at 32,768 GCDs, two cost 1.4-1.6x. Nodes whose
GPUs look alike (NVSwitch boxes, Perlmutter, Alps) keep their classes and their speed.
A grid whose groups mix positions unevenly (a factor 3 on Frontier, 3 NICs for 4 GPUs)
cannot be simulated symmetrically; `auto` then runs the full mode.
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
    """Per GPU index, the class of its position in its node (GPUs whose own links look
    alike share one: Frontier's even and odd GCDs); None where every GPU of a node is
    wired alike (or the nodes are not uniform enough to tell)."""
    per_node = topology.gpus_per_node
    if per_node <= 1 or not topology.metadata.get("homogeneous_nodes", False):
        return None
    if topology.num_gpus % per_node:
        return None
    profiles = [_profile(topology, int(d)) for d in topology.gpus[:per_node]]
    ids = {p: i for i, p in enumerate(dict.fromkeys(profiles))}
    if len(ids) == 1:
        return None
    position = np.array([ids[p] for p in profiles], dtype=np.int64)
    return np.tile(position, topology.num_gpus // per_node)
