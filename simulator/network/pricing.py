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
from workloads.ops import CollectiveKind

MAX_RING_SEARCH = 8  # brute-force the best intra-node ring up to this many GPUs


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


@dataclass(frozen=True, eq=False)
class Bundle:
    """Instances (row indices into the activation's instance table) priced together."""

    rows: np.ndarray
    algorithm: str
    phases: tuple[BoundPhase, ...]


class CollectivePricer:
    """Schedules, binds and alpha-beta-prices collectives on one topology."""

    def __init__(
        self,
        topology: Topology,
        params: NetworkParams,
        algorithm: str = "auto",
    ):
        if algorithm != "auto" and algorithm not in ALGORITHMS:
            raise CostModelError(
                f"unknown collective algorithm '{algorithm}' (use auto or one of {', '.join(ALGORITHMS)})"
            )
        self.topology = topology
        self.params = params
        self.algorithm = algorithm
        self.bandwidth_Bps = params.effective_bandwidth(topology)
        self.latency_s = topology.links.latency_s
        node = topology.devices.node[topology.gpus]
        self.gpu_node = node.astype(np.int64)
        self.gpu_local = topology.devices.local_index[topology.gpus].astype(np.int64)
        self.package_size = int(topology.metadata.get("package_size", 1) or 1)
        self.homogeneous = bool(topology.metadata.get("homogeneous_nodes", True))
        self._gpu_at: dict[tuple[int, int], int] = {
            (int(nd), int(lc)): g for g, (nd, lc) in enumerate(zip(self.gpu_node, self.gpu_local, strict=True))
        }
        self._order_cache: dict[tuple[int, ...], list[int]] = {}
        self._route_cache: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, float, float]] = {}
        self._bind_cache: dict[Hashable, tuple[Bundle, ...]] = {}
        self._choice_cache: dict[Hashable, tuple[Bundle, ...]] = {}

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

    def _order_fn(self, gpus: np.ndarray) -> OrderFn:
        def order(positions: Sequence[int]) -> list[int]:
            ps = list(positions)
            if len(ps) <= 2:
                return ps
            key = (
                tuple(int(self.gpu_local[gpus[q]]) for q in ps)
                if self.homogeneous
                else tuple(int(gpus[q]) for q in ps)
            )
            best = self._order_cache.get(key)
            if best is None:
                best = self._best_cycle([int(gpus[q]) for q in ps])
                self._order_cache[key] = best
            return [ps[i] for i in best]

        return order

    def _best_cycle(self, gpus: list[int]) -> list[int]:
        """Indices of `gpus` in the ring order with the widest bottleneck (ties: the
        larger total bandwidth, then lexicographic), as NCCL/RCCL's ring search does."""
        m = len(gpus)
        if m > MAX_RING_SEARCH:
            return list(range(m))
        bw = np.zeros((m, m))
        for i in range(m):
            for j in range(m):
                if i != j:
                    bw[i, j] = self._route(gpus[i], gpus[j])[2]
        best: tuple[float, float] | None = None
        best_order = list(range(m))
        for perm in permutations(range(1, m)):
            cyc = (0, *perm)
            vals = [bw[cyc[i], cyc[(i + 1) % m]] for i in range(m)]
            score = (min(vals), sum(vals))
            if best is None or score > best:
                best, best_order = score, list(cyc)
        return best_order

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
            result = (np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]), min(a[2], b[2]), a[3] + b[3])
        else:
            result = self._direct_route(src_gpu, dst_gpu)
        self._route_cache[key] = result
        return result

    def _pxn_relay(self, src_gpu: int, dst_gpu: int) -> int | None:
        if not self.params.pxn or self.gpu_node[src_gpu] == self.gpu_node[dst_gpu]:
            return None
        relay = self._gpu_at.get((int(self.gpu_node[src_gpu]), int(self.gpu_local[dst_gpu])))
        return None if relay is None or relay == src_gpu else relay

    def _direct_route(self, src_gpu: int, dst_gpu: int) -> tuple[np.ndarray, np.ndarray, float, float]:
        route = self.topology.route(src_gpu, dst_gpu)
        links: list[int] = []
        weights: list[float] = []
        rate = np.inf
        lat = 0.0
        for path, w in zip(route.paths, route.weights, strict=True):
            idx = np.fromiter(path, dtype=np.int64, count=len(path))
            links.extend(path)
            weights.extend([w] * len(path))
            rate = min(rate, float(self.bandwidth_Bps[idx].min()) / w)
            lat = max(lat, float(self.latency_s[idx].sum()))
        return (np.asarray(links, dtype=np.int64), np.asarray(weights, dtype=np.float64), rate, lat)

    # --------------------------------------------------------------- binding
    def _bind(self, schedule: Schedule, instances: np.ndarray, rows: np.ndarray) -> Bundle:
        phases: list[BoundPhase] = []
        for ph in schedule.phases:
            src = instances[np.ix_(rows, ph.src)].ravel()
            dst = instances[np.ix_(rows, ph.dst)].ravel()
            link_parts: list[np.ndarray] = []
            weight_parts: list[np.ndarray] = []
            rate = np.inf
            lat = 0.0
            inter = False
            for s, d in zip(src.tolist(), dst.tolist(), strict=True):
                links, weights, r, lt = self._route(s, d)
                link_parts.append(links)
                weight_parts.append(weights)
                rate = min(rate, r)
                lat = max(lat, lt)
                inter = inter or self.gpu_node[s] != self.gpu_node[d]
            all_links = np.concatenate(link_parts) if link_parts else np.zeros(0, dtype=np.int64)
            all_w = np.concatenate(weight_parts) if weight_parts else np.zeros(0)
            uniq, inv = np.unique(all_links, return_inverse=True)
            counts = np.bincount(inv, weights=all_w, minlength=uniq.shape[0])
            step = self.params.step_latency_inter_s if inter else self.params.step_latency_intra_s
            shared = float((self.bandwidth_Bps[uniq] / counts).min()) if uniq.size else np.inf
            phases.append(
                BoundPhase(
                    links=uniq,
                    counts=counts,
                    latency_s=ph.steps * (lat + step),
                    rate_Bps=float(rate),
                    bytes_factor=ph.bytes_factor,
                    steps=ph.steps,
                    shared_rate_Bps=shared,
                )
            )
        return Bundle(rows=rows, algorithm=schedule.algorithm, phases=tuple(phases))

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
        by_layout: dict[Layout, list[int]] = {}
        for row in range(inst.shape[0]):
            by_layout.setdefault(self.layout(inst[row]), []).append(row)
        bundles = []
        for layout, rows in by_layout.items():
            schedule = build_schedule(algorithm, kind, layout, self._order_fn(inst[rows[0]]), root)
            bundles.append(self._bind(schedule, inst, np.asarray(rows, dtype=np.int64)))
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
        """Bundles for a collective of `nbytes`. With 'auto' the algorithm is the one with
        the smallest estimated time, as NCCL's tuner picks it: latency plus bytes over the
        rate the bundle gets when its own flows (all concurrent instances included) share
        links, evaluated on the worst bundle."""
        algo = algorithm or self.algorithm
        if algo != "auto" or kind is CollectiveKind.SEND_RECV:
            return self.bind(
                kind, instances, "direct" if kind is CollectiveKind.SEND_RECV else algo, root, key
            )
        ckey = None if key is None else (key, kind, root, float(nbytes))
        if ckey is not None:
            hit = self._choice_cache.get(ckey)
            if hit is not None:
                return hit
        inst = np.asarray(instances, dtype=np.int64)
        layout = self.layout(inst[0])
        best: tuple[Bundle, ...] | None = None
        best_t = np.inf
        for cand in candidate_algorithms(kind, layout):
            try:
                b = self.bind(kind, inst, cand, root, key)
            except CostModelError:
                continue
            t = max(self.estimate_time_s(x, nbytes) for x in b) if b else 0.0
            if t < best_t:
                best, best_t = b, t
        if best is None:
            raise CostModelError(f"no algorithm supports {kind.value} on this group")
        if ckey is not None:
            self._choice_cache[ckey] = best
        return best

    # ---------------------------------------------------------------- pricing
    def estimate_time_s(self, bundle: Bundle, nbytes: float) -> float:
        """Time of a bundle alone on the network, its own flows sharing links fairly."""
        t = self.params.collective_overhead_s
        for ph in bundle.phases:
            t += ph.latency_s
            if nbytes > 0 and ph.bytes_factor > 0:
                t += ph.bytes_factor * nbytes / ph.shared_rate_Bps
        return t

    def alpha_beta_time_s(self, bundle: Bundle, nbytes: float) -> float:
        """Isolated time of a bundle: per phase latency + bytes over the bottleneck rate
        (a size-1 group still pays the collective's launch overhead)."""
        t = self.params.collective_overhead_s
        for ph in bundle.phases:
            t += ph.latency_s
            if nbytes > 0 and ph.bytes_factor > 0:
                t += ph.bytes_factor * nbytes / ph.rate_Bps
        return t
