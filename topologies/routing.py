"""Routers: structural routing for machine presets, shortest paths for custom topologies.

`MachineRouter` composes a route from pieces that are computed once: the node-local path
table of the node type (GPU to GPU inside a node), the path from a GPU to the NIC it uses
and from a NIC to a GPU, the NIC links, and the fabric's switch-to-switch paths. A route
is then a handful of integer additions and tuple concatenations, fast enough for the
hundreds of thousands of GPU pairs a large collective schedule touches; no graph search
and no networkx graph at routing time. `MachineRouter.routes_batch` does the same for
arrays of pairs with numpy (per-GPU padded head / tail / node-local tables, the fabric's
`paths_batch`), because a Python call per pair still dominated binding at 32k GPUs; the
scalar `route` stays the reference it must match exactly.

`ShortestPathRouter` serves custom topologies: fewest hops, then the widest bottleneck,
then the lowest link id (see `topologies.paths`), one predecessor tree per source device,
computed on the networkx view on first use.
"""

from __future__ import annotations

import copy

import numpy as np

from topologies.batch_routing import PaddedPaths, compact, in_chunks
from topologies.errors import TopologyError
from topologies.fabric import FabricBatch, FabricPaths
from topologies.nodes import NodeTemplate
from topologies.paths import tree_path, widest_shortest_tree
from topologies.types import Route, RouteBatch, Topology


