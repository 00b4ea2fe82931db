"""Widest-shortest paths on small directed graphs, and a deterministic integer hash.

Used where routing is not structural: the node-local path tables (a node has a dozen
devices) and custom topologies. The rule is the one a routing table built by hand would
follow: fewest hops first (latency and hop-by-hop overheads dominate small messages), then
the widest bottleneck among equally short paths, then the lowest link id (determinism).

Graphs are given as adjacency lists `adjacency[u] = [(v, link_id, bandwidth), ...]`, so the
same code serves numpy link tables and networkx graphs without building either from the
other.
"""

from __future__ import annotations

from collections.abc import Sequence

Adjacency = Sequence[Sequence[tuple[int, int, float]]]
"""`adjacency[u]` lists the outgoing links of device u as (dst device, link id, bandwidth)."""

_MASK64 = (1 << 64) - 1


def mix64(*values: int) -> int:
    """A deterministic 64-bit hash of integers (splitmix64 finaliser, chained).

    Python's `hash` is salted for strings and identity for small ints, so routers use this
    to spread flows over equal-cost paths reproducibly across runs and machines.
    """
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = ((h ^ (v & _MASK64)) * 0xBF58476D1CE4E5B9) & _MASK64
        h ^= h >> 31
        h = (h * 0x94D049BB133111EB) & _MASK64
        h ^= h >> 29
    return h


def widest_shortest_tree(adjacency: Adjacency, source: int) -> list[int]:
    """Predecessor links of the widest-shortest path tree rooted at `source`.

    Returns `pred` with `pred[v]` the id of the last link on the chosen path to v, -1 for
    the source and for unreachable devices. Breadth-first by layers: a device's bottleneck
    is final once its whole layer is expanded, and the bottleneck of a path extended by one
    link is min(bottleneck, link bandwidth), so the best path to v extends a best path to
    its predecessor (the choice is exact, not a heuristic).
    """
    n = len(adjacency)
    hops = [-1] * n
    width = [0.0] * n
    pred = [-1] * n
    hops[source] = 0
    width[source] = float("inf")
    layer = [source]
    depth = 0
    while layer:
        nxt: list[int] = []
        for u in layer:
            for v, link_id, bandwidth in adjacency[u]:
                if hops[v] != -1 and hops[v] != depth + 1:
                    continue
                cand = min(width[u], bandwidth)
                if hops[v] == -1:
                    hops[v] = depth + 1
                    nxt.append(v)
                elif cand < width[v] or (cand == width[v] and link_id > pred[v]):
                    continue
                width[v] = cand
                pred[v] = link_id
        layer = sorted(nxt)
        depth += 1
    return pred


def tree_path(
    pred: Sequence[int], link_src: Sequence[int], source: int, dest: int
) -> tuple[int, ...] | None:
    """The link path source -> dest read off a predecessor tree, or None if unreachable."""
    if source == dest:
        return ()
    path: list[int] = []
    v = dest
    while v != source:
        link_id = pred[v]
        if link_id < 0:
            return None
        path.append(link_id)
        v = link_src[link_id]
    path.reverse()
    return tuple(path)


def adjacency_from_links(
    num_devices: int, src: Sequence[int], dst: Sequence[int], bandwidth: Sequence[float]
) -> list[list[tuple[int, int, float]]]:
    """Adjacency lists from parallel link arrays (link id = position)."""
    adj: list[list[tuple[int, int, float]]] = [[] for _ in range(num_devices)]
    for link_id, (s, d, b) in enumerate(zip(src, dst, bandwidth, strict=True)):
        adj[int(s)].append((int(d), link_id, float(b)))
    return adj
