"""The Topology type: devices and directed links of a cluster, with cached routing.

A topology is stored columnar (numpy arrays) so machines with tens of thousands of GPUs
and hundreds of thousands of links stay compact; the networkx view (`Topology.graph`) is
built on first access for users and for generic routing. Units are SI and carried in the
names: `bandwidth_Bps` (bytes/s per direction), `latency_s`.

Links are directed: a bidirectional cable is two links, one per direction, each with the
full per-direction bandwidth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

import numpy as np

from topologies.errors import TopologyError

if TYPE_CHECKING:
    import networkx as nx


class DeviceKind(StrEnum):
    """What a device of the topology graph is."""

    GPU = "gpu"
    NIC = "nic"
    SWITCH = "switch"
    CPU = "cpu"


class LinkKind(StrEnum):
    """The technology tier of a directed link; the network model groups links by it."""

    NVLINK = "nvlink"  # NVLink, direct or GPU<->NVSwitch
    XGMI = "xgmi"  # AMD Infinity Fabric between GCDs
    PCIE = "pcie"  # PCIe (GPU<->NIC, GPU<->CPU, GPU<->GPU without NVLink)
    C2C = "c2c"  # NVLink-C2C between Grace and Hopper
    NIC = "nic"  # NIC <-> first-level switch (injection link)
    LOCAL = "local"  # switch <-> switch inside a dragonfly group / fat-tree pod
    GLOBAL = "global"  # switch <-> switch between dragonfly groups / fat-tree core


DEVICE_KINDS: tuple[DeviceKind, ...] = tuple(DeviceKind)
LINK_KINDS: tuple[LinkKind, ...] = tuple(LinkKind)


@dataclass(frozen=True, slots=True)
class Device:
    """One device (node of the graph). `node` is -1 for fabric switches."""

    id: int
    name: str
    kind: DeviceKind
    node: int
    local_index: int
    group: int


@dataclass(frozen=True, slots=True)
class Link:
    """One directed link (edge of the graph)."""

    id: int
    src: int
    dst: int
    kind: LinkKind
    bandwidth_Bps: float
    latency_s: float


Path = tuple[int, ...]
"""A path is a tuple of link ids, from the source device to the destination device."""


@dataclass(frozen=True, slots=True)
class Route:
    """How traffic from one GPU to another is carried.

    `paths` are alternative link paths and `weights` the fraction of the traffic on each
    (summing to 1). Static routing has one path of weight 1; ECMP / adaptive routing
    spreads traffic over several. `primary` is the path a single packet stream takes.
    """

    paths: tuple[Path, ...]
    weights: tuple[float, ...]

    @property
    def primary(self) -> Path:
        """The highest-weight path (first on ties)."""
        best = max(range(len(self.paths)), key=lambda i: (self.weights[i], -i))
        return self.paths[best]


class Router(Protocol):
    """Computes routes between devices of a topology (GPU device ids).

    A router may also implement `BatchRouter.routes_batch`; `Topology.routes_batch` uses it
    when present and falls back to `route` pair by pair otherwise.
    """

    def route(self, topology: Topology, src: int, dst: int) -> Route:
        """The route from device `src` to device `dst` (src != dst)."""
        ...


@dataclass(frozen=True, slots=True)
class RouteBatch:
    """The routes of many GPU pairs as flat arrays, pair after pair, path after path.

    Binding a collective on a large machine touches hundreds of thousands of pairs; one
    `Route` object per pair costs more in Python than the pricing that follows, so batch
    routing returns numpy arrays that the network model reduces directly. Route i owns the
    `paths_per_route[i]` paths after those of routes 0..i-1; path j owns `path_len[j]`
    entries of `links` after those of paths 0..j-1 and carries `path_weight[j]` of the
    traffic. Pair by pair it holds exactly what `Topology.route` returns.
    """

    links: np.ndarray  # int64, the links of every path, path after path
    path_len: np.ndarray  # int64, links per path
    path_weight: np.ndarray  # float64, traffic fraction per path
    paths_per_route: np.ndarray  # int64, paths per GPU pair

    def __len__(self) -> int:
        return int(self.paths_per_route.shape[0])

    @classmethod
    def empty(cls) -> RouteBatch:
        """A batch of no pairs."""
        none = np.zeros(0, dtype=np.int64)
        return cls(none, none.copy(), np.zeros(0, dtype=np.float64), none.copy())

    @classmethod
    def from_routes(cls, routes: Sequence[Route]) -> RouteBatch:
        """Flatten scalar routes (the fallback for routers without a batch method)."""
        links: list[int] = []
        path_len: list[int] = []
        weights: list[float] = []
        for r in routes:
            for p in r.paths:
                links.extend(p)
                path_len.append(len(p))
            weights.extend(r.weights)
        return cls(
            links=np.asarray(links, dtype=np.int64),
            path_len=np.asarray(path_len, dtype=np.int64),
            path_weight=np.asarray(weights, dtype=np.float64),
            paths_per_route=np.asarray([len(r.paths) for r in routes], dtype=np.int64),
        )

    @classmethod
    def concatenate(cls, parts: Sequence[RouteBatch]) -> RouteBatch:
        """The batches one after the other (their pairs in order)."""
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        return cls(
            links=np.concatenate([p.links for p in parts]),
            path_len=np.concatenate([p.path_len for p in parts]),
            path_weight=np.concatenate([p.path_weight for p in parts]),
            paths_per_route=np.concatenate([p.paths_per_route for p in parts]),
        )


class BatchRouter(Router, Protocol):
    """A router that also routes many device pairs at once, exactly like `route`."""

    def routes_batch(self, topology: Topology, src: np.ndarray, dst: np.ndarray) -> RouteBatch:
        """Routes from devices `src[i]` to `dst[i]` (int64 device ids, all valid GPUs)."""
        ...


@dataclass(frozen=True, slots=True)
class DeviceTable:
    """Columnar device records. Row i is device id i."""

    kind: np.ndarray  # int8 index into DEVICE_KINDS
    node: np.ndarray  # int32, -1 for fabric devices
    local_index: np.ndarray  # int32, index within the node (or within the switch tier)
    group: np.ndarray  # int32, dragonfly group / fat-tree pod, -1 if none
    names: Sequence[str] | None = None  # explicit names (custom topologies); else generated

    def __len__(self) -> int:
        return int(self.kind.shape[0])


@dataclass(frozen=True, slots=True)
class LinkTable:
    """Columnar link records. Row i is link id i."""

    src: np.ndarray  # int64 device id
    dst: np.ndarray  # int64 device id
    kind: np.ndarray  # int8 index into LINK_KINDS
    bandwidth_Bps: np.ndarray  # float64
    latency_s: np.ndarray  # float64

    def __len__(self) -> int:
        return int(self.src.shape[0])


@dataclass(eq=False)
class Topology:
    """A cluster: devices, directed links, GPU ordering and routing.

    `gpus[g]` is the device id of GPU number g (the global GPU index a placement maps
    logical ranks to). GPUs are numbered node by node, so GPU g lives on node
    `g // gpus_per_node` for the homogeneous presets.
    """

    name: str
    devices: DeviceTable
    links: LinkTable
    gpus: np.ndarray
    gpus_per_node: int
    router: Router
    gpu_type: str = ""
    description: str = ""
    metadata: dict[str, object] = field(default_factory=dict)
    _route_cache: dict[tuple[int, int], Route] = field(default_factory=dict, repr=False)
    _graph: nx.DiGraph | None = field(default=None, repr=False)
    _link_index: dict[tuple[int, int], int] | None = field(default=None, repr=False)
    _variants: dict[str, Router] = field(default_factory=dict, repr=False)

    # ----------------------------------------------------------------- sizes
    @property
    def num_gpus(self) -> int:
        return int(self.gpus.shape[0])

    @property
    def num_nodes(self) -> int:
        nodes = self.devices.node[self.gpus]
        return int(np.unique(nodes).shape[0])

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def num_links(self) -> int:
        return len(self.links)

    # --------------------------------------------------------------- records
    def device_name(self, device_id: int) -> str:
        """Human-readable name, e.g. `n3.gpu1`, `n3.nic0`, `g2.sw17`."""
        if self.devices.names is not None:
            return self.devices.names[device_id]
        kind = DEVICE_KINDS[int(self.devices.kind[device_id])]
        node = int(self.devices.node[device_id])
        local = int(self.devices.local_index[device_id])
        if node >= 0:
            return f"n{node}.{kind.value}{local}"
        group = int(self.devices.group[device_id])
        prefix = f"g{group}." if group >= 0 else ""
        return f"{prefix}{kind.value}{local}"

    def device(self, device_id: int) -> Device:
        """The record of one device."""
        if not 0 <= device_id < self.num_devices:
            raise TopologyError(f"device id {device_id} out of range 0..{self.num_devices - 1}")
        return Device(
            id=device_id,
            name=self.device_name(device_id),
            kind=DEVICE_KINDS[int(self.devices.kind[device_id])],
            node=int(self.devices.node[device_id]),
            local_index=int(self.devices.local_index[device_id]),
            group=int(self.devices.group[device_id]),
        )

    def link(self, link_id: int) -> Link:
        """The record of one directed link."""
        if not 0 <= link_id < self.num_links:
            raise TopologyError(f"link id {link_id} out of range 0..{self.num_links - 1}")
        lt = self.links
        return Link(
            id=link_id,
            src=int(lt.src[link_id]),
            dst=int(lt.dst[link_id]),
            kind=LINK_KINDS[int(lt.kind[link_id])],
            bandwidth_Bps=float(lt.bandwidth_Bps[link_id]),
            latency_s=float(lt.latency_s[link_id]),
        )

    def link_between(self, src_device: int, dst_device: int) -> int | None:
        """The id of the direct link src -> dst, or None."""
        if self._link_index is None:
            self._link_index = {
                (int(s), int(d)): i
                for i, (s, d) in enumerate(zip(self.links.src, self.links.dst, strict=True))
            }
        return self._link_index.get((src_device, dst_device))

    def gpu_node(self, gpu: int) -> int:
        """Node index of GPU number `gpu`."""
        return int(self.devices.node[self.gpus[gpu]])

    def link_kind_of(self, link_id: int) -> LinkKind:
        return LINK_KINDS[int(self.links.kind[link_id])]

    # ---------------------------------------------------------------- routing
    def route(self, src_gpu: int, dst_gpu: int) -> Route:
        """Cached route between two GPUs given by GPU index (not device id)."""
        key = (src_gpu, dst_gpu)
        cached = self._route_cache.get(key)
        if cached is not None:
            return cached
        n = self.num_gpus
        if not (0 <= src_gpu < n and 0 <= dst_gpu < n):
            raise TopologyError(f"GPU index out of range: {src_gpu} -> {dst_gpu} (have {n} GPUs)")
        if src_gpu == dst_gpu:
            raise TopologyError(f"no route from GPU {src_gpu} to itself")
        result = self.router.route(self, int(self.gpus[src_gpu]), int(self.gpus[dst_gpu]))
        self._route_cache[key] = result
        return result

    def routes_batch(
        self, src_gpus: np.ndarray, dst_gpus: np.ndarray, policy: str | None = None
    ) -> RouteBatch:
        """Routes of GPU pairs `(src_gpus[i], dst_gpus[i])` (GPU indices), flattened.

        Pair by pair the same paths, order and weights as `route`, but computed with numpy
        by routers that support it (machine presets) and not cached: a schedule binds each
        pattern once. Other routers (custom, synthetic) go through `route` pair by pair.
        `policy` routes the fabric by another policy than the topology's (where the router
        offers `variant`, e.g. a dragonfly's minimal and Valiant paths for adaptive
        routing); ignored otherwise. Raises TopologyError like `route` for the first bad
        pair.
        """
        src, dst = _gpu_index_arrays(src_gpus, dst_gpus)
        n = self.num_gpus
        bad = (src < 0) | (src >= n) | (dst < 0) | (dst >= n) | (src == dst)
        if bad.any():
            i = int(np.argmax(bad))
            self.route(int(src[i]), int(dst[i]))  # raises the scalar path's error
        if src.shape[0] == 0:
            return RouteBatch.empty()
        router = self.router
        if policy is not None:
            router = self._router_variant(policy)
        batch = getattr(router, "routes_batch", None)
        if batch is None:
            return RouteBatch.from_routes(
                [self.route(a, b) for a, b in zip(src.tolist(), dst.tolist(), strict=True)]
            )
        result: RouteBatch = batch(self, self.gpus[src], self.gpus[dst])
        return result

    def _router_variant(self, policy: str) -> Router:
        """The router for `policy` (cached), or this topology's own if it has no variants."""
        got = self._variants.get(policy)
        if got is None:
            make = getattr(self.router, "variant", None)
            got = (make(policy) if make is not None else None) or self.router
            self._variants[policy] = got
        return got

    def path(self, src_gpu: int, dst_gpu: int) -> Path:
        """The primary link path between two GPUs (GPU indices)."""
        return self.route(src_gpu, dst_gpu).primary

    def path_bottleneck_Bps(self, path: Path) -> float:
        return float(self.links.bandwidth_Bps[list(path)].min())

    def path_latency_s(self, path: Path) -> float:
        return float(self.links.latency_s[list(path)].sum())

    # ------------------------------------------------------------ networkx view
    @property
    def graph(self) -> nx.DiGraph:
        """A networkx DiGraph view (built once, on first access).

        Node attributes: kind, node, local_index, group, name. Edge attributes: id, kind,
        bandwidth_Bps, latency_s.
        """
        if self._graph is None:
            self._graph = to_networkx(self)
        return self._graph


