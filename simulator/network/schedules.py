"""Collective algorithms: a collective on one group instance becomes phases of flows.

Schedules live in *position space* (member positions 0..p-1 of a group instance), so one
schedule serves every instance with the same layout. A phase is a set of flows that run
concurrently and finish together (ring steps are synchronous, so a ring is one phase whose
flows each carry the ring's total per-link volume); `bytes_factor` scales the collective's
buffer size S to the bytes each flow carries, and `steps` counts the latency terms.

Algorithms (S = full buffer, p = group size, as nccl-tests counts them):

- ring: all-reduce 2(p-1) steps of S/p; all-gather / reduce-scatter p-1 steps of S/p;
  broadcast / reduce a pipelined chain. Multi-node rings use one channel per GPU of a node
  (rotated so each channel leaves the node through a different GPU and NIC, as NCCL's
  channels do); inside one node, the order's planner may return several rings over
  different links (NCCL/RCCL channels; one textbook ring where links are uniform and
  shared, e.g. behind one switch).
- tree: NCCL's double binary tree for all-reduce: chains inside nodes, binary trees over
  the nodes, each of the two trees carrying S/2 (2·depth steps). NCCL runs each tree on
  several channels whose chains start at different GPUs, so a tree edge between two
  nodes is spread over the nodes' rails: one flow per member pair of equal chain index,
  each with an equal share of the edge's bytes. One (unspread) tree for broadcast /
  reduce.
- recursive-halving-doubling: log2(p) pairwise exchanges (power-of-two groups).
- direct: all pairs at once (all-to-all; reduce-scatter / all-gather / all-reduce as the
  all-pairs exchange NCCL approximates inside fully connected and NVSwitch nodes, charged
  the ring's p-1 latency steps since a GPU still serialises its p-1 sends).
- ring exchange (context parallelism's KV ring): every member sends S to the next, one
  step, whatever algorithm is asked for.
- hierarchical: reduce-scatter inside each package (Frontier's GCD pairs), then inside
  each node, the inter-node collective among same-local-index GPUs on S/k, then the mirror
  all-gathers (an all-gather runs only the gathers: the inter-node one first, as PCCL and
  ZeRO++'s hierarchical partitions do). Each level is a collective of its own on a
  sub-communicator (frameworks and PCCL build it from library calls), so each pays a
  launch and picks its protocol (`Schedule.separate_calls`).
- pat: NCCL's PAT all-gather / reduce-scatter (NCCL >= 2.23, one GPU per node;
  simulator/network/library.py): log2(p) exchanges at distances p/2, p/4, ... (the data
  each member moves is the ring's), at 0.85 of the ring's bus bandwidth.

Broadcast and reduce run as NCCL's pipelined chains: the buffer moves in chunks of the
protocol's step (NCCL: one slot of the 4 MiB Simple buffer, 512 KiB, BROADCAST_CHUNKSTEPS
1; LL 32 KiB of data per slot; LL128 576,000 B), so the last chunk leaves the root after
S / c and reaches the chain's end L - 1 chunk times later: a phase's bytes per flow are
S / c + (L - 1) x min(S / c, chunk) (`Phase.chain_hops`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from simulator.errors import CostModelError
from simulator.network.library import PAT_BANDWIDTH, Library, pat_enabled
from workloads.ops import CollectiveKind

ALGORITHMS = ("ring", "tree", "recursive-halving-doubling", "direct", "hierarchical", "pat")

CHAIN_CHUNK_BYTES = {"Simple": 524288.0, "LL": 32768.0, "LL128": 576000.0}
"""Bytes of data one pipelined-chain chunk carries per protocol (NCCL src/enqueue.cc
computeColl: stepSize = buffSize / NCCL_STEPS, chunkSize = stepSize x BROADCAST_CHUNKSTEPS
(1); buffers from src/init.cc: Simple 4 MiB, LL 8 lines x 512 threads x 8 steps x 16 B of
which half is data, LL128 120 x 640 x 8 x 8 B of which 120/128 is data)."""

K = CollectiveKind


@dataclass(frozen=True, eq=False)
class Phase:
    """Concurrent flows src[i] -> dst[i] (member positions), each carrying bytes_factor·S,
    or share[i]·bytes_factor·S when `share` is given (channels that split one logical
    edge of an algorithm over several GPU pairs)."""

    src: np.ndarray
    dst: np.ndarray
    bytes_factor: float
    steps: int
    share: np.ndarray | None = None
    inter_steps: int | None = None
    """Of `steps`, how many pay the network's latency when the phase crosses nodes (NCCL's
    tuning model: a ring all-reduce 2 x nodes, other rings nodes - 1, a tree 2 log2
    nodes); None: every step does."""
    chunk_factor: float = 0.0
    """The message one member forwards per step, as a fraction of S (a ring's S/p); 0
    where the phase has no single step message (trees, chains, all-pairs)."""
    chain_hops: int = 0
    """A pipelined chain's hops L (broadcast / reduce): its flows carry L - 1 chunks more
    than their share (the pipeline's fill); 0: not a chain."""

    @property
    def flow_volume(self) -> float:
        """Sum of the flows' shares: bytes moved by the phase / (bytes_factor · S)."""
        return float(self.share.sum()) if self.share is not None else float(len(self.src))


@dataclass(frozen=True, eq=False)
class Schedule:
    """The phases of one collective on one instance layout, run one after the other."""

    algorithm: str
    phases: tuple[Phase, ...]
    separate_calls: bool = False
    """Each phase is a collective call of its own (a launch, a protocol choice)."""

    @property
    def steps(self) -> int:
        return sum(p.steps for p in self.phases)


@dataclass(frozen=True)
class Layout:
    """Where the members of a group instance sit, position by position.

    node: node index of each position, renumbered 0.. in order of first appearance.
    local: GPU index within its node. package: package within the node (Frontier's GCD
    pairs; equal to local // package_size).
    """

    node: tuple[int, ...]
    local: tuple[int, ...]
    package: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.node)

    @property
    def num_nodes(self) -> int:
        return len(set(self.node))

    def positions_by(self, key: Sequence[object]) -> list[list[int]]:
        """Positions grouped by equal key, groups in order of first appearance."""
        groups: dict[object, list[int]] = {}
        for pos, k in enumerate(key):
            groups.setdefault(k, []).append(pos)
        return list(groups.values())


OrderFn = Callable[[Sequence[int]], list[int]]
"""Given positions that share a node, return them in the order a ring should visit them."""


def _identity_order(positions: Sequence[int]) -> list[int]:
    return list(positions)


def _ring_flows(rings: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    src: list[int] = []
    dst: list[int] = []
    for ring in rings:
        if len(ring) < 2:
            continue
        src.extend(ring)
        dst.extend([*list(ring[1:]), ring[0]])
    return np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)


def _chain_flows(chains: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    src: list[int] = []
    dst: list[int] = []
    for chain in chains:
        for a, b in pairwise(chain):
            src.append(a)
            dst.append(b)
    return np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)


def ring_channels(layout: Layout, order: OrderFn = _identity_order) -> list[list[int]]:
    """The ring orders (channels) NCCL-style rings would use on this layout."""
    per_node = layout.positions_by(layout.node)
    channels = getattr(order, "channels", None)
    if len(per_node) == 1:
        return channels(per_node[0]) if channels is not None else [order(per_node[0])]
    ordered = [order(ps) for ps in per_node]
    sizes = {len(ps) for ps in ordered}
    if len(sizes) != 1:
        return [[p for ps in ordered for p in ps]]
    k = sizes.pop()
    cycles = [channels(ps) for ps in per_node] if channels is not None else [[ps] for ps in ordered]
    if len({len(c) for c in cycles}) != 1:
        cycles = [[ps] for ps in ordered]
    # channel j enters every node at the node's j-th GPU (so each channel arrives, and
    # with PXN crosses the fabric, on a different rail) and crosses it along the node's
    # (j mod C)-th ring: NCCL/RCCL spread their channels over different intra-node paths
    # (e.g. Frontier's four xGMI rings) instead of stacking them on one
    out = []
    for j in range(k):
        ring: list[int] = []
        for base, node_cycles in zip(ordered, cycles, strict=True):
            cyc = node_cycles[j % len(node_cycles)]
            i = cyc.index(base[j])
            ring += cyc[i:] + cyc[:i]
        out.append(ring)
    return out


def _check_size(p: int) -> None:
    if p < 1:
        raise CostModelError(f"group size must be positive, got {p}")


def ring_schedule(
    kind: CollectiveKind, layout: Layout, order: OrderFn = _identity_order, root: int = 0
) -> Schedule:
    p = layout.size
    _check_size(p)
    if p == 1:
        return Schedule("ring", ())
    channels = ring_channels(layout, order)
    c = len(channels)
    if kind in (K.ALL_REDUCE, K.ALL_GATHER, K.REDUCE_SCATTER):
        src, dst = _ring_flows(channels)
        mult = 2 if kind is K.ALL_REDUCE else 1
        crossings = 2 * layout.num_nodes if kind is K.ALL_REDUCE else layout.num_nodes - 1
        return Schedule(
            "ring",
            (
                Phase(
                    src,
                    dst,
                    mult * (p - 1) / p / c,
                    mult * (p - 1),
                    inter_steps=crossings,
                    chunk_factor=1.0 / p,
                ),
            ),
        )
    if kind in (K.BROADCAST, K.REDUCE):
        chains = []
        for ring in channels:
            i = ring.index(root)
            chain = ring[i:] + ring[:i]
            chains.append(chain if kind is K.BROADCAST else chain[::-1])
        src, dst = _chain_flows(chains)
        phase = Phase(src, dst, 1.0 / c, p - 1, inter_steps=layout.num_nodes - 1, chain_hops=p - 1)
        return Schedule("ring", (phase,))
    raise CostModelError(f"algorithm 'ring' does not support {kind.value}")


def direct_schedule(kind: CollectiveKind, p: int, root: int = 0) -> Schedule:
    _check_size(p)
    if p == 1:
        return Schedule("direct", ())
    a, b = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    mask = a != b
    src, dst = a[mask].astype(np.int64), b[mask].astype(np.int64)
    if kind is K.ALL_TO_ALL:
        return Schedule("direct", (Phase(src, dst, 1.0 / p, 1),))
    if kind in (K.REDUCE_SCATTER, K.ALL_GATHER):
        return Schedule("direct", (Phase(src, dst, 1.0 / p, p - 1),))
    if kind is K.ALL_REDUCE:
        rs = Phase(src, dst, 1.0 / p, p - 1)
        return Schedule("direct", (rs, Phase(src, dst, 1.0 / p, p - 1)))
    others = np.array([i for i in range(p) if i != root], dtype=np.int64)
    rootv = np.full(p - 1, root, dtype=np.int64)
    if kind is K.BROADCAST:
        return Schedule("direct", (Phase(rootv, others, 1.0, 1),))
    if kind is K.REDUCE:
        return Schedule("direct", (Phase(others, rootv, 1.0, 1),))
    if kind is K.SEND_RECV:
        return Schedule("direct", (Phase(np.array([0]), np.array([1]), 1.0, 1),))
    raise CostModelError(f"algorithm 'direct' does not support {kind.value}")


def ring_exchange_schedule(p: int) -> Schedule:
    """Every position sends S to the next one at once: one synchronous step (a ring
    exchange is p concurrent send/recv pairs, so the network prices it as one phase)."""
    _check_size(p)
    if p == 1:
        return Schedule("direct", ())
    src = np.arange(p, dtype=np.int64)
    return Schedule("direct", (Phase(src, np.roll(src, -1), 1.0, 1),))


def _tree_edges(order: Sequence[int]) -> tuple[list[int], list[int], int]:
    """Heap-shaped binary tree over `order`: (children, parents, depth)."""
    children, parents = [], []
    for i in range(1, len(order)):
        children.append(order[i])
        parents.append(order[(i - 1) // 2])
    depth = int(np.floor(np.log2(len(order)))) if len(order) > 1 else 0
    return children, parents, depth


def _node_tree_edges(chains: list[list[int]], head_last: bool) -> tuple[list[int], list[int], int]:
    """NCCL-style tree: a chain inside each node and a binary tree over the nodes' heads.

    Returns (children, parents, depth in hops). With `head_last` each chain runs the
    other way, so its head (the GPU that talks across nodes) is the node's last GPU.
    """
    children: list[int] = []
    parents: list[int] = []
    heads: list[int] = []
    for chain in chains:
        c = chain[::-1] if head_last else chain
        heads.append(c[0])
        for a, b in pairwise(c):
            children.append(b)
            parents.append(a)
    ch, pa, depth = _tree_edges(heads[::-1] if head_last else heads)
    children += ch
    parents += pa
    return children, parents, depth + max(len(c) for c in chains) - 1


def _spread_tree_flows(
    chains: list[list[int]], head_last: bool
) -> tuple[list[int], list[int], list[float], int]:
    """One NCCL tree (see `_node_tree_edges`) with its inter-node edges spread over
    channels: the edge between two nodes' heads becomes one flow between the c-th GPUs of
    their chains for every c, each with share 1/C. Returns child -> parent flows
    (children, parents, shares) and the depth in hops."""
    oriented = [c[::-1] if head_last else c for c in chains]
    children: list[int] = []
    parents: list[int] = []
    shares: list[float] = []
    for chain in oriented:
        for a, b in pairwise(chain):
            children.append(b)
            parents.append(a)
            shares.append(1.0)
    order = oriented[::-1] if head_last else oriented
    for i in range(1, len(order)):
        child, parent = order[i], order[(i - 1) // 2]
        width = min(len(child), len(parent))
        for k in range(width):
            children.append(child[k])
            parents.append(parent[k])
            shares.append(1.0 / width)
    depth = int(np.floor(np.log2(len(order)))) if len(order) > 1 else 0
    return children, parents, shares, depth + max(len(c) for c in chains) - 1


def tree_schedule(
    kind: CollectiveKind, layout: Layout, order: OrderFn = _identity_order, root: int = 0
) -> Schedule:
    """NCCL's trees: intra-node chains joined by a binary tree over nodes; all-reduce uses
    two such trees (heads at opposite ends of the chains, node order mirrored), each
    carrying half of the buffer up (reduce) and down (broadcast), pipelined, with their
    inter-node edges spread over the nodes' rails as NCCL's channels spread them."""
    p = layout.size
    _check_size(p)
    if p == 1:
        return Schedule("tree", ())
    chains = [order(ps) for ps in layout.positions_by(layout.node)]
    if kind is K.ALL_REDUCE:
        c1, p1, s1, d1 = _spread_tree_flows(chains, head_last=False)
        c2, p2, s2, d2 = _spread_tree_flows(chains, head_last=True)
        src = np.asarray(c1 + p1 + c2 + p2, dtype=np.int64)
        dst = np.asarray(p1 + c1 + p2 + c2, dtype=np.int64)
        share = np.asarray(s1 + s1 + s2 + s2, dtype=np.float64)
        unit = bool((share == 1.0).all())
        log_nodes = int(np.floor(np.log2(len(chains))))
        steps = 2 * max(d1, d2, 1)
        phase = Phase(src, dst, 0.5, steps, None if unit else share, 2 * log_nodes)
        return Schedule("tree", (phase,))
    if kind in (K.BROADCAST, K.REDUCE):
        home = next(i for i, c in enumerate(chains) if root in c)
        rooted = chains[home:] + chains[:home]
        first = rooted[0]
        k = first.index(root)
        rooted[0] = first[k:] + first[:k]
        ch, pa, depth = _node_tree_edges(rooted, head_last=False)
        pair = (pa, ch) if kind is K.BROADCAST else (ch, pa)
        src, dst = (np.asarray(x, dtype=np.int64) for x in pair)
        return Schedule("tree", (Phase(src, dst, 1.0, max(depth, 1)),))
    raise CostModelError(f"algorithm 'tree' does not support {kind.value}")


def rhd_schedule(kind: CollectiveKind, p: int) -> Schedule:
    _check_size(p)
    if p & (p - 1):
        raise CostModelError(
            f"algorithm 'recursive-halving-doubling' needs a power-of-two group, got {p}"
        )
    if p == 1:
        return Schedule("recursive-halving-doubling", ())
    pos = np.arange(p, dtype=np.int64)
    levels = int(np.log2(p))
    halving = [Phase(pos, pos ^ (p >> (k + 1)), 1.0 / 2 ** (k + 1), 1) for k in range(levels)]
    doubling = [Phase(pos, pos ^ (1 << k), (1 << k) / p, 1) for k in range(levels)]
    if kind is K.REDUCE_SCATTER:
        return Schedule("recursive-halving-doubling", tuple(halving))
    if kind is K.ALL_GATHER:
        return Schedule("recursive-halving-doubling", tuple(doubling))
    if kind is K.ALL_REDUCE:
        return Schedule("recursive-halving-doubling", tuple(halving + doubling))
    raise CostModelError(f"algorithm 'recursive-halving-doubling' does not support {kind.value}")


def _level_partition(layout: Layout, order: OrderFn) -> list[list[list[int]]]:
    """Units per level, finest first: package (if it splits nodes), node; each unit's
    positions in ring order. The top level (across nodes) is derived by the caller."""
    levels: list[list[list[int]]] = []
    by_node = [order(ps) for ps in layout.positions_by(layout.node)]
    pkg_key = list(zip(layout.node, layout.package, strict=True))
    by_pkg = [order(ps) for ps in layout.positions_by(pkg_key)]
    if 1 < max(len(u) for u in by_pkg) < max(len(u) for u in by_node):
        levels.append(by_pkg)
    levels.append(by_node)
    return levels


def hierarchical_schedule(
    kind: CollectiveKind, layout: Layout, order: OrderFn = _identity_order
) -> Schedule:
    """Intra-level reduce-scatters, the top-level collective on the shard, mirror all-gathers."""
    p = layout.size
    _check_size(p)
    if kind not in (K.ALL_REDUCE, K.REDUCE_SCATTER, K.ALL_GATHER):
        raise CostModelError(f"algorithm 'hierarchical' does not support {kind.value}")
    if p == 1:
        return Schedule("hierarchical", ())
    levels = _level_partition(layout, order)
    # Check equal unit sizes at each level.
    for units in levels:
        if len({len(u) for u in units}) != 1:
            raise CostModelError(
                "algorithm 'hierarchical' needs the same number of group members in every node/package"
            )
    down: list[Phase] = []  # reduce-scatter phases, finest first
    up: list[Phase] = []  # all-gather phases, coarsest first (built reversed)
    fraction = 1.0  # share of S each position still owns entering a level
    # rings at level 0 are the units; at level 1 the units of level 1 restricted to same
    # index-within-level-0-unit; the top ring links same-index positions across nodes.
    index_in_unit: dict[int, tuple[int, ...]] = {
        q: (i,) for units in levels[:1] for u in units for i, q in enumerate(u)
    }
    current_units = levels[0]
    for lvl in range(len(levels) + 1):
        if lvl == 0:
            rings = current_units
        elif lvl < len(levels):
            rings = _split_by_index(levels[lvl], index_in_unit)
            index_in_unit = {q: index_in_unit[q] + (i,) for r in rings for i, q in enumerate(r)}
        else:
            rings = _split_by_index([list(range(p))], index_in_unit)
        k = len(rings[0]) if rings else 1
        if k <= 1:
            continue
        src, dst = _ring_flows(rings)
        is_top = lvl == len(levels)
        chunk = fraction / k  # each member's step message at this level
        if is_top and kind is K.ALL_REDUCE:
            down.append(
                Phase(src, dst, 2 * (k - 1) / k * fraction, 2 * (k - 1), chunk_factor=chunk)
            )
        else:
            if kind in (K.ALL_REDUCE, K.REDUCE_SCATTER):
                down.append(Phase(src, dst, (k - 1) / k * fraction, k - 1, chunk_factor=chunk))
            if kind in (K.ALL_REDUCE, K.ALL_GATHER):
                up.append(Phase(src, dst, (k - 1) / k * fraction, k - 1, chunk_factor=chunk))
        fraction /= k
    if kind is K.ALL_GATHER:
        return Schedule("hierarchical", tuple(reversed(up)), separate_calls=True)
    return Schedule("hierarchical", tuple(down) + tuple(reversed(up)), separate_calls=True)


def pat_schedule(kind: CollectiveKind, p: int) -> Schedule:
    """NCCL's PAT (one GPU per node): log2(p) exchanges (recursive doubling for an
    all-gather, halving for a reduce-scatter) at 0.85 of the ring's bus bandwidth
    (tuning.cc `busBw *= .85`), the bytes inflated accordingly."""
    if kind not in (K.ALL_GATHER, K.REDUCE_SCATTER):
        raise CostModelError(f"algorithm 'pat' does not support {kind.value}")
    base = rhd_schedule(kind, p)
    phases = tuple(
        Phase(ph.src, ph.dst, ph.bytes_factor / PAT_BANDWIDTH, ph.steps) for ph in base.phases
    )
    return Schedule("pat", phases)


def _split_by_index(
    units: list[list[int]], index_in_unit: dict[int, tuple[int, ...]]
) -> list[list[int]]:
    """Split each unit's positions into rings of equal finer-level index."""
    rings: list[list[int]] = []
    for u in units:
        groups: dict[tuple[int, ...], list[int]] = {}
        for q in u:
            groups.setdefault(index_in_unit[q], []).append(q)
        rings.extend(groups.values())
    return rings


def build_schedule(
    algorithm: str,
    kind: CollectiveKind,
    layout: Layout,
    order: OrderFn = _identity_order,
    root: int = 0,
) -> Schedule:
    """The schedule of `algorithm` for `kind` on a group with this layout."""
    if kind is K.SEND_RECV:
        return direct_schedule(kind, 2)
    if kind is K.RING_EXCHANGE:
        return ring_exchange_schedule(layout.size)
    if algorithm == "ring":
        return ring_schedule(kind, layout, order, root)
    if algorithm == "tree":
        return tree_schedule(kind, layout, order, root)
    if algorithm == "recursive-halving-doubling":
        return rhd_schedule(kind, layout.size)
    if algorithm == "direct":
        return direct_schedule(kind, layout.size, root)
    if algorithm == "hierarchical":
        return hierarchical_schedule(kind, layout, order)
    if algorithm == "pat":
        return pat_schedule(kind, layout.size)
    raise CostModelError(
        f"unknown collective algorithm '{algorithm}' (use one of {', '.join(ALGORITHMS)})"
    )


def candidate_algorithms(
    kind: CollectiveKind, layout: Layout, library: Library | None = None
) -> tuple[str, ...]:
    """Algorithms the library build would consider (the tuner picks the fastest),
    following NCCL/RCCL's enable conditions (simulator/network/library.py).

    Inside one node: ring and the all-pairs exchange (NVSwitch / fully connected nodes);
    across nodes: ring, plus the double binary tree for all-reduce, plus PAT for
    all-gather / reduce-scatter where the build has it and every member is on its own
    node (power-of-two groups here); broadcast / reduce: the ring's pipelined chain only
    (tuning.cc skips every other algorithm for them); all-to-all is always direct.
    """
    if kind in (K.ALL_TO_ALL, K.SEND_RECV, K.RING_EXCHANGE):
        return ("direct",)
    if kind in (K.BROADCAST, K.REDUCE):
        return ("ring",)
    if layout.num_nodes == 1:
        return ("ring", "direct")
    if kind is K.ALL_REDUCE:
        return ("ring", "tree")
    p = layout.size
    if library is not None and pat_enabled(library, layout.num_nodes, p) and not p & (p - 1):
        return ("ring", "pat")
    return ("ring",)