class MachineRouter:
    """Routes between GPUs of a machine built from a node template and a fabric.

    Device layout it relies on (the one `build_machine` produces): node n's devices are
    `n * D + local` (D devices per node), node n's links `n * L + local` (L links per
    node), the NIC links of endpoint e = n * K + k are `nic_link_base + 2e` (NIC to
    switch) and `nic_link_base + 2e + 1` (switch to NIC).
    """

    def __init__(
        self, template: NodeTemplate, fabric: FabricPaths, *, nodes: int, nic_link_base: int
    ) -> None:
        self.devices_per_node = template.num_devices
        self.links_per_node = template.num_links
        self.nics_per_node = template.nics_per_node
        self.nodes = nodes
        self.fabric = fabric
        self.nic_link_base = nic_link_base
        self.local = dict(template.paths)
        self.to_nic: dict[int, tuple[tuple[int, ...], int]] = {}
        self.from_nic: dict[int, tuple[int, ...]] = {}
        self._heads: dict[int, tuple[int, tuple[int, ...]]] = {}
        self._tails: dict[int, tuple[int, tuple[int, ...]]] = {}
        for g, dev in enumerate(template.gpus):
            k = template.gpu_nic[g]
            nic = template.nics[k]
            self.to_nic[dev] = (template.paths[(dev, nic)], k)
            self.from_nic[dev] = template.paths[(nic, dev)]
        self._batch = _BatchTables(template)
        self._fabric_batch: FabricBatch | None = getattr(fabric, "paths_batch", None)
        shape: tuple[int, int] = getattr(fabric, "batch_shape", (1, 0))
        tables = self._batch
        width = tables.head.shape[1] + shape[1] + tables.tail.shape[1] + 2  # + 2 NIC links
        self._bound = (max(shape[0], 1), max(width, tables.local.shape[2]))

    def variant(self, policy: str) -> MachineRouter | None:
        """This router with the fabric routed by `policy`, or None when the fabric has a
        single policy (no `variant`)."""
        make = getattr(self.fabric, "variant", None)
        if make is None:
            return None
        out = copy.copy(self)
        out.fabric = make(policy)
        out._fabric_batch = getattr(out.fabric, "paths_batch", None)
        shape: tuple[int, int] = getattr(out.fabric, "batch_shape", (1, 0))
        tables = self._batch
        width = tables.head.shape[1] + shape[1] + tables.tail.shape[1] + 2
        out._bound = (max(shape[0], 1), max(width, tables.local.shape[2]))
        return out

    def _locate(self, topology: Topology, device: int) -> tuple[int, int]:
        node, local = divmod(device, self.devices_per_node)
        if not 0 <= node < self.nodes or local not in self.to_nic:
            name = (
                topology.device_name(device) if 0 <= device < topology.num_devices else str(device)
            )
            raise TopologyError(f"device {name} is not a GPU of this machine")
        return node, local

    def route(self, topology: Topology, src: int, dst: int) -> Route:
        """The route from GPU device `src` to GPU device `dst` (device ids)."""
        ns, ls = self._locate(topology, src)
        nd, ld = self._locate(topology, dst)
        stride = self.links_per_node
        if ns == nd:
            if ls == ld:
                raise TopologyError(f"no route from {topology.device_name(src)} to itself")
            off = ns * stride
            return Route((tuple(off + x for x in self.local[(ls, ld)]),), (1.0,))
        e_src, head = self._head(src, ns, ls)
        e_dst, tail = self._tail(dst, nd, ld)
        paths, weights = self.fabric.paths(e_src, e_dst)
        return Route(tuple(head + p + tail for p in paths), weights)

    def routes_batch(self, topology: Topology, src: np.ndarray, dst: np.ndarray) -> RouteBatch:
        """Routes from GPU devices `src[i]` to `dst[i]`, exactly as `route` gives them."""
        tables = self._batch
        ns, ls = np.divmod(src, self.devices_per_node)
        nd, ld = np.divmod(dst, self.devices_per_node)
        gs, gd = tables.gpu_slot[ls], tables.gpu_slot[ld]
        bad = (ns < 0) | (ns >= self.nodes) | (nd < 0) | (nd >= self.nodes)
        bad |= (gs < 0) | (gd < 0) | ((ns == nd) & (gs == gd))
        if bad.any():
            i = int(np.argmax(bad))
            self.route(topology, int(src[i]), int(dst[i]))  # raises the scalar error
        fabric = self._fabric_batch
        if fabric is None:
            pairs = zip(src.tolist(), dst.tolist(), strict=True)
            return RouteBatch.from_routes([self.route(topology, a, b) for a, b in pairs])
        return in_chunks(
            int(src.shape[0]),
            lambda sl: self._route_chunk(fabric, ns[sl], gs[sl], nd[sl], gd[sl]),
            self._bound,
        )

    def _route_chunk(
        self, fabric: FabricBatch, ns: np.ndarray, gs: np.ndarray, nd: np.ndarray, gd: np.ndarray
    ) -> RouteBatch:
        """One chunk of pairs given as (node, GPU slot) of source and destination."""
        intra = ns == nd
        parts: list[tuple[np.ndarray, PaddedPaths]] = []
        if intra.any():
            rows = np.flatnonzero(intra)
            parts.append((rows, self._intra_padded(ns[rows], gs[rows], gd[rows])))
        if not intra.all():
            rows = np.flatnonzero(~intra)
            inter = self._inter_padded(fabric, ns[rows], gs[rows], nd[rows], gd[rows])
            parts.append((rows, inter))
        if len(parts) == 1:
            return compact(parts[0][1])
        p = max(part.links.shape[1] for _, part in parts)
        length = max(part.links.shape[2] for _, part in parts)
        out = PaddedPaths.empty(int(ns.shape[0]), p, length)
        for rows, part in parts:
            out.put(rows, part)
        return compact(out)

    def _intra_padded(self, node: np.ndarray, gs: np.ndarray, gd: np.ndarray) -> PaddedPaths:
        """The node-local path of each pair (one path, weight 1)."""
        rel = self._batch.local[gs, gd]
        links = _shift(rel, node * self.links_per_node)[:, None, :]
        n = int(node.shape[0])
        return PaddedPaths(links, np.ones((n, 1)), np.ones((n, 1), dtype=bool))

    def _inter_padded(
        self,
        fabric_batch: FabricBatch,
        ns: np.ndarray,
        gs: np.ndarray,
        nd: np.ndarray,
        gd: np.ndarray,
    ) -> PaddedPaths:
        """Head (GPU to its NIC's switch) + each fabric path + tail (switch to GPU)."""
        tables, k, stride = self._batch, self.nics_per_node, self.links_per_node
        e_src, e_dst = ns * k + tables.nic[gs], nd * k + tables.nic[gd]
        fabric = fabric_batch(e_src, e_dst)
        head = np.concatenate(
            [_shift(tables.head[gs], ns * stride), (self.nic_link_base + 2 * e_src)[:, None]],
            axis=1,
        )
        tail = np.concatenate(
            [(self.nic_link_base + 2 * e_dst + 1)[:, None], _shift(tables.tail[gd], nd * stride)],
            axis=1,
        )
        n, p, _ = fabric.links.shape
        links = np.concatenate(
            [
                np.broadcast_to(head[:, None, :], (n, p, head.shape[1])),
                fabric.links,
                np.broadcast_to(tail[:, None, :], (n, p, tail.shape[1])),
            ],
            axis=2,
        )
        return PaddedPaths(links, fabric.weight, fabric.valid)

    def _head(self, device: int, node: int, local: int) -> tuple[int, tuple[int, ...]]:
        """(endpoint, links from the GPU to its NIC's switch), cached per GPU."""
        got = self._heads.get(device)
        if got is None:
            path, k = self.to_nic[local]
            e = node * self.nics_per_node + k
            off = node * self.links_per_node
            got = self._heads[device] = (e, (*(off + x for x in path), self.nic_link_base + 2 * e))
        return got

    def _tail(self, device: int, node: int, local: int) -> tuple[int, tuple[int, ...]]:
        """(endpoint, links from the NIC's switch to the GPU), cached per GPU."""
        got = self._tails.get(device)
        if got is None:
            e = node * self.nics_per_node + self.to_nic[local][1]
            off = node * self.links_per_node
            got = self._tails[device] = (
                e,
                (self.nic_link_base + 2 * e + 1, *(off + x for x in self.from_nic[local])),
            )
        return got


