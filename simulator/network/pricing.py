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
from dataclasses import dataclass
from itertools import permutations
from typing import TYPE_CHECKING, cast

import numpy as np

from simulator.errors import CostModelError
from simulator.network.params import NetworkParams
from simulator.network.schedules import (
    ALGORITHMS,
    Layout,
    OrderFn,
    Schedule,
    build_schedule,
    candidate_algorithms,
)
from topologies.types import Topology
from workloads.ops import CollectiveKind, bus_factor

if TYPE_CHECKING:  # type only: the calibration models (pydantic) load when a file is read
    from simulator.cost.calibration import Calibration

MAX_RING_SEARCH = 8  # brute-force the best intra-node ring up to this many GPUs
BIND_CHUNK_FLOWS = 1 << 15
"""Flows routed at once when binding: bounds the transient path arrays of huge groups."""
# NCCL's tuning model (src/graph/tuning.cc): tree all-reduce algorithm bandwidth is
# 0.92 (its model refinement) x 0.5 (each of the two trees carries half) of the bus bandwidth
NCCL_TREE_RATIO = 0.92 * 0.5


@dataclass(frozen=True, eq=False)
class BoundPhase:
    """One phase of a bundle on the topology."""

    links: np.ndarray  # unique link ids used
    counts: np.ndarray  # flows (route-weighted, summed over instances) per link
    latency_s: float  # steps x (worst route latency + per-step software latency)
    rate_Bps: float  # alpha-beta per-flow rate: slowest flow's bottleneck, no sharing
    bytes_factor: float  # bytes per flow = bytes_factor x S
    steps: int
    shared_rate_Bps: float = np.inf  # per-flow rate when the bundle's own flows share links
    inter: bool = False  # some flow leaves its node


@dataclass(frozen=True, eq=False)
class Bundle:
    """Instances (row indices into the activation's instance table) priced together."""

    rows: np.ndarray
    algorithm: str
    phases: tuple[BoundPhase, ...]
    group_size: int = 1
    tier: str = "intra_node"  # "inter_node" if any flow leaves its node


@dataclass(frozen=True)
class PhasePlan:
    """How a bundle runs for one message size: overhead, then per phase its latency and
    the bytes each flow moves (calibration may stretch both)."""

    overhead_s: float
    latency_s: tuple[float, ...]
    bytes_per_flow: tuple[float, ...]


