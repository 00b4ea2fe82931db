"""Binding collective schedules to a topology, and alpha-beta pricing.

`CollectivePricer.bundles(...)` turns a collective on a set of concurrent group instances
(rows of GPU indices) into *bundles*: instances with the same layout share one schedule,
advance in lockstep and are priced together. Each bundle phase carries its link usage
(flow multiplicity per link, aggregated over the bundle's instances and route weights), its
latency and the per-flow rate the alpha-beta model gives it. The contention model prices
the same usage with max-min sharing instead (simulator/network/maxmin.py).

Everything here is cached: a training iteration repeats a handful of distinct collective
patterns thousands of times.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from itertools import count, permutations
from typing import TYPE_CHECKING, cast

import numpy as np

from simulator.errors import CostModelError
from simulator.network.adaptive import SolveMemo, SplitUsage, best_split
from simulator.network.library import Library
from simulator.network.params import NetworkParams
from simulator.network.schedules import (
    ALGORITHMS,
    CHAIN_CHUNK_BYTES,
    Layout,
    OrderFn,
    Phase,
    Schedule,
    build_schedule,
    candidate_algorithms,
)
from topologies.rows import link_index, unique_rows
from topologies.types import Topology
from workloads.ops import CollectiveKind, bus_factor

if TYPE_CHECKING:  # type only: what the pricer reads of a calibration (cost.calibration's)
    from simulator.network.measured import MeasuredCollectives

MAX_RING_SEARCH = 8  # brute-force the best intra-node ring up to this many GPUs
BIND_CHUNK_FLOWS = 1 << 15
"""Flows routed at once when binding: bounds the transient path arrays of huge groups."""
# NCCL's tuning model (src/graph/tuning.cc): tree all-reduce algorithm bandwidth is
# 0.92 (its model refinement) x 0.5 (each of the two trees carries half) of the bus bandwidth
NCCL_TREE_RATIO = 0.92 * 0.5


_Usage = tuple[np.ndarray, np.ndarray, SplitUsage | None, float, float, tuple[float, float], bool]
"""A phase's routed usage: (links, counts, adaptive split, minimal share alone, slowest
route rate, (node-local, inter-node) worst latencies, crosses nodes)."""


_Sparse = tuple[np.ndarray, np.ndarray]
"""Per-link values on a few links: (link ids ascending, values)."""


def _array_key(a: np.ndarray | None) -> tuple[str, bytes] | None:
    """An exact hashable key of a 1-D array (dtype and contents)."""
    return None if a is None else (a.dtype.str, np.ascontiguousarray(a).tobytes())


_PHASE_SERIAL = count()


@dataclass(frozen=True, eq=False)
class BoundPhase:
    """One phase of a bundle on the topology.

    Its latency depends on the protocol the tuner picks (`CollectivePricer.phase_latency`),
    taken on minimal routes (adaptive routing sends unloaded traffic minimally):
    `inter_steps` of its `steps` cross nodes and pay the route's worst inter-node latency
    plus the protocol's network step latency, the others the worst node-local route
    latency plus the protocol's node-local step latency.
    """

    links: np.ndarray  # unique link ids used
    counts: np.ndarray  # flows (route-weighted, summed over instances) per link
    # alpha-beta per-flow rate: one instance's own flows sharing its links (a direct
    # collective's p - 1 concurrent sends share a GPU's port; priced at their route
    # bottlenecks one by one, 8 DGX H100 GPUs reported 2,417 GB/s of bus bandwidth on
    # 450 GB/s NVLink), nothing else sharing them
    rate_Bps: float
    bytes_factor: float  # bytes per flow = bytes_factor x S
    steps: int
    shared_rate_Bps: float = np.inf  # per-flow rate when the bundle's own flows share links
    inter: bool = False  # some flow leaves its node
    inter_steps: int = 0  # of `steps`, those that cross nodes
    near_s: float = 0.0  # worst route latency of a node-local flow
    far_s: float = 0.0  # worst route latency of any flow (node-local or not)
    # adaptive routing: the usage with every flow minimal / Valiant (over `links`), and
    # the minimal share the phase takes alone (`counts` is that mixture); None otherwise
    split: SplitUsage | None = None
    split_x: float = 1.0
    # per-flow rate of one instance alone, its own flows sharing links: what its
    # communicator's tuner sees, whatever the bundle aggregates (protocol choice and
    # calibrated tables use it, so the full and symmetric modes choose alike)
    instance_rate_Bps: float = np.inf
    # the same phase of the same collective (group kind), whatever the layout class and
    # however instances are bundled: adaptive routing decides per family and a family
    # advances at one rate, as the symmetric mode's lockstep instances do
    family: Hashable = None
    # per-member step message / S (a ring's S/p), for the library's measured regimes; 0:
    # none applies
    chunk_factor: float = 0.0
    # a pipelined chain's hops (broadcast / reduce): its flows carry L - 1 chunks of fill
    chain_hops: int = 0
    # creation order: the runtime orders a component's coflows by it, so float sums over
    # them (link loads, per-link bytes) do not depend on where objects sit in memory
    serial: int = field(default_factory=lambda: next(_PHASE_SERIAL))


@dataclass(frozen=True, eq=False)
class Bundle:
    """Instances (row indices into the activation's instance table) priced together."""

    rows: np.ndarray
    algorithm: str
    phases: tuple[BoundPhase, ...]
    group_size: int = 1
    tier: str = "intra_node"  # "inter_node" if any flow leaves its node
    separate_calls: bool = False  # each phase a library call of its own (hierarchical)


@dataclass(frozen=True)
class PhasePlan:
    """How a bundle runs for one message size: overhead, then per phase its latency and
    the bytes each flow puts on the wire (the protocol's and calibration's stretch
    included), and the protocol that was chosen ("table" for a calibrated table)."""

    overhead_s: float
    latency_s: tuple[float, ...]
    bytes_per_flow: tuple[float, ...]
    protocol: str = "Simple"
    # of the latencies, the stalls of the library build's measured regimes: paid by the
    # run, unknown to the library's own tuner (simulator/network/regimes.py)
    stall_s: float = 0.0


class CollectivePricer:
    """Schedules, binds and alpha-beta-prices collectives on one topology."""

    def __init__(
        self,
        topology: Topology,
        params: NetworkParams,
        algorithm: str = "auto",
        calibration: MeasuredCollectives | None = None,
        gpu: str | None = None,
        protocol: str = "auto",
        library: str | None = None,
    ):
        if algorithm != "auto" and algorithm not in ALGORITHMS:
            raise CostModelError(
                f"unknown collective algorithm '{algorithm}' (use auto or one of {', '.join(ALGORITHMS)})"
            )
        self.gpu = gpu or topology.gpu_type
        measured = calibration.network_spec(self.gpu) if calibration is not None else None
        if measured is not None:  # a calibration's fitted protocol terms and efficiencies
            params = params.with_spec(measured)
        if library is not None:  # the build asked for, over the preset's and calibration's
            params = params.with_library(library)
        if protocol != "auto" and protocol not in params.collectives.terms:
            known = ", ".join(params.collectives.terms)
            raise CostModelError(f"unknown protocol '{protocol}' (use auto or one of {known})")
        self.topology = topology
        self.params = params
        self.library = Library.parse(params.collectives.library)
        self.calibration = calibration
        self.algorithm = algorithm
        self.protocol = protocol
        self.bandwidth_Bps = params.effective_bandwidth(topology)
        self.latency_s = topology.links.latency_s
        node = topology.devices.node[topology.gpus]
        self.gpu_node = node.astype(np.int64)
        self.gpu_local = topology.devices.local_index[topology.gpus].astype(np.int64)
        # topology builders store these metadata entries as ints (see topologies/machines.py)
        self.package_size = int(cast("int | None", topology.metadata.get("package_size", 1)) or 1)
        self.homogeneous = bool(topology.metadata.get("homogeneous_nodes", True))
        fabric = cast("dict[str, object]", topology.metadata.get("fabric") or {})
        # dragonfly adaptive routing: flow bundles split minimal / Valiant by load
        self.adaptive = (
            topology.metadata.get("routing") == "adaptive" and fabric.get("kind") == "dragonfly"
        )
        self._minimal = "ecmp" if self.adaptive else None
        self._gpu_at: dict[tuple[int, int], int] = dict(
            zip(
                zip(self.gpu_node.tolist(), self.gpu_local.tolist(), strict=True),
                range(self.gpu_node.shape[0]),
                strict=True,
            )
        )
        lpn = cast("int | None", topology.metadata.get("links_per_node"))
        self.links_per_node = int(lpn) if lpn and self.homogeneous else 0  # 0 = no node templates
        self.gpus_per_node = int(topology.gpus_per_node)
        self._latency = np.asarray(self.latency_s, dtype=np.float64)
        self.num_links = topology.num_links
        n_nodes = int(self.gpu_node.max()) + 1 if self.gpu_node.size else 0
        n_local = int(self.gpu_local.max()) + 1 if self.gpu_local.size else 0
        self._gpu_grid = np.full((n_nodes, n_local), -1, dtype=np.int64)
        self._gpu_grid[self.gpu_node, self.gpu_local] = np.arange(self.gpu_node.shape[0])
        self._template_cache: dict[
            tuple[int, int], tuple[np.ndarray, np.ndarray, float, float]
        ] = {}
        self._order_cache: dict[tuple[int, ...], list[int]] = {}
        self._cycles_cache: dict[tuple[int, ...], list[list[int]]] = {}
        self._route_cache: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, float, float]] = {}
        self._bind_cache: dict[Hashable, tuple[Bundle, ...]] = {}
        self._classes_cache: dict[int, dict[Layout, np.ndarray]] = {}  # by `_table_id`
        self._table_ids: dict[tuple[tuple[int, ...], str, bytes], int] = {}
        self._usage_cache: dict[Hashable, _Usage] = {}
        # one instance's shared rate per (canonical instance, phase): many collectives
        # (layout classes, algorithms' repeated phases, groups of the same shape) repeat it
        self._alone_cache: dict[Hashable, float] = {}
        self._plan_cache: dict[
            tuple[int, CollectiveKind | None, float, bool], tuple[Bundle, PhasePlan]
        ] = {}
        # how the tuner compares candidates: "shared" (the bundle's own link sharing, as the
        # contention model sees it alone) or "bottleneck" (alpha-beta's route bottlenecks):
        # the engine sets it to its network model so choices and prices agree
        self.tuner = "shared"
        self._choice_cache: dict[Hashable, str] = {}
        # max-min solves of concurrent phases, shared by the tuner and the runtime
        self.solves = SolveMemo()
        self._joint_cache: dict[
            tuple[int, ...], tuple[tuple[Bundle, ...], list[tuple[float, ...]]]
        ] = {}
        # the tuner's decisions with every candidate's estimate (seconds), for the report's
        # list of automatic choices (simulator/choices.py)
        self.decisions: dict[Hashable, tuple[str, dict[str, float]]] = {}

    def forget_bindings(self) -> None:
        """Drop the bound flows (bundles, their usages, plans and joint solves) and keep
        what is small (routes, templates, tuner choices and decisions). A caller pricing
        one layout after another (the grid screen: its own times are cached per group
        table and size) needs no bundle of an earlier layout, and at 32,768 GCDs the
        tuner's trees bound over every instance held about 530 MB of them."""
        for cache in (
            self._bind_cache,
            self._usage_cache,
            self._plan_cache,
            self._joint_cache,
            self._classes_cache,
        ):
            cache.clear()
        self.solves = SolveMemo()

    # ------------------------------------------------------------- layouts
    def layout(self, gpus: Sequence[int] | np.ndarray) -> Layout:
        g = np.asarray(gpus, dtype=np.int64)
        nodes = self.gpu_node[g]
        _, first = np.unique(nodes, return_index=True)
        renumber = {int(nodes[i]): j for j, i in enumerate(sorted(first))}
        local = self.gpu_local[g]
        return Layout(
            node=tuple(renumber[int(n)] for n in nodes),
            local=tuple(int(x) for x in local),
            package=tuple(int(x) // self.package_size for x in local),
        )

    def layout_classes(self, instances: np.ndarray) -> dict[Layout, np.ndarray]:
        """Instance rows grouped by layout (vectorised: rows with the same node offsets
        and local indices share a layout). Cached on the table's contents: the tuner
        groups the same table once per candidate and per message size."""
        if instances.shape[0] <= 1:
            return self._layout_classes(instances)
        ck = self._table_id(instances)
        hit = self._classes_cache.get(ck)
        if hit is None:
            hit = self._classes_cache[ck] = self._layout_classes(instances)
        return hit

    def _layout_classes(self, instances: np.ndarray) -> dict[Layout, np.ndarray]:
        nodes = self.gpu_node[instances]
        key = np.concatenate([nodes - nodes[:, :1], self.gpu_local[instances]], axis=1)
        if (key == key[:1]).all():  # the common case: every instance laid out alike
            return {self.layout(instances[0]): np.arange(instances.shape[0])}
        first, inverse = unique_rows(key)
        out: dict[Layout, list[np.ndarray]] = {}
        for cls in np.argsort(first, kind="stable").tolist():
            rows = np.flatnonzero(inverse == cls)
            out.setdefault(self.layout(instances[rows[0]]), []).append(rows)
        return {lay: np.sort(np.concatenate(parts)) for lay, parts in out.items()}

    def _order_fn(self, gpus: np.ndarray) -> OrderFn:
        return _RingPlanner(self, gpus)

    def _local_key(self, gpus: list[int]) -> tuple[int, ...]:
        return tuple(int(self.gpu_local[g]) for g in gpus) if self.homogeneous else tuple(gpus)

    def _cycle_routes(self, gpus: list[int]) -> dict[tuple[int, int], tuple[int, ...]]:
        """Links of the route between every ordered pair of `gpus` (indices into it)."""
        out: dict[tuple[int, int], tuple[int, ...]] = {}
        for i, a in enumerate(gpus):
            for j, b in enumerate(gpus):
                if i != j:
                    out[(i, j)] = tuple(self._route(a, b)[0].tolist())
        return out

    def _best_cycle(self, gpus: list[int]) -> list[int]:
        """Indices of `gpus` in the ring order with the widest bottleneck (ties: the
        larger total bandwidth, then lexicographic), as NCCL/RCCL's ring search does."""
        channels = self._ring_cycles(gpus)
        return channels[0]

    def _ring_cycles(self, gpus: list[int]) -> list[list[int]]:
        """The rings NCCL/RCCL would run inside one node: greedily the widest Hamiltonian
        cycle on the links' remaining capacity, as long as another channel raises the
        aggregate rate (data is split equally over channels, so the slowest channel sets
        each one's pace: channels x slowest rate must grow)."""
        key = self._local_key(gpus)
        hit = self._cycles_cache.get(key)
        if hit is not None:
            return hit
        m = len(gpus)
        if m <= 2 or m > MAX_RING_SEARCH:
            result = [list(range(m))]
            self._cycles_cache[key] = result
            return result
        routes = self._cycle_routes(gpus)
        cycles = [(0, *perm) for perm in permutations(range(1, m))]
        # every cycle's flows per link as one matrix (cycles x links): the (m - 1)! cycles
        # of an 8-GPU node are 5,040, too many to price link by link in Python
        ids = sorted({link for route in routes.values() for link in route})
        column = {link: c for c, link in enumerate(ids)}
        edge = np.zeros((m, m, len(ids)), dtype=np.int64)
        for (a, b), route in routes.items():
            for link in route:
                edge[a, b, column[link]] += 1
        order = np.asarray(cycles, dtype=np.int64)
        usage = edge[order, np.roll(order, -1, axis=1)].sum(axis=1)
        used = usage > 0
        residual = np.asarray(self.bandwidth_Bps[np.asarray(ids, dtype=np.int64)], dtype=np.float64)
        chosen: list[list[int]] = []
        slowest = float("inf")
        for _ in range(m):
            with np.errstate(divide="ignore", invalid="ignore"):
                rates = np.where(used, residual[None, :] / usage, np.inf).min(axis=1)
            # the first cycle faster than the best so far by more than 1e-12, in cycle
            # order, as a scan would take it (earlier cycles stay below a rising bar)
            best_i, best_rate = -1, 0.0
            while True:
                faster = np.flatnonzero(rates > best_rate * (1 + 1e-12))
                if faster.size == 0:
                    break
                best_i, best_rate = int(faster[0]), float(rates[faster[0]])
            if best_i < 0 or (
                chosen and (len(chosen) + 1) * min(slowest, best_rate) <= len(chosen) * slowest
            ):
                break
            chosen.append(list(cycles[best_i]))
            slowest = min(slowest, best_rate)
            row = used[best_i]
            residual[row] -= best_rate * usage[best_i, row]
        self._cycles_cache[key] = chosen
        return chosen

    # -------------------------------------------------------------- routes
    def _route(self, src_gpu: int, dst_gpu: int) -> tuple[np.ndarray, np.ndarray, float, float]:
        """(links, weights, per-flow rate, worst path latency) of a GPU pair.

        With PXN (NCCL >= 2.12), traffic to another node first moves inside the source node
        to the GPU on the destination's rail (same local index) and leaves through that GPU's
        NIC, so each NCCL channel stays on one rail of the fabric.
        """
        key = (src_gpu, dst_gpu)
        hit = self._route_cache.get(key)
        if hit is not None:
            return hit
        relay = self._pxn_relay(src_gpu, dst_gpu)
        if relay is not None:
            a = self._direct_route(src_gpu, relay)
            b = self._direct_route(relay, dst_gpu)
            result = (
                np.concatenate([a[0], b[0]]),
                np.concatenate([a[1], b[1]]),
                min(a[2], b[2]),
                a[3] + b[3],
            )
        else:
            result = self._direct_route(src_gpu, dst_gpu)
        self._route_cache[key] = result
        return result

    def _pxn_relay(self, src_gpu: int, dst_gpu: int) -> int | None:
        if not self.params.pxn or self.gpu_node[src_gpu] == self.gpu_node[dst_gpu]:
            return None
        relay = self._gpu_at.get((int(self.gpu_node[src_gpu]), int(self.gpu_local[dst_gpu])))
        return None if relay is None or relay == src_gpu else relay

    def _direct_route(
        self, src_gpu: int, dst_gpu: int
    ) -> tuple[np.ndarray, np.ndarray, float, float]:
        route = self.topology.route(src_gpu, dst_gpu)
        links: list[int] = []
        weights: list[float] = []
        rate = float("inf")
        lat = 0.0
        for path, w in zip(route.paths, route.weights, strict=True):
            links.extend(path)
            weights.extend([w] * len(path))
            # the path's values as Python floats (as a whole-machine list of them gave,
            # without building one over every link of the machine)
            ids = np.asarray(path, dtype=np.int64)
            rate = min(rate, min(self.bandwidth_Bps[ids].tolist()) / w)
            lat = max(lat, sum(self._latency[ids].tolist()))
        return (np.asarray(links, dtype=np.int64), np.asarray(weights, dtype=np.float64), rate, lat)

    def _node_template(
        self, local_src: int, local_dst: int
    ) -> tuple[np.ndarray, np.ndarray, float, float]:
        """Route between two GPUs of node 0; other nodes' routes are it shifted by
        node x links_per_node (homogeneous machine presets number links node-major)."""
        key = (local_src, local_dst)
        hit = self._template_cache.get(key)
        if hit is None:
            a = self._gpu_at[(int(self.gpu_node[0]), local_src)]
            b = self._gpu_at[(int(self.gpu_node[0]), local_dst)]
            hit = self._direct_route(a, b)
            self._template_cache[key] = hit
        return hit

    def _local_parts(
        self, src: np.ndarray, dst: np.ndarray
    ) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray, np.ndarray]:
        """Links/weights of node-local flows from translated node-0 templates, plus each
        flow's rate and latency."""
        g = self.gpus_per_node
        ls, ld = self.gpu_local[src], self.gpu_local[dst]
        offset = self.gpu_node[src] * self.links_per_node
        pair = ls * g + ld
        links: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        rates = np.empty(src.shape[0])
        lats = np.empty(src.shape[0])
        for p in np.unique(pair).tolist():
            sel = pair == p
            t_links, t_w, t_rate, t_lat = self._node_template(p // g, p % g)
            links.append((offset[sel][:, None] + t_links[None, :]).ravel())
            weights.append(np.tile(t_w, int(sel.sum())))
            rates[sel] = t_rate
            lats[sel] = t_lat
        return links, weights, rates, lats

    def _routed_parts(
        self, src: np.ndarray, dst: np.ndarray, policy: str | None = None, timed: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Links/weights of arbitrary flows from the topology's router, with per-flow rate and
        latency computed in numpy over the flattened paths (with `timed` False, not
        computed: rates inf and latencies 0, for a caller that only reads the usage)."""
        batch = self.topology.routes_batch(src, dst, policy)
        links, plen, pw = batch.links, batch.path_len, batch.path_weight
        if not timed:
            n = src.shape[0]
            return links, np.repeat(pw, plen), np.full(n, np.inf), np.zeros(n)
        starts = np.concatenate([[0], np.cumsum(plen)[:-1]])
        bott = np.minimum.reduceat(self.bandwidth_Bps[links], starts) / pw
        plat = np.add.reduceat(self._latency[links], starts)
        rstarts = np.concatenate([[0], np.cumsum(batch.paths_per_route)[:-1]])
        rates = np.minimum.reduceat(bott, rstarts)
        lats = np.maximum.reduceat(plat, rstarts)
        return links, np.repeat(pw, plen), rates, lats

    def _flow_links(
        self, src: np.ndarray, dst: np.ndarray, policy: str | None = None, timed: bool = True
    ) -> tuple[np.ndarray, np.ndarray, float, tuple[float, float], bool]:
        """All links (with route weights) of a set of flows, their slowest rate, the worst
        path latency of node-local and of inter-node flows, and whether any flow leaves
        its node.

        Node-local flows use translated templates; inter-node flows take PXN's rail-aligned
        path (a node-local hop to the GPU on the destination's rail, then the fabric).
        With `timed` False the routed flows' rates and latencies are skipped (the links
        and weights are the same; the rate and latencies returned are then meaningless)."""
        links: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        rate = float("inf")
        lat = far_lat = 0.0
        same = self.gpu_node[src] == self.gpu_node[dst]
        templated = bool(self.links_per_node)
        if templated and same.any():
            lk, wt, rt, lt = self._local_parts(src[same], dst[same])
            links += lk
            weights += wt
            rate, lat = min(rate, float(rt.min())), max(lat, float(lt.max()))
        far = ~same if templated else np.ones(src.shape[0], dtype=bool)
        inter = bool((~same).any())
        if far.any():
            a, b = src[far], dst[far]
            first_lat = np.zeros(a.shape[0])
            if self.params.pxn:
                relay = self._gpu_grid[self.gpu_node[a], self.gpu_local[b]]
                hop = (relay >= 0) & (relay != a) & (self.gpu_node[a] != self.gpu_node[b])
                if hop.any():
                    if templated:
                        lk, wt, rt, lt = self._local_parts(a[hop], relay[hop])
                        links += lk
                        weights += wt
                    else:
                        lk1, wt1, rt, lt = self._routed_parts(a[hop], relay[hop], policy, timed)
                        links.append(lk1)
                        weights.append(wt1)
                    rate = min(rate, float(rt.min()))
                    first_lat[hop] = lt
                    a = np.where(hop, relay, a)
            lk2, wt2, rt2, lt2 = self._routed_parts(a, b, policy, timed)
            links.append(lk2)
            weights.append(wt2)
            rate = min(rate, float(rt2.min()))
            worst = float((first_lat + lt2).max())
            if inter:
                far_lat = worst
            else:  # untemplated machines route node-local flows here too
                lat = max(lat, worst)
        if not links:
            return np.zeros(0, dtype=np.int64), np.zeros(0), rate, (lat, far_lat), inter
        return np.concatenate(links), np.concatenate(weights), rate, (lat, far_lat), inter

    def _shared_flow_links(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        share: np.ndarray | None,
        policy: str | None = None,
        timed: bool = True,
    ) -> tuple[np.ndarray, np.ndarray, float, tuple[float, float], bool]:
        """`_flow_links` of flows that each carry `share` of the phase's per-flow bytes:
        their route weights scale by it and their rate (bytes over time) divides by it."""
        if share is None:
            return self._flow_links(src, dst, policy, timed)
        links: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        rate, near, far, inter = float("inf"), 0.0, 0.0, False
        for value in np.unique(share).tolist():
            sel = share == value
            lk, wt, rt, (ln, lf), it = self._flow_links(src[sel], dst[sel], policy, timed)
            links.append(lk)
            weights.append(wt * value)
            rate, near, far, inter = min(rate, rt / value), max(near, ln), max(far, lf), inter or it
        return np.concatenate(links), np.concatenate(weights), rate, (near, far), inter

    # --------------------------------------------------------------- binding
    def _link_loads(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        share: np.ndarray | None,
        policy: str | None = None,
        timed: bool = True,
    ) -> tuple[_Sparse, float, tuple[float, float], bool]:
        """Flow multiplicity per link of a phase's flows (the links with a nonzero sum,
        ascending, and the sums), with their slowest rate, worst (node-local, inter-node)
        latencies and whether any leaves its node; routed in chunks so a huge group's
        paths never all sit in memory.

        Sparse, not a dense array over every link: a 131,072-GPU machine has 1.3 M links
        and a phase touches a few thousand, so the dense zeros, bincount and nonzero scan
        cost more than the routing of a small phase. The sums are the dense ones bit for
        bit: per chunk each link's weights add in flow order (bincount over the chunk's
        link indices), and chunks add in order onto zero. `timed` False skips the routed
        flows' rates and latencies (see `_flow_links`)."""
        parts: list[_Sparse] = []
        rate, near, far, inter = float("inf"), 0.0, 0.0, False
        for lo in range(0, max(src.shape[0], 1), BIND_CHUNK_FLOWS):
            hi = lo + BIND_CHUNK_FLOWS
            part = None if share is None else share[lo:hi]
            links, w, rt, (ln, lf), it = self._shared_flow_links(
                src[lo:hi], dst[lo:hi], part, policy, timed
            )
            if links.size:
                ids, index = link_index(links, self.num_links)
                parts.append((ids, np.bincount(index, weights=w, minlength=ids.shape[0])))
            rate, near, far, inter = min(rate, rt), max(near, ln), max(far, lf), inter or it
        return self._sum_sparse(parts), rate, (near, far), inter

    def _sum_sparse(self, parts: list[_Sparse]) -> _Sparse:
        """The sum of sparse per-link loads, added in order onto zero, zero sums dropped
        (what a dense accumulation and its nonzero entries give)."""
        if not parts:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        if len(parts) == 1:
            ids, total = parts[0]
        else:
            ids, index = link_index(np.concatenate([p[0] for p in parts]), self.num_links)
            total = np.zeros(ids.shape[0])
            at = 0
            for p_ids, p_sums in parts:  # a part's ids are distinct: no repeated index
                total[index[at : at + p_ids.shape[0]]] += p_sums
                at += p_ids.shape[0]
        keep = total != 0
        return (ids, total) if keep.all() else (ids[keep], total[keep])

    def _usage(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        share: np.ndarray | None,
        minimal: _Sparse,
        inter: bool,
    ) -> tuple[np.ndarray, np.ndarray, SplitUsage | None, float]:
        """(links, flow multiplicity per link, adaptive split, minimal share alone) of a
        phase whose minimal-route usage is `minimal`: under adaptive routing a phase that
        crosses the fabric also gets its all-Valiant usage and the split it takes alone
        (O(flows + links): no sort of millions of entries)."""
        links, counts = minimal
        if self.adaptive and inter:
            # only the usage is read: the rates and latencies are the minimal routes'
            (v_links, v_counts), _, _, _ = self._link_loads(src, dst, share, "valiant", timed=False)
            if not (np.array_equal(links, v_links) and np.array_equal(counts, v_counts)):
                ids, index = link_index(np.concatenate([links, v_links]), self.num_links)
                n = links.shape[0]
                mini, vali = np.zeros(ids.shape[0]), np.zeros(ids.shape[0])
                mini[index[:n]] = counts
                vali[index[n:]] = v_counts
                keep = (mini + vali) != 0
                uniq = ids[keep]
                split = SplitUsage(mini[keep], vali[keep])
                x = best_split(split, self.bandwidth_Bps[uniq])
                return uniq, split.mixture(x), split, x
        return links, counts, None, 1.0

    def _phase_usage(self, table: np.ndarray, ph: Phase, timed: bool = True) -> _Usage:
        """(links, counts, adaptive split, its share alone, slowest route rate, (near,
        far) route latencies, crosses nodes) of one schedule phase over the instances of
        `table` (rows of GPU indices); with `timed` False the routed flows' rate and
        latencies are not computed (meaningless; the rest is the same)."""
        src = table[:, ph.src].ravel()
        dst = table[:, ph.dst].ravel()
        share = None if ph.share is None else np.tile(ph.share, table.shape[0])
        loads, rate, lat, inter = self._link_loads(src, dst, share, self._minimal, timed)
        uniq, counts, split, split_x = self._usage(src, dst, share, loads, inter)
        return uniq, counts, split, split_x, rate, lat, inter

    def _table_id(self, table: np.ndarray) -> int:
        """A small id per distinct instance table (its shape and GPU indices, compared in
        full): the key under which its layout classes and phases' usages are cached."""
        key = (table.shape, table.dtype.str, np.ascontiguousarray(table).tobytes())
        got = self._table_ids.get(key)
        if got is None:
            got = self._table_ids[key] = len(self._table_ids)
        return got

    def _cached_usage(self, table: np.ndarray, table_id: int, ph: Phase) -> _Usage:
        """`_phase_usage`, cached on what determines it: the instance table and the
        phase's flows (positions and shares). Binding a layout class again (a symmetric
        signature's subset of a group's instances, the run's activations of what the
        tuner bound) or a phase with the same flows (ring all-reduce, reduce-scatter and
        all-gather share one ring) reuses the routed usage instead of routing it again."""
        key = (table_id, _array_key(ph.src), _array_key(ph.dst), _array_key(ph.share))
        hit = self._usage_cache.get(key)
        if hit is None:
            hit = self._usage_cache[key] = self._phase_usage(table, ph)
        return hit

    def _canonical(self, gpus: np.ndarray) -> np.ndarray:
        """A 1 x p table: the instance moved to start at node 0 (same node offsets and
        local indices); itself where nodes are not uniform or it does not fit."""
        nodes = self.gpu_node[gpus]
        moved = (
            self._gpu_grid[nodes - nodes.min(), self.gpu_local[gpus]] if self.homogeneous else gpus
        )
        return (gpus if (moved < 0).any() else moved)[None, :]

    def _shared_rate(self, links: np.ndarray, counts: np.ndarray) -> float:
        used = counts > 0
        bw = self.bandwidth_Bps[links]
        return float((bw[used] / counts[used]).min()) if used.any() else np.inf

    def _alone_rate(self, canonical: np.ndarray, ph: Phase) -> float:
        """The shared rate of one instance alone (`canonical`, a 1 x p table) in phase
        `ph`, cached on the instance and the phase's flows."""
        key = (
            canonical.tobytes(),
            ph.src.tobytes(),
            ph.dst.tobytes(),
            None if ph.share is None else ph.share.tobytes(),
        )
        hit = self._alone_cache.get(key)
        if hit is None:
            one = self._phase_usage(canonical, ph, False)  # untimed: only its usage is read
            hit = self._alone_cache[key] = self._shared_rate(one[0], one[1])
        return hit

    def _bind(
        self, schedule: Schedule, instances: np.ndarray, rows: np.ndarray, family: Hashable
    ) -> Bundle:
        phases: list[BoundPhase] = []
        canonical = self._canonical(instances[rows[0]])
        table = np.ascontiguousarray(instances[rows])
        table_id = self._table_id(table)
        for i, ph in enumerate(schedule.phases):
            uniq, counts, split, split_x, rate, (near, far), inter = self._cached_usage(
                table, table_id, ph
            )
            if not inter:
                crossing = 0
            elif ph.inter_steps is None:
                crossing = ph.steps
            else:  # NCCL's latency model: only the node-crossing steps pay the network's
                crossing = min(ph.inter_steps, ph.steps)
            shared = self._shared_rate(uniq, counts)
            # one instance alone, what its communicator's tuner sees: the layout placed
            # from node 0, the same for every instance and however they are bundled
            alone = self._alone_rate(canonical, ph)
            phases.append(
                BoundPhase(
                    links=uniq,
                    counts=counts,
                    rate_Bps=float(min(rate, alone)),
                    bytes_factor=ph.bytes_factor,
                    steps=ph.steps,
                    shared_rate_Bps=shared,
                    inter=inter,
                    inter_steps=crossing,
                    near_s=near,
                    far_s=max(near, far),
                    split=split,
                    split_x=split_x,
                    instance_rate_Bps=alone,
                    family=(family, i),
                    chunk_factor=ph.chunk_factor,
                    chain_hops=ph.chain_hops,
                )
            )
        tier = "inter_node" if any(ph.steps and ph.inter for ph in phases) else "intra_node"
        return Bundle(
            rows=rows,
            algorithm=schedule.algorithm,
            phases=tuple(phases),
            group_size=int(instances.shape[1]),
            tier=tier,
            separate_calls=schedule.separate_calls,
        )

    def bind(
        self,
        kind: CollectiveKind,
        instances: np.ndarray,
        algorithm: str,
        root: int = 0,
        key: Hashable | None = None,
    ) -> tuple[Bundle, ...]:
        """Bundles of `algorithm` for `kind` over instance rows of GPU indices."""
        cache_key = None if key is None else (key, kind, algorithm, root)
        if cache_key is not None:
            hit = self._bind_cache.get(cache_key)
            if hit is not None:
                return hit
        inst = np.asarray(instances, dtype=np.int64)
        if inst.ndim != 2:
            raise CostModelError("instances must be a 2-D table of GPU indices")
        bundles = []
        for layout, rows in self.layout_classes(inst).items():
            schedule = build_schedule(algorithm, kind, layout, self._order_fn(inst[rows[0]]), root)
            # the collective's identity across layout classes and engine modes: its group
            # kind (the activation key's first part), else this layout
            group = key[0] if isinstance(key, tuple) and key else key
            family = (kind, algorithm, root, layout if key is None else group)
            bundles.append(self._bind(schedule, inst, rows, family))
        result = tuple(bundles)
        if cache_key is not None:
            self._bind_cache[cache_key] = result
        return result

    def bundles(
        self,
        kind: CollectiveKind,
        instances: np.ndarray,
        nbytes: float,
        root: int = 0,
        algorithm: str | None = None,
        key: Hashable | None = None,
    ) -> tuple[Bundle, ...]:
        """Bundles for a collective of `nbytes` over `instances`, with `algorithm` or, for
        'auto', the one `choose_algorithm` picks for these instances."""
        algo = algorithm or self.algorithm
        if kind is CollectiveKind.SEND_RECV:
            algo = "direct"
        elif algo == "auto":
            algo = self.choose_algorithm(kind, instances, nbytes, root, key)
        return self.bind(kind, instances, algo, root, key)

    def choose_algorithm(
        self,
        kind: CollectiveKind,
        instances: np.ndarray,
        nbytes: float,
        root: int = 0,
        key: Hashable | None = None,
    ) -> str:
        """The algorithm with the smallest estimated time for `nbytes` (latency plus bytes
        over the rate its flows get), as NCCL's tuner picks per size, each candidate with
        its own best protocol. The contention tuner prices every instance at once, as they
        run in a job, across layout classes too: the flows of all bundles share the links
        max-min fairly (a lone instance, or one class alone, favoured the tree where the
        instances then collide on the fabric, so more fabric bandwidth could flip the choice
        and slow the iteration). The engine passes a group's instances all together in both
        modes, so full and symmetric runs choose alike. The alpha-beta tuner (route
        bottlenecks, no sharing) prices one instance of each layout, which stands for all."""
        if kind is CollectiveKind.SEND_RECV:
            return "direct"
        ckey = None if key is None else (key, kind, root, float(nbytes), self.tuner)
        if ckey is not None:
            hit = self._choice_cache.get(ckey)
            if hit is not None:
                return hit
        inst = np.asarray(instances, dtype=np.int64)
        classes = self.layout_classes(inst)
        shared = self.tuner == "shared"
        if shared:
            probe, pkey = inst, key  # the winner's binding is the one that runs
        else:
            probe = inst[[int(rows[0]) for rows in classes.values()]]
            pkey = None if key is None else (key, "probe")
        terms: dict[str, tuple[float, float]] = {}
        bound: dict[str, tuple[tuple[Bundle, ...], list[tuple[float, ...]] | list[None]]] = {}
        for cand in candidate_algorithms(kind, next(iter(classes)), self.library):
            try:
                b = self.bind(kind, probe, cand, root, pkey)
            except CostModelError:
                continue
            rates = self.joint_rates(b) if shared else [None] * len(b)
            bound[cand] = (b, rates)
            terms[cand] = max(
                (
                    self.time_terms(x, nbytes, kind, shared, rates=r, tuner=True)
                    for x, r in zip(b, rates, strict=True)
                ),
                key=sum,
                default=(0.0, 0.0),
            )
        if "tree" in terms and "ring" in terms and kind is CollectiveKind.ALL_REDUCE:
            # NCCL's tuner gives tree and ring the same bus bandwidth and converts it to
            # algorithm bandwidth with 0.92 * 0.5 for the tree and p / (2 (p - 1)) for the
            # ring, so the tree never wins on bandwidth, only on latency (its 2 log steps
            # against the ring's 2 (p - 1)). Where the tree's own flows are slower still
            # (its heads use fewer NICs than the ring's channels), that slower time counts.
            # NCCL prices every (algorithm, protocol) pair from the same per-protocol link
            # bus bandwidth and picks the fastest pair (src/graph/tuning.cc: bandwidths
            # [coll][a][p] = busBw * ratio), so the tree's bound comes from the ring under
            # the same protocol and the tree's best protocol is the one fastest with it.
            # Taking the ring's own best (LL, a small fraction of the link on Frontier) made
            # a Simple tree look twice as slow as it runs; a slower NIC, moving the ring to
            # Simple, then flipped the choice to that tree: 7.6% faster with less bandwidth
            # (AxoNN, 32 Frontier GCDs, alpha-beta; tests/test_whatif_monotonicity.py).
            p = max(int(inst.shape[1]), 2)
            per_protocol = []
            for proto in self.protocols_for(bound["tree"][0][0]):
                tree = self._terms_as(bound["tree"], nbytes, kind, shared, proto)
                ring = self._terms_as(bound["ring"], nbytes, kind, shared, proto)
                if tree is not None and ring is not None:
                    nccl = ring[1] * p / (2 * (p - 1)) / NCCL_TREE_RATIO
                    per_protocol.append((tree[0], max(tree[1], nccl)))
            if per_protocol:
                terms["tree"] = min(per_protocol, key=sum)
            else:  # calibrated tables: the ring's own transfer bounds the tree's
                nccl = terms["ring"][1] * p / (2 * (p - 1)) / NCCL_TREE_RATIO
                terms["tree"] = (terms["tree"][0], max(terms["tree"][1], nccl))
        best_algo: str | None = None
        best_t = np.inf
        for cand, (lat, transfer) in terms.items():
            if lat + transfer < best_t:
                best_algo, best_t = cand, lat + transfer
        if best_algo is None and terms:
            raise CostModelError(
                f"{kind.value} would take forever with every algorithm: a link's bandwidth "
                "is too small for its bytes (check the bandwidths)"
            )
        if best_algo is None:
            raise CostModelError(f"no algorithm supports {kind.value} on this group")
        if ckey is not None:
            self._choice_cache[ckey] = best_algo
            self.decisions[ckey] = (best_algo, {a: sum(t) for a, t in terms.items()})
        return best_algo

    def _terms_as(
        self,
        bound: tuple[tuple[Bundle, ...], Sequence[Sequence[float] | None]],
        nbytes: float,
        kind: CollectiveKind,
        shared: bool,
        protocol: str,
    ) -> tuple[float, float] | None:
        """(latency, transfer) of the slowest bundle under `protocol` (as `_protocol_plan`
        prices one protocol; `rates` per bundle as the tuner shares them); None where a
        calibrated table prices a bundle or its tier does not enable `protocol`."""
        term = self.params.collectives.term(protocol)
        worst: tuple[float, float] | None = None
        for b, rates in zip(*bound, strict=True):
            if protocol not in self.protocols_for(b) or (
                self.plan(b, kind, nbytes, shared).protocol == "table"
            ):
                return None
            launch = self.params.collectives.launch_overhead_s if b.phases else 0.0
            if b.phases and b.tier == "inter_node":
                launch += self.params.collectives.inter_node_base_s
            lat = (
                launch
                + term.base_latency_s
                + sum(self.phase_latency(ph, protocol) for ph in b.phases)
            )
            transfer = sum(
                ph.bytes_factor * nbytes / term.bandwidth_factor
                / (rates[i] if rates is not None else self._rate(ph, shared))
                for i, ph in enumerate(b.phases)
                if ph.bytes_factor > 0
            )  # fmt: skip
            if worst is None or lat + transfer > sum(worst):
                worst = (lat, transfer)
        return worst

    def joint_rates(self, bundles: Sequence[Bundle]) -> list[tuple[float, ...]]:
        """Per bundle, per phase: the per-flow rate when the same phase of every bundle
        runs at once and all their flows share the links max-min fairly (the bundles of
        one activation start together and their phases are alike, so phase i of one
        class overlaps phase i of the others)."""
        key = tuple(id(b) for b in bundles)
        hit = self._joint_cache.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], bundles, strict=True)):
            return hit[1]
        depth = max((len(b.phases) for b in bundles), default=0)
        out: list[list[float]] = [[] for _ in bundles]
        for i in range(depth):
            live = [j for j, b in enumerate(bundles) if len(b.phases) > i]
            if len(live) == 1:
                j = live[0]
                out[j].append(bundles[j].phases[i].shared_rate_Bps)
                continue
            phases = [bundles[j].phases[i] for j in live]
            rates = self.solves.solve(phases, self.bandwidth_Bps)
            for j, r in zip(live, rates.tolist(), strict=True):
                out[j].append(r)
        result = [tuple(r) for r in out]
        self._joint_cache[key] = (tuple(bundles), result)
        return result

    def phase_latency(self, phase: BoundPhase, protocol: str) -> float:
        """A phase's latency under `protocol`: node-crossing steps pay the worst route
        latency plus the protocol's per-hop network latency, the others the node-local
        route latency plus the node-local step latency, which in a phase that crosses
        nodes is at least the proxy's per-step floor (NCCL's max(intraLat, netOverhead))."""
        t = self.params.collectives.term(protocol)
        k = phase.inter_steps
        return k * (phase.far_s + t.inter_step_s) + (phase.steps - k) * (
            phase.near_s + t.local_step_s(phase.inter)
        )

    def _regime_protocols(
        self, phases: tuple[BoundPhase, ...], inter: bool, nbytes: float
    ) -> tuple[str, ...]:
        """The protocol a measured regime of the library build runs a call on (its
        tuner's choice in the regime's window, e.g. RCCL's Simple), if any applies and
        no protocol is forced; () otherwise."""
        regimes = self.params.collectives.active_regimes
        if not regimes or self.protocol != "auto":
            return ()
        enabled = self.params.collectives.protocols(inter)
        for r in regimes:
            if r.protocol in enabled and any(
                ph.chunk_factor > 0 and r.in_window(ph.inter, ph.chunk_factor * nbytes)
                for ph in phases
            ):
                return (r.protocol,)
        return ()

    def stall_latency(self, phase: BoundPhase, protocol: str, nbytes: float) -> float:
        """The stall of the library build's measured regimes (simulator/network/regimes.py)
        on a phase under `protocol` for a collective of `nbytes`; 0 where none applies."""
        regimes = self.params.collectives.active_regimes
        if not regimes or phase.chunk_factor <= 0:
            return 0.0
        step = phase.chunk_factor * nbytes
        return sum(r.stall_s(protocol, phase.inter, step, phase.steps) for r in regimes)

    def protocols_for(self, bundle: Bundle) -> tuple[str, ...]:
        """The protocols the tuner weighs for a bundle (a forced one alone)."""
        if self.protocol != "auto":
            return (self.protocol,)
        return self.params.collectives.protocols(bundle.tier == "inter_node")

    def time_terms(
        self,
        bundle: Bundle,
        nbytes: float,
        kind: CollectiveKind | None,
        shared: bool,
        rates: Sequence[float] | None = None,
        tuner: bool = False,
    ) -> tuple[float, float]:
        """(latency, transfer) seconds of a bundle alone, its protocol chosen and calibrated
        tables applied: `shared` prices its flows sharing links among themselves (the
        contention model seen alone), else at their route bottlenecks (alpha-beta);
        `rates` (per phase) replaces those rates (the tuner's joint sharing). `tuner`:
        as the library's tuner sees it, without its build's measured stalls."""
        pl = self.plan(bundle, kind, nbytes, shared)
        transfer = 0.0
        for i, (b, ph) in enumerate(zip(pl.bytes_per_flow, bundle.phases, strict=True)):
            if b > 0:
                rate = rates[i] if rates is not None else self._rate(ph, shared)
                transfer += b / rate
        stall = pl.stall_s if tuner else 0.0
        return pl.overhead_s + sum(pl.latency_s) - stall, transfer

    @staticmethod
    def _rate(phase: BoundPhase, shared: bool) -> float:
        return phase.shared_rate_Bps if shared else phase.rate_Bps

    @staticmethod
    def _tuner_rate(phase: BoundPhase, shared: bool) -> float:
        """The rate one instance's tuner (NCCL's, per communicator) prices with."""
        return phase.instance_rate_Bps if shared else phase.rate_Bps

    # ---------------------------------------------------------------- pricing
    def estimate_time_s(
        self, bundle: Bundle, nbytes: float, kind: CollectiveKind | None = None
    ) -> float:
        """Time of a bundle alone on the network, its own flows sharing links fairly
        (calibrated tables apply when `kind` is given)."""
        return sum(self.time_terms(bundle, nbytes, kind, shared=True))

    def plan(
        self, bundle: Bundle, kind: CollectiveKind | None, nbytes: float, shared: bool
    ) -> PhasePlan:
        """Latencies and per-flow wire bytes of a bundle for `nbytes`, and its protocol.

        Without calibration: the protocol NCCL's tuner would pick for one instance alone
        (each communicator tunes itself, so the choice does not depend on how instances
        are bundled): the smallest launch (+ the network's base for a bundle crossing
        nodes) + base latency + step latencies + bytes / (rate x bandwidth factor) among
        the protocols enabled on the bundle's tier; its latencies, and each phase's bytes
        inflated by the protocol's bandwidth factor. With a calibrated table for (GPU,
        tier, kind, group size), the bundle's isolated time equals the table (a size-1
        group, which has no phases, pays all of it as overhead): the table's alpha
        replaces overhead and latencies (spread over phases by step count) and every
        phase's bytes are stretched by the ratio of the table's bandwidth term to the
        model's for one instance alone (`shared`; else at route bottlenecks), so
        contention still slows it down where links are shared with others.
        """
        ckey = (id(bundle), kind, nbytes, shared)
        hit = self._plan_cache.get(ckey)
        if hit is not None and hit[0] is bundle:  # ids of dead bundles can be reused
            return hit[1]
        result = self._plan(bundle, kind, nbytes, shared)
        self._plan_cache[ckey] = (bundle, result)
        return result

    def _protocol_plan(self, bundle: Bundle, nbytes: float, shared: bool) -> PhasePlan:
        phases = bundle.phases
        launch = self.params.collectives.launch_overhead_s
        if not phases:
            return PhasePlan(launch, (), ())
        if bundle.separate_calls:  # each phase a call of its own (hierarchical levels)
            calls = [self._call_plan((ph,), ph.inter, nbytes, shared) for ph in phases]
            protos = tuple(dict.fromkeys(c[0] for c in calls))
            return PhasePlan(
                0.0,
                tuple(fixed + lat[0] for _, fixed, lat, _, _ in calls),
                tuple(wire[0] for _, _, _, wire, _ in calls),
                "+".join(protos),
                sum(c[4] for c in calls),
            )
        proto, fixed, lat, wire, stall = self._call_plan(
            phases, bundle.tier == "inter_node", nbytes, shared
        )
        return PhasePlan(fixed, lat, wire, proto, stall)

    def _call_plan(
        self, phases: tuple[BoundPhase, ...], inter: bool, nbytes: float, shared: bool
    ) -> tuple[str, float, tuple[float, ...], tuple[float, ...], float]:
        """(protocol, fixed overhead, per-phase latencies, per-phase wire bytes per flow,
        the stalls included in those latencies) of one library call running `phases`: the protocol its tuner picks (the smallest
        launch (+ the network's base for a call crossing nodes) + base latency + step
        latencies + bytes / (rate x bandwidth factor) among those enabled on its tier, or
        the one a measured regime of the build runs it on), then the regime's stalls."""
        model = self.params.collectives
        fixed_launch = model.launch_overhead_s + (model.inter_node_base_s if inter else 0.0)
        best: tuple[str, float, tuple[float, ...], tuple[float, ...]] | None = None
        best_t = np.inf
        forced = self._regime_protocols(phases, inter, nbytes)
        enabled = (self.protocol,) if self.protocol != "auto" else model.protocols(inter)
        for proto in forced or enabled:
            term = model.term(proto)
            lat = tuple(self.phase_latency(ph, proto) for ph in phases)
            wire = tuple(self._wire_bytes(ph, nbytes, proto) for ph in phases)
            fixed = fixed_launch + term.base_latency_s
            total = fixed + sum(lat)
            total += sum(
                b / self._tuner_rate(ph, shared)
                for b, ph in zip(wire, phases, strict=True)
                if b > 0
            )
            if total < best_t:
                best_t = total
                best = (proto, fixed, lat, wire)
        assert best is not None  # a tier always enables a protocol
        if model.active_regimes:
            # the library's tuner chose without its build's measured stalls; they are paid
            stalls = [self.stall_latency(ph, best[0], nbytes) for ph in phases]
            if any(stalls):
                lat = tuple(a + b for a, b in zip(best[2], stalls, strict=True))
                return best[0], best[1], lat, best[3], sum(stalls)
        return (*best, 0.0)

    def _wire_bytes(self, phase: BoundPhase, nbytes: float, protocol: str) -> float:
        """Bytes each flow of a phase puts on the wire under `protocol`: its share,
        inflated by the protocol's bandwidth factor, and for a pipelined chain the
        L - 1 chunks of its fill (schedules.CHAIN_CHUNK_BYTES)."""
        share = phase.bytes_factor * nbytes
        if phase.chain_hops > 1:
            chunk = CHAIN_CHUNK_BYTES.get(protocol, CHAIN_CHUNK_BYTES["Simple"])
            share += (phase.chain_hops - 1) * min(share, chunk)
        return share / self.params.collectives.term(protocol).bandwidth_factor

    def _plan(
        self, bundle: Bundle, kind: CollectiveKind | None, nbytes: float, shared: bool
    ) -> PhasePlan:
        phases = bundle.phases
        table = None
        if self.calibration is not None and kind is not None:
            table = self.calibration.collective(self.gpu, bundle.tier, kind, bundle.group_size)
        if table is None:
            return self._protocol_plan(bundle, nbytes, shared)
        assert kind is not None
        if nbytes > table.largest_bytes:
            return self._beyond_table(bundle, kind, table.largest_bytes, nbytes, shared)
        seg = table.segment_for(nbytes)
        if seg is not None:
            alpha, total = seg.alpha_s, seg.time_s(nbytes)
        else:
            bus = table.busbw_Bps(nbytes)
            if not bus:
                return self._protocol_plan(bundle, nbytes, shared)
            alpha, total = 0.0, nbytes * bus_factor(kind, bundle.group_size) / bus
        if not phases:  # a size-1 group moves nothing: its measured time is all overhead
            return PhasePlan(total, (), (), "table")
        raw = tuple(ph.bytes_factor * nbytes for ph in phases)
        model_bw = sum(b / self._tuner_rate(ph, shared) for b, ph in zip(raw, phases, strict=True))
        stretch = (total - alpha) / model_bw if model_bw > 0 else 1.0
        steps = sum(ph.steps for ph in phases) or 1
        return PhasePlan(
            0.0,
            tuple(alpha * ph.steps / steps for ph in phases),
            tuple(b * stretch for b in raw),
            "table",
        )

    def _beyond_table(
        self, bundle: Bundle, kind: CollectiveKind, edge: float, nbytes: float, shared: bool
    ) -> PhasePlan:
        """A size above the table's largest measurement (`edge`): the network model's own
        plan for `nbytes`, scaled by the table's correction at the edge (measured time /
        model time there), so the time is continuous at the edge and grows as the model
        says beyond it; a flat end segment no longer makes 16 GiB as fast as 64 MiB."""
        measured = self._plan(bundle, kind, edge, shared)
        model_edge = self._protocol_plan(bundle, edge, shared)
        model = self._protocol_plan(bundle, nbytes, shared)
        ratio = self._isolated_s(bundle, measured, shared) / self._isolated_s(
            bundle, model_edge, shared
        )
        return PhasePlan(
            model.overhead_s * ratio,
            tuple(x * ratio for x in model.latency_s),
            tuple(x * ratio for x in model.bytes_per_flow),
            "table",
        )

    def _isolated_s(self, bundle: Bundle, plan: PhasePlan, shared: bool) -> float:
        """A plan's time for one instance alone (the rates the tuner and tables use)."""
        moved = sum(
            b / self._tuner_rate(ph, shared)
            for b, ph in zip(plan.bytes_per_flow, bundle.phases, strict=True)
            if b > 0
        )
        return plan.overhead_s + sum(plan.latency_s) + moved

    def alpha_beta_time_s(
        self, bundle: Bundle, nbytes: float, kind: CollectiveKind | None = None
    ) -> float:
        """Isolated time of a bundle: per phase latency + bytes over the bottleneck rate
        (a size-1 group still pays the collective's launch overhead); calibrated tables
        apply when `kind` is given."""
        return sum(self.time_terms(bundle, nbytes, kind, shared=False))


class _RingPlanner:
    """Ring orders and channels for the schedules, backed by the pricer's topology."""

    def __init__(self, pricer: CollectivePricer, gpus: np.ndarray):
        self.pricer = pricer
        self.gpus = gpus

    def __call__(self, positions: Sequence[int]) -> list[int]:
        ps = list(positions)
        if len(ps) <= 2:
            return ps
        best = self.pricer._ring_cycles([int(self.gpus[q]) for q in ps])[0]
        return [ps[i] for i in best]

    def channels(self, positions: Sequence[int]) -> list[list[int]]:
        """Single-node multi-channel rings (NCCL/RCCL channels over different links)."""
        ps = list(positions)
        if len(ps) <= 2:
            return [ps]
        return [
            [ps[i] for i in cyc]
            for cyc in self.pricer._ring_cycles([int(self.gpus[q]) for q in ps])
        ]