def _gpu_index_arrays(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both index arrays as 1-D int64 of equal length; TopologyError otherwise."""
    a, b = np.asarray(src), np.asarray(dst)
    if a.ndim != 1 or a.shape != b.shape:
        raise TopologyError(
            f"routes_batch needs two 1-D arrays of equal length, got shapes {a.shape} and {b.shape}"
        )
    for x in (a, b):
        if x.size and x.dtype.kind not in "iu":
            raise TopologyError(f"GPU indices must be integers, got dtype {x.dtype}")
    return a.astype(np.int64, copy=False), b.astype(np.int64, copy=False)


def to_networkx(topology: Topology) -> nx.DiGraph:
    """Build the networkx DiGraph of a topology."""
    import networkx as nx

    g = nx.DiGraph(name=topology.name)
    dt = topology.devices
    kinds = [DEVICE_KINDS[int(k)].value for k in dt.kind]
    g.add_nodes_from(
        (
            i,
            {
                "kind": kinds[i],
                "node": int(dt.node[i]),
                "local_index": int(dt.local_index[i]),
                "group": int(dt.group[i]),
                "name": topology.device_name(i),
            },
        )
        for i in range(len(dt))
    )
    lt = topology.links
    lkinds = [k.value for k in LINK_KINDS]
    g.add_edges_from(
        (
            int(lt.src[i]),
            int(lt.dst[i]),
            {
                "id": i,
                "kind": lkinds[int(lt.kind[i])],
                "bandwidth_Bps": float(lt.bandwidth_Bps[i]),
                "latency_s": float(lt.latency_s[i]),
            },
        )
        for i in range(len(lt))
    )
    return g


def device_kind_code(kind: DeviceKind | str) -> int:
    return DEVICE_KINDS.index(DeviceKind(kind))


def link_kind_code(kind: LinkKind | str) -> int:
    return LINK_KINDS.index(LinkKind(kind))