class CollectivePricer:
    """Schedules, binds and alpha-beta-prices collectives on one topology."""

    def __init__(
        self,
        topology: Topology,
        params: NetworkParams,
        algorithm: str = "auto",
        calibration: Calibration | None = None,
        gpu: str | None = None,
    ):
        if algorithm != "auto" and algorithm not in ALGORITHMS:
            raise CostModelError(
                f"unknown collective algorithm '{algorithm}' (use auto or one of {', '.join(ALGORITHMS)})"
            )
        self.topology = topology
        self.params = params
        self.calibration = calibration
        self.gpu = gpu or topology.gpu_type
        self.algorithm = algorithm
        self.bandwidth_Bps = params.effective_bandwidth(topology)
        self.latency_s = topology.links.latency_s
        node = topology.devices.node[topology.gpus]
        self.gpu_node = node.astype(np.int64)
        self.gpu_local = topology.devices.local_index[topology.gpus].astype(np.int64)
        # topology builders store these metadata entries as ints (see topologies/machines.py)
        self.package_size = int(cast("int | None", topology.metadata.get("package_size", 1)) or 1)
        self.homogeneous = bool(topology.metadata.get("homogeneous_nodes", True))
        self._gpu_at: dict[tuple[int, int], int] = {
            (int(nd), int(lc)): g
            for g, (nd, lc) in enumerate(zip(self.gpu_node, self.gpu_local, strict=True))
        }
        self._bw_list: list[float] = self.bandwidth_Bps.tolist()
        self._lat_list: list[float] = np.asarray(self.latency_s, dtype=np.float64).tolist()
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
        self._plan_cache: dict[tuple[int, CollectiveKind, float, bool], PhasePlan] = {}
        # how the tuner compares candidates: "shared" (the bundle's own link sharing, as the
        # contention model sees it alone) or "bottleneck" (alpha-beta's route bottlenecks):
        # the engine sets it to its network model so choices and prices agree
        self.tuner = "shared"
        self._choice_cache: dict[Hashable, str] = {}

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
        and local indices share a layout)."""
        nodes = self.gpu_node[instances]
        key = np.concatenate([nodes - nodes[:, :1], self.gpu_local[instances]], axis=1)
        if (key == key[:1]).all():  # the common case: every instance laid out alike
            return {self.layout(instances[0]): np.arange(instances.shape[0])}
        _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
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
        usage: list[dict[int, int]] = []
        for cyc in cycles:
            use: dict[int, int] = {}
            for a, b in zip(cyc, cyc[1:] + cyc[:1], strict=True):
                for link in routes[(a, b)]:
                    use[link] = use.get(link, 0) + 1
            usage.append(use)
        residual = {link: self._bw_list[link] for use in usage for link in use}
        chosen: list[list[int]] = []
        slowest = float("inf")
        for _ in range(m):
            best_i, best_rate = -1, 0.0
            for ci, use in enumerate(usage):
                rate = min(residual[link] / n for link, n in use.items())
                if rate > best_rate * (1 + 1e-12):
                    best_i, best_rate = ci, rate
            if best_i < 0 or (
                chosen and (len(chosen) + 1) * min(slowest, best_rate) <= len(chosen) * slowest
            ):
                break
            chosen.append(list(cycles[best_i]))
            slowest = min(slowest, best_rate)
            for link, n in usage[best_i].items():
                residual[link] -= best_rate * n
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
        bw, lt = self._bw_list, self._lat_list
        links: list[int] = []
        weights: list[float] = []
        rate = float("inf")
        lat = 0.0
        for path, w in zip(route.paths, route.weights, strict=True):
            links.extend(path)
            weights.extend([w] * len(path))
            rate = min(rate, min(bw[x] for x in path) / w)
            lat = max(lat, sum(lt[x] for x in path))
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
        self, src: np.ndarray, dst: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Links/weights of arbitrary flows from the topology's router, with per-flow rate and
        latency computed in numpy over the flattened paths."""
        batch = self.topology.routes_batch(src, dst)
        links, plen, pw = batch.links, batch.path_len, batch.path_weight
        starts = np.concatenate([[0], np.cumsum(plen)[:-1]])
        bott = np.minimum.reduceat(self.bandwidth_Bps[links], starts) / pw
        plat = np.add.reduceat(self._latency[links], starts)
        rstarts = np.concatenate([[0], np.cumsum(batch.paths_per_route)[:-1]])
        rates = np.minimum.reduceat(bott, rstarts)
        lats = np.maximum.reduceat(plat, rstarts)
        return links, np.repeat(pw, plen), rates, lats

    def _flow_links(
        self, src: np.ndarray, dst: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, float, tuple[float, float], bool]:
        """All links (with route weights) of a set of flows, their slowest rate, the worst
        path latency of node-local and of inter-node flows, and whether any flow leaves
        its node.

        Node-local flows use translated templates; inter-node flows take PXN's rail-aligned
        path (a node-local hop to the GPU on the destination's rail, then the fabric)."""
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
                        lk1, wt1, rt, lt = self._routed_parts(a[hop], relay[hop])
                        links.append(lk1)
                        weights.append(wt1)
                    rate = min(rate, float(rt.min()))
                    first_lat[hop] = lt
                    a = np.where(hop, relay, a)
            lk2, wt2, rt2, lt2 = self._routed_parts(a, b)
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
        self, src: np.ndarray, dst: np.ndarray, share: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, float, tuple[float, float], bool]:
        """`_flow_links` of flows that each carry `share` of the phase's per-flow bytes:
        their route weights scale by it and their rate (bytes over time) divides by it."""
        if share is None:
            return self._flow_links(src, dst)
        links: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        rate, near, far, inter = float("inf"), 0.0, 0.0, False
        for value in np.unique(share).tolist():
            sel = share == value
            lk, wt, rt, (ln, lf), it = self._flow_links(src[sel], dst[sel])
            links.append(lk)
            weights.append(wt * value)
            rate, near, far, inter = min(rate, rt / value), max(near, ln), max(far, lf), inter or it
        return np.concatenate(links), np.concatenate(weights), rate, (near, far), inter

    # --------------------------------------------------------------- binding
    def _link_loads(
        self, src: np.ndarray, dst: np.ndarray, share: np.ndarray | None
    ) -> tuple[np.ndarray, float, tuple[float, float], bool]:
        """Flow multiplicity per link (dense over all links) of a phase's flows, with
        their slowest rate, worst (node-local, inter-node) latencies and whether any
        leaves its node; routed in chunks so a huge group's paths never all sit in memory."""
        dense = np.zeros(self.num_links)
        rate, near, far, inter = float("inf"), 0.0, 0.0, False
        for lo in range(0, max(src.shape[0], 1), BIND_CHUNK_FLOWS):
            hi = lo + BIND_CHUNK_FLOWS
            part = None if share is None else share[lo:hi]
            links, w, rt, (ln, lf), it = self._shared_flow_links(src[lo:hi], dst[lo:hi], part)
            if links.size:
                dense += np.bincount(links, weights=w, minlength=self.num_links)
            rate, near, far, inter = min(rate, rt), max(near, ln), max(far, lf), inter or it
        return dense, rate, (near, far), inter

    def _bind(self, schedule: Schedule, instances: np.ndarray, rows: np.ndarray) -> Bundle:
        phases: list[BoundPhase] = []
        for ph in schedule.phases:
            src = instances[np.ix_(rows, ph.src)].ravel()
            dst = instances[np.ix_(rows, ph.dst)].ravel()
            share = None if ph.share is None else np.tile(ph.share, len(rows))
            dense, rate, (near, far), inter = self._link_loads(src, dst, share)
            uniq = np.flatnonzero(dense)  # O(flows + links): no sort of millions of entries
            counts = dense[uniq]
            intra_step = near + self.params.step_latency_intra_s
            inter_step = max(near, far) + self.params.step_latency_inter_s
            if not inter:
                latency = ph.steps * intra_step
            elif ph.inter_steps is None:
                latency = ph.steps * inter_step
            else:  # NCCL's latency model: only the node-crossing steps pay the network's
                k = min(ph.inter_steps, ph.steps)
                latency = k * inter_step + (ph.steps - k) * intra_step
            shared = float((self.bandwidth_Bps[uniq] / counts).min()) if uniq.size else np.inf
            phases.append(
                BoundPhase(
                    links=uniq,
                    counts=counts,
                    latency_s=latency,
                    rate_Bps=float(rate),
                    bytes_factor=ph.bytes_factor,
                    steps=ph.steps,
                    shared_rate_Bps=shared,
                    inter=inter,
                )
            )
        tier = "inter_node" if any(ph.steps and ph.inter for ph in phases) else "intra_node"
        return Bundle(
            rows=rows,
            algorithm=schedule.algorithm,
            phases=tuple(phases),
            group_size=int(instances.shape[1]),
            tier=tier,
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
            bundles.append(self._bind(schedule, inst, rows))
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
        over the rate its flows get when they share links), as NCCL's tuner picks per
        size. The contention tuner prices every instance at once, as they run in a job: a
        lone instance's estimate favoured the tree where its concurrent instances then
        collide on the fabric, so more fabric bandwidth could flip the choice and slow the
        iteration. The engine passes a group's instances all together in both modes, so
        full and symmetric runs choose alike. The alpha-beta tuner (route bottlenecks, no
        sharing) prices one instance of each layout, which stands for all."""
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
        for cand in candidate_algorithms(kind, next(iter(classes))):
            try:
                b = self.bind(kind, probe, cand, root, pkey)
            except CostModelError:
                continue
            terms[cand] = max(
                (self.time_terms(x, nbytes, kind, shared) for x in b), key=sum, default=(0.0, 0.0)
            )
        if "tree" in terms and "ring" in terms and kind is CollectiveKind.ALL_REDUCE:
            # NCCL's tuner gives tree and ring the same bus bandwidth and converts it to
            # algorithm bandwidth with 0.92 * 0.5 for the tree and p / (2 (p - 1)) for the
            # ring, so the tree never wins on bandwidth, only on latency (its 2 log steps
            # against the ring's 2 (p - 1)). Where the tree's own flows are slower still
            # (its heads use fewer NICs than the ring's channels), that slower time counts.
            p = max(int(inst.shape[1]), 2)
            nccl_transfer = terms["ring"][1] * p / (2 * (p - 1)) / NCCL_TREE_RATIO
            terms["tree"] = (terms["tree"][0], max(terms["tree"][1], nccl_transfer))
        best_algo: str | None = None
        best_t = np.inf
        for cand, (lat, transfer) in terms.items():
            if lat + transfer < best_t:
                best_algo, best_t = cand, lat + transfer
        if best_algo is None:
            raise CostModelError(f"no algorithm supports {kind.value} on this group")
        if ckey is not None:
            self._choice_cache[ckey] = best_algo
        return best_algo

    def time_terms(
        self, bundle: Bundle, nbytes: float, kind: CollectiveKind, shared: bool
    ) -> tuple[float, float]:
        """(latency, transfer) seconds of a bundle alone, calibrated tables applied:
        `shared` prices its flows sharing links among themselves (the contention model
        seen alone), else at their route bottlenecks (alpha-beta)."""
        pl = self.plan(bundle, kind, nbytes, shared)
        transfer = 0.0
        for b, ph in zip(pl.bytes_per_flow, bundle.phases, strict=True):
            if b > 0:
                transfer += b / (ph.shared_rate_Bps if shared else ph.rate_Bps)
        return pl.overhead_s + sum(pl.latency_s), transfer

    # ---------------------------------------------------------------- pricing
    def estimate_time_s(
        self, bundle: Bundle, nbytes: float, kind: CollectiveKind | None = None
    ) -> float:
        """Time of a bundle alone on the network, its own flows sharing links fairly
        (calibrated tables apply when `kind` is given)."""
        if kind is not None:
            return sum(self.time_terms(bundle, nbytes, kind, shared=True))
        t = self.params.collective_overhead_s
        for ph in bundle.phases:
            t += ph.latency_s
            if nbytes > 0 and ph.bytes_factor > 0:
                t += ph.bytes_factor * nbytes / ph.shared_rate_Bps
        return t

    def plan(self, bundle: Bundle, kind: CollectiveKind, nbytes: float, shared: bool) -> PhasePlan:
        """Latencies and per-flow bytes of a bundle for `nbytes`.

        Without calibration: the collective overhead, each phase's latency and its bytes.
        With a calibrated table for (GPU, tier, kind, group size), the bundle's isolated
        time equals the table (a size-1 group, which has no phases, pays all of it as
        overhead): the table's alpha replaces overhead and latencies (spread
        over phases by step count) and every phase's bytes are stretched by the ratio of
        the table's bandwidth term to the model's (`shared`: with the bundle's own link
        sharing, as the contention model sees it alone; else route bottlenecks), so
        contention still slows it down where links are shared with others.
        """
        ckey = (id(bundle), kind, nbytes, shared)
        hit = self._plan_cache.get(ckey)
        if hit is not None:
            return hit
        result = self._plan(bundle, kind, nbytes, shared)
        self._plan_cache[ckey] = result
        return result

    def _plan(self, bundle: Bundle, kind: CollectiveKind, nbytes: float, shared: bool) -> PhasePlan:
        phases = bundle.phases
        raw = tuple(ph.bytes_factor * nbytes for ph in phases)
        plain = PhasePlan(
            self.params.collective_overhead_s, tuple(ph.latency_s for ph in phases), raw
        )
        table = None
        if self.calibration is not None:
            table = self.calibration.collective(self.gpu, bundle.tier, kind, bundle.group_size)
        if table is None:
            return plain
        seg = table.segment_for(nbytes)
        if seg is not None:
            alpha, total = seg.alpha_s, seg.time_s(nbytes)
        else:
            bus = table.busbw_Bps(nbytes)
            if not bus:
                return plain
            alpha, total = 0.0, nbytes * bus_factor(kind, bundle.group_size) / bus
        if not phases:  # a size-1 group moves nothing: its measured time is all overhead
            return PhasePlan(total, (), ())
        model_bw = sum(
            b / (ph.shared_rate_Bps if shared else ph.rate_Bps)
            for b, ph in zip(raw, phases, strict=True)
        )
        stretch = (total - alpha) / model_bw if model_bw > 0 else 1.0
        steps = sum(ph.steps for ph in phases) or 1
        return PhasePlan(
            0.0,
            tuple(alpha * ph.steps / steps for ph in phases),
            tuple(b * stretch for b in raw),
        )

    def alpha_beta_time_s(
        self, bundle: Bundle, nbytes: float, kind: CollectiveKind | None = None
    ) -> float:
        """Isolated time of a bundle: per phase latency + bytes over the bottleneck rate
        (a size-1 group still pays the collective's launch overhead); calibrated tables
        apply when `kind` is given."""
        if kind is not None:
            return sum(self.time_terms(bundle, nbytes, kind, shared=False))
        t = self.params.collective_overhead_s
        for ph in bundle.phases:
            t += ph.latency_s
            if nbytes > 0 and ph.bytes_factor > 0:
                t += ph.bytes_factor * nbytes / ph.rate_Bps
        return t


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
