"""Rank classes refined by behaviour: colour refinement over the rank / group hypergraph.

Why: the symmetric mode simulates one rank per class and activates all of a class's group
instances together, so a class's members must be interchangeable: equally fast, and in
group instances of one class make-up. A workload's own classes say that for a lockstep
run. A straggler, a node of another GPU type or a grid whose groups mix GPU positions
unevenly breaks it for some ranks, and the full mode then simulated every rank (one
straggler on 256 GPUs: minutes instead of a second). What differs is usually little: the
straggler, the members of its groups, the members of theirs. Colour refinement (1-WL,
Weisfeiler-Leman) finds exactly those classes.

Seeds: everything that makes ranks differ on their own (the workload's class, hence its
program; GPU position class in the node; straggler factor; GPU type) and, per group kind,
the layout of the rank's instance (its members' node offsets and GPU local indices, up to
a symmetry of the node): instances of one class make-up are activated together and
finish with their slowest bundle, which is what per-instance pricing gives them only when
they are laid out alike (x = 3 on 4-GPU nodes: one instance inside a node, the next
across two; on Frontier's 8-GCD nodes, GCDs 0, 1, 2 and 2, 3, 4 join by Infinity Fabric
links of other widths). Each round a rank's colour becomes (its colour, per group kind
the colours of its instance's members in position order, and for groups used by
send/recv its own position there); the rounds stop when no class splits. The result is
the coarsest partition finer than the seeds in which two ranks of one class sit, for every
group kind, in instances whose members are of the same classes position by position:
what the symmetric mode needs (`modes.symmetric_problem` still checks it), and, since
the engine is deterministic, ranks of one class then run identical timelines, as in the
full mode (tests compare the two per rank).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from topologies.positions import canonical_locals, local_symmetries, node_position_classes
from topologies.rows import unique_rows
from topologies.types import Topology
from workloads.graph import OpGraph
from workloads.ops import RecvOp, SendOp

MAX_ROUNDS = 1 << 16
"""A bound far beyond any grid (each round splits at least one class, and the rounds a
4-D grid needs are a handful); a guard against a bug, not a tuning constant."""


def p2p_group_names(graph: OpGraph) -> frozenset[str]:
    """Group kinds some program sends or receives on (a member's position matters)."""
    return frozenset(
        op.group for p in graph.programs for op in p.ops if isinstance(op, SendOp | RecvOp)
    )


def canonical(columns: np.ndarray) -> np.ndarray:
    """Class ids of the rows of a 2-D table, numbered by first occurrence (rank 0's class
    is 0), so the numbering does not depend on the seeds' encodings."""
    first, inverse = unique_rows(columns)
    order = np.argsort(first, kind="stable")
    label = np.empty(first.shape[0], dtype=np.int64)
    label[order] = np.arange(first.shape[0], dtype=np.int64)
    return label[inverse]


def first_occurrence(table: np.ndarray) -> np.ndarray:
    """Each row's values renumbered by first occurrence (0, 1, ... in row order): the
    pattern of equal values, whatever the values."""
    out = np.empty_like(table)
    for i, row in enumerate(table.tolist()):
        seen: dict[int, int] = {}
        out[i] = [seen.setdefault(x, len(seen)) for x in row]
    return out


def fabric_attachment(topology: Topology) -> np.ndarray | None:
    """Per node (columns): the id of the set of fabric switches its devices link to, and
    the fabric group of the first (rows); None without a fabric (one node, a custom
    topology whose switches belong to nodes)."""
    devices, links = topology.devices, topology.links
    nodes = int(devices.node.max(initial=-1)) + 1
    src_node = devices.node[links.src]
    out = (src_node >= 0) & (devices.node[links.dst] < 0)
    if nodes <= 1 or not out.any():
        return None
    pairs = sorted(set(zip(src_node[out].tolist(), links.dst[out].tolist(), strict=True)))
    per_node: list[list[int]] = [[] for _ in range(nodes)]
    for n, sw in pairs:
        per_node[n].append(sw)
    ids: dict[tuple[int, ...], int] = {}
    attach = np.array([ids.setdefault(tuple(x), len(ids)) for x in per_node], dtype=np.int64)
    group = np.array([int(devices.group[x[0]]) if x else -1 for x in per_node], dtype=np.int64)
    return np.stack([attach, group])


def layout_seeds(
    graph: OpGraph,
    node: np.ndarray,
    local: np.ndarray,
    symmetries: Callable[[], np.ndarray | None],
) -> list[np.ndarray]:
    """Per group kind, per rank: the layout id of its instance (its members' node offsets
    from the first member's node and their GPU local indices in canonical form under the
    node's symmetries, `topologies.positions.canonical_locals`; -1 outside the group
    kind), where a group kind's instances are not all laid out alike. `node` and `local`:
    per rank, its GPU's node and local index (`node` may carry more rows: per rank, its
    node's `fabric_attachment`); `symmetries()` the node's
    (`topologies.positions.local_symmetries`, asked only where instances differ). Instances a symmetry of the node maps onto
    each other are priced alike, as the symmetric mode has always assumed; others (GCDs
    0, 1, 2 and 2, 3, 4 of a Frontier node) may not be."""
    out: list[np.ndarray] = []
    rows = node if node.ndim == 2 else node[None, :]
    for kind in graph.groups.values():
        if kind.num_instances <= 1:
            continue
        nodes = rows[0][kind.members]
        offsets, locals_ = nodes - nodes[:, :1], local[kind.members]
        # where the members enter the fabric: the pattern of equal leaf switches and of
        # equal fabric groups among them (instances on one switch, across two, across
        # two dragonfly groups route differently)
        fabric = [first_occurrence(r[kind.members]) for r in rows[1:]]
        if (
            (offsets == offsets[:1]).all()
            and (locals_ == locals_[:1]).all()
            and all((f == f[:1]).all() for f in fabric)
        ):
            continue
        key = np.concatenate([offsets, canonical_locals(locals_, symmetries()), *fabric], axis=1)
        if (key == key[:1]).all():
            continue
        _, layout = unique_rows(key)
        col = np.full(graph.world_size, -1, dtype=np.int64)
        inst = kind.instance_of
        member = inst >= 0
        col[member] = layout[inst[member]]
        out.append(col)
    return out


def refine_classes(graph: OpGraph, seeds: Sequence[np.ndarray]) -> np.ndarray:
    """The coarsest stable refinement of the seeds' partition (see the module doc): one
    class id per rank, numbered by first occurrence."""
    world = graph.world_size
    cols = [np.asarray(s, dtype=np.int64).reshape(world) for s in seeds]
    colour = canonical(np.stack(cols, axis=1)) if cols else np.zeros(world, dtype=np.int64)
    p2p = p2p_group_names(graph)
    count = int(colour.max(initial=-1)) + 1
    for _ in range(MAX_ROUNDS):
        parts = [colour]
        for name, kind in graph.groups.items():
            _, sig = unique_rows(colour[kind.members])
            col = np.full(world, -1, dtype=np.int64)
            inst = kind.instance_of
            member = inst >= 0
            col[member] = sig[inst[member]]
            parts.append(col)
            if name in p2p:
                parts.append(kind.position_of)
        colour = canonical(np.stack(parts, axis=1))
        new = int(colour.max(initial=-1)) + 1
        if new == count:
            return colour
        count = new
    raise AssertionError("colour refinement did not converge")  # pragma: no cover


def rank_seeds(
    graph: OpGraph,
    topology: Topology,
    placement: np.ndarray,
    factors: np.ndarray,
    gpu_types: np.ndarray | None,
) -> list[np.ndarray]:
    """The seeds of a run's refinement, one column per rank: the workload's class (else
    its program), the program, the GPU position class in the node (where the node's GPUs
    are wired differently, topologies/positions.py), the compute slowdown (`factors`,
    stragglers), the GPU type code (`gpu_types`, per GPU index, on a mixed machine) and
    per group kind the instance's layout (`layout_seeds`)."""
    own = graph.rank_class if graph.rank_class is not None else graph.rank_program
    seeds = [np.asarray(own, dtype=np.int64), graph.rank_program.astype(np.int64)]
    classes = node_position_classes(topology)
    if classes is not None:
        seeds.append(classes[placement].astype(np.int64))
    _, factor_id = np.unique(np.asarray(factors, dtype=np.float64), return_inverse=True)
    seeds.append(factor_id.reshape(-1).astype(np.int64))
    if gpu_types is not None:
        seeds.append(np.asarray(gpu_types, dtype=np.int64)[placement])
    device = topology.gpus[placement]
    node = topology.devices.node[device].astype(np.int64)
    local = topology.devices.local_index[device].astype(np.int64)
    attach = fabric_attachment(topology)  # per node: its leaf switches, their fabric group
    if attach is not None:
        node = np.stack([node, *attach[:, node]], axis=0)
    found: list[np.ndarray | None] = []

    def symmetries() -> np.ndarray | None:
        if not found:
            found.append(local_symmetries(topology))
        return found[0]

    return seeds + layout_seeds(graph, node, local, symmetries)
