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

import networkx as nx
import numpy as np

from topologies.types import DeviceKind, Topology, device_kind_code


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


MAX_SYMMETRIES = 128
"""Node automorphisms enumerated at most: a node whose GPUs are not all alike has few
(Frontier's MI250X node 4, a Perlmutter node with 2 NICs 4); past this bound (a DGX H100
node: 1,152, found at ~3 ms each) the exact local indices are used (`local_symmetries`
returns the identity alone), which splits more but never wrongly."""


def _node_graph(topology: Topology, node: int = 0) -> tuple[nx.DiGraph, dict[int, int]]:
    """A node's devices and links as a labelled graph (device kind and the links it has
    out of the node; links by kind and bandwidth), and its GPUs' device -> local index."""
    devices, links = topology.devices, topology.links
    inside = set(np.flatnonzero(devices.node == node).tolist())
    outside: dict[int, list[tuple[object, ...]]] = {d: [] for d in inside}
    edges: dict[tuple[int, int], list[tuple[int, float]]] = {}
    for s, t, k, bw in zip(
        links.src.tolist(),
        links.dst.tolist(),
        links.kind.tolist(),
        links.bandwidth_Bps.tolist(),
        strict=True,
    ):
        if s in inside and t in inside:
            edges.setdefault((s, t), []).append((k, bw))
        elif s in inside:
            outside[s].append(("out", k, bw))
        elif t in inside:
            outside[t].append(("in", k, bw))
    g = nx.DiGraph()
    for d in inside:
        g.add_node(d, label=(int(devices.kind[d]), tuple(sorted(outside[d]))), pin=None)
    for (s, t), lk in edges.items():
        g.add_edge(s, t, label=tuple(sorted(lk)))
    gpu_kind = device_kind_code(DeviceKind.GPU)
    local = {int(d): int(devices.local_index[d]) for d in inside if devices.kind[d] == gpu_kind}
    return g, local


def _maps(
    g: nx.DiGraph, pinned: nx.DiGraph | None = None
) -> nx.algorithms.isomorphism.DiGraphMatcher:
    def nodes(a: dict[str, object], b: dict[str, object]) -> bool:
        return a["label"] == b["label"] and a["pin"] == b["pin"]

    def edges(a: dict[str, object], b: dict[str, object]) -> bool:
        return a["label"] == b["label"]

    return nx.algorithms.isomorphism.DiGraphMatcher(
        g if pinned is None else pinned, g, node_match=nodes, edge_match=edges
    )


def _is_symmetry(
    g: nx.DiGraph,
    local: dict[int, int],
    perm: list[int],
    other: tuple[nx.DiGraph, dict[int, int]] | None = None,
) -> bool:
    """Whether relabelling the GPUs' local indices by `perm` maps the node onto itself
    (or onto `other`, another node's graph and local indices)."""
    target, target_local = other if other is not None else (g, local)
    pinned = g.copy()
    for d, i in local.items():
        pinned.nodes[d]["pin"] = perm[i]
    for d, i in target_local.items():
        target.nodes[d]["pin"] = i
    try:
        return bool(_maps(target, pinned).is_isomorphic())
    finally:
        for d in target_local:
            target.nodes[d]["pin"] = None


def _nodes_alike(topology: Topology, g: nx.DiGraph, local: dict[int, int]) -> bool:
    """Whether every node is node 0 with the same GPU local indices (checked one by one:
    a custom file's nodes of one GPU count may still be wired differently)."""
    n = topology.gpus_per_node
    nodes = int(topology.devices.node.max(initial=-1)) + 1
    ident = list(range(n))
    for k in range(1, nodes):
        other = _node_graph(topology, k)
        if sorted(other[1].values()) != ident or not _is_symmetry(g, local, ident, other):
            return False
    return True


def local_symmetries(topology: Topology) -> np.ndarray | None:
    """The permutations of a node's GPU local indices that map the node onto itself (its
    GPUs, NICs and switches, their links and the links leaving the node alike), as rows
    (identity included); None when every permutation does (all-to-all NVLink, NVSwitch).

    Why: group instances that such a relabelling maps onto each other (applied to every
    member, on every node alike, so rails map to rails) are priced alike, as the symmetric
    mode has always assumed for GPUs of one position class; instances it does not relate
    (GCDs 0, 1, 2 and 2, 3, 4 of a Frontier node: other Infinity Fabric widths between
    them) may not be. Nodes not all alike (metadata `homogeneous_nodes` False, or, where
    it is not said, a node that is not node 0 relabelled): the identity alone."""
    n = topology.gpus_per_node
    ident = np.arange(max(n, 1), dtype=np.int64)[None, :]
    if n <= 1 or topology.num_gpus % n or topology.metadata.get("homogeneous_nodes") is False:
        return ident
    g, local = _node_graph(topology)
    if len(local) != n or sorted(local.values()) != list(range(n)):
        return ident
    if "homogeneous_nodes" not in topology.metadata and not _nodes_alike(topology, g, local):
        return ident
    swap = [1, 0, *range(2, n)]
    cycle = [*range(1, n), 0]
    if _is_symmetry(g, local, swap) and _is_symmetry(g, local, cycle):
        return None  # a transposition and an n-cycle generate every permutation
    perms: set[tuple[int, ...]] = set()
    for mapping in _maps(g).isomorphisms_iter():
        perm = [0] * n
        for d, i in local.items():
            perm[i] = local[mapping[d]]
        perms.add(tuple(perm))
        if len(perms) > MAX_SYMMETRIES:
            return ident
    return np.array(sorted(perms), dtype=np.int64)


def canonical_locals(local: np.ndarray, symmetries: np.ndarray | None) -> np.ndarray:
    """Per row of GPU local indices (a group instance's members in position order), its
    canonical form under the node's symmetries (`local_symmetries`): rows that one
    relabelling maps onto each other get the same form. Every permutation a symmetry
    (None): the pattern of equal indices (first occurrence numbered 0, 1, ...); else the
    lexicographically least image."""
    if local.size == 0:
        return local
    if symmetries is None:
        out = np.empty_like(local)
        for i, row in enumerate(local.tolist()):
            seen: dict[int, int] = {}
            out[i] = [seen.setdefault(x, len(seen)) for x in row]
        return out
    best = symmetries[0][local]
    rows = np.arange(local.shape[0])
    for perm in symmetries[1:]:
        cand = perm[local]
        diff = cand != best
        first = diff.argmax(axis=1)
        less = diff.any(axis=1) & (cand[rows, first] < best[rows, first])
        best[less] = cand[less]
    return best
