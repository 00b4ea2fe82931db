"""Routers: structural routing for machine presets, shortest paths for custom topologies.

`MachineRouter` composes a route from pieces that are computed once: the node-local path
table of the node type (GPU to GPU inside a node), the path from a GPU to the NIC it uses
and from a NIC to a GPU, the NIC links, and the fabric's switch-to-switch paths. A route
is then a handful of integer additions and tuple concatenations, fast enough for the
hundreds of thousands of GPU pairs a large collective schedule touches; no graph search
and no networkx graph at routing time.

`ShortestPathRouter` serves custom topologies: fewest hops, then the widest bottleneck,
then the lowest link id (see `topologies.paths`), one predecessor tree per source device,
computed on the networkx view on first use.
"""

from __future__ import annotations

from topologies.errors import TopologyError
from topologies.fabric import FabricPaths
from topologies.nodes import NodeTemplate
from topologies.paths import tree_path, widest_shortest_tree
from topologies.types import Route, Topology


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