class _BatchTables:
    """A node template's paths as -1-padded arrays indexed by GPU slot (its GPU number)."""

    def __init__(self, template: NodeTemplate) -> None:
        gpus = template.gpus
        self.gpu_slot = np.full(template.num_devices, -1, dtype=np.int64)
        self.gpu_slot[list(gpus)] = np.arange(len(gpus))
        self.nic = np.asarray(template.gpu_nic, dtype=np.int64)
        local = {
            (i, j): template.paths[(a, b)]
            for i, a in enumerate(gpus)
            for j, b in enumerate(gpus)
            if i != j
        }
        width = max((len(p) for p in local.values()), default=0)
        self.local = np.full((len(gpus), len(gpus), width), -1, dtype=np.int64)
        for (i, j), path in local.items():
            self.local[i, j, : len(path)] = path
        nics = [template.nics[k] for k in template.gpu_nic]
        self.head = _pad([template.paths[(g, nic)] for g, nic in zip(gpus, nics, strict=True)])
        self.tail = _pad([template.paths[(nic, g)] for g, nic in zip(gpus, nics, strict=True)])


def _pad(paths: list[tuple[int, ...]]) -> np.ndarray:
    """Paths as rows of a -1-padded int64 matrix."""
    out = np.full((len(paths), max(map(len, paths), default=0)), -1, dtype=np.int64)
    for i, path in enumerate(paths):
        out[i, : len(path)] = path
    return out


def _shift(rel: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """Node-relative link ids plus each row's node offset; -1 (no link) stays -1."""
    return np.where(rel >= 0, rel + offset[:, None], -1)


class ShortestPathRouter:
    """Widest-shortest single-path routing on the topology's networkx graph (custom topologies)."""

    def __init__(self) -> None:
        self._adjacency: list[list[tuple[int, int, float]]] | None = None
        self._link_src: list[int] = []
        self._trees: dict[int, list[int]] = {}

    def _prepare(self, topology: Topology) -> list[list[tuple[int, int, float]]]:
        if self._adjacency is None:
            g = topology.graph
            self._adjacency = [
                sorted(
                    (int(v), int(d["id"]), float(d["bandwidth_Bps"])) for v, d in g.succ[u].items()
                )
                for u in range(topology.num_devices)
            ]
            self._link_src = topology.links.src.tolist()
        return self._adjacency

    def route(self, topology: Topology, src: int, dst: int) -> Route:
        """The widest-shortest path from device `src` to device `dst`."""
        adjacency = self._prepare(topology)
        tree = self._trees.get(src)
        if tree is None:
            tree = self._trees[src] = widest_shortest_tree(adjacency, src)
        path = tree_path(tree, self._link_src, src, dst)
        if not path:
            raise TopologyError(
                f"no route from {topology.device_name(src)} to {topology.device_name(dst)}"
            )
        return Route((path,), (1.0,))
