"""Issue 22 (symmetric setup sub-linear in GPUs): the pricer routes each distinct phase
usage once (cached on the instance table and the phase's flows) and groups a table into
layout classes once; np.unique's row and link-id uses have exact stand-ins. These tests
hold the reuse to the unreused path bit for bit: iteration time, every rank's records,
per-link bytes and the report (per-group and per-kind times, the tuner's estimates)."""

from __future__ import annotations

from itertools import permutations

import numpy as np
import pytest

from simulator.network.maxmin import max_min_rates
from simulator.network.params import network_params_for
from simulator.network.pricing import BoundPhase, CollectivePricer
from tests.engine_helpers import SMALL_FRONTIER, run_fingerprint
from topologies.machines import build_machine
from topologies.rows import link_index, unique_rows
from workloads.ops import CollectiveKind


def _outcome(reuse: bool) -> tuple[object, ...]:
    calls = [0]
    route = CollectivePricer._phase_usage

    def counted(self: CollectivePricer, table: np.ndarray, ph: object, *rest: bool) -> object:
        calls[0] += 1
        return route(self, table, ph, *rest)  # type: ignore[arg-type]

    mp = pytest.MonkeyPatch()
    mp.setattr(CollectivePricer, "_phase_usage", counted)
    if not reuse:  # the unreused path: route every phase, group every table
        mp.setattr(
            CollectivePricer, "_cached_usage", lambda self, t, _i, ph: self._phase_usage(t, ph)
        )
        mp.setattr(CollectivePricer, "layout_classes", CollectivePricer._layout_classes)
    try:
        return (*run_fingerprint(SMALL_FRONTIER), calls[0])
    finally:
        mp.undo()


def test_reused_usages_give_bit_identical_runs() -> None:
    reused = _outcome(reuse=True)
    fresh = _outcome(reuse=False)
    assert reused[:4] == fresh[:4]
    assert reused[4] < fresh[4]  # the reuse did skip routing (not a vacuous comparison)


def _fields(ph: BoundPhase) -> tuple[object, ...]:
    split = None if ph.split is None else (ph.split.minimal.tobytes(), ph.split.valiant.tobytes())
    return (
        ph.links.tobytes(),
        ph.counts.tobytes(),
        ph.rate_Bps,
        ph.shared_rate_Bps,
        ph.instance_rate_Bps,
        ph.inter,
        ph.inter_steps,
        ph.near_s,
        ph.far_s,
        split,
        ph.split_x,
        ph.family,
    )


def test_a_subset_bound_after_the_whole_equals_it_bound_alone() -> None:
    topo = build_machine("frontier", 16)  # 16 nodes of 8 GCDs
    # 16 rail groups of 8 nodes: local index j % 8 on the nodes of half j // 8, so 8
    # layout classes of 2 instances; the even instances hold 4 of those classes whole
    whole = np.array(
        [[j % 8 + 8 * (8 * (j // 8) + n) for n in range(8)] for j in range(16)], dtype=np.int64
    )
    subset = whole[::2]
    warm = CollectivePricer(topo, network_params_for(topo))
    warm.bind(CollectiveKind.ALL_REDUCE, whole, "ring", key=("g", "all"))
    routed = len(warm._usage_cache)
    cached = warm.bind(CollectiveKind.ALL_REDUCE, subset, "ring", key=("g", "half"))
    assert len(warm._usage_cache) == routed  # every class of the subset was a hit
    assert len(warm.layout_classes(subset)) == 4
    cold = CollectivePricer(topo, network_params_for(topo))
    alone = cold.bind(CollectiveKind.ALL_REDUCE, subset, "ring", key=("g", "half"))
    assert len(cached) == len(alone)
    for a, b in zip(cached, alone, strict=True):
        assert np.array_equal(a.rows, b.rows) and a.tier == b.tier
        assert [_fields(p) for p in a.phases] == [_fields(p) for p in b.phases]


@pytest.mark.parametrize("shape", [(1, 3), (7, 1), (200, 4), (500, 16), (64, 300), (5, 0)])
def test_unique_rows_is_numpys(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(shape))
    for hi in (1, 3, 1000):
        a = rng.integers(-hi, hi + 1, shape)
        _, first, inverse = np.unique(a, axis=0, return_index=True, return_inverse=True)
        got_first, got_inverse = unique_rows(a)
        assert np.array_equal(got_first, first)
        assert np.array_equal(got_inverse, inverse.reshape(-1))


@pytest.mark.parametrize("entries", [0, 3, 50, 5000])
def test_link_index_is_numpys(entries: int) -> None:
    rng = np.random.default_rng(entries)
    for num_links in (1, 40, 100_000):
        links = rng.integers(0, num_links, entries)
        uniq, inverse = np.unique(links, return_inverse=True)
        got_uniq, got_inverse = link_index(links, num_links)
        assert np.array_equal(got_uniq, uniq)
        assert np.array_equal(got_inverse, inverse.reshape(-1))


def _scalar_ring_cycles(pricer: CollectivePricer, gpus: list[int]) -> list[list[int]]:
    """The ring search as a scan, cycle by cycle and link by link (the reference)."""
    m = len(gpus)
    routes = pricer._cycle_routes(gpus)
    cycles = [(0, *perm) for perm in permutations(range(1, m))]
    usage: list[dict[int, int]] = []
    for cyc in cycles:
        use: dict[int, int] = {}
        for a, b in zip(cyc, cyc[1:] + cyc[:1], strict=True):
            for link in routes[(a, b)]:
                use[link] = use.get(link, 0) + 1
        usage.append(use)
    residual = {link: float(pricer.bandwidth_Bps[link]) for use in usage for link in use}
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
    return chosen


@pytest.mark.parametrize("machine", ["frontier", "dgx-h100", "dgx-a100", "perlmutter"])
def test_ring_search_matches_the_scan(machine: str) -> None:
    topo = build_machine(machine, 2)
    pricer = CollectivePricer(topo, network_params_for(topo))
    g = int(topo.gpus_per_node)
    rng = np.random.default_rng(g)
    for m in range(3, min(g, 8) + 1):
        for _ in range(3):
            gpus = [int(x) for x in rng.permutation(g)[:m]]
            assert pricer._ring_cycles(gpus) == _scalar_ring_cycles(pricer, gpus)


def _masked_max_min(
    coflow: np.ndarray, link: np.ndarray, count: np.ndarray, capacity: np.ndarray, n: int
) -> np.ndarray:
    """Progressive filling over every entry, frozen ones masked (the reference)."""
    rates = np.zeros(n)
    links_u, link_idx = np.unique(link, return_inverse=True)
    cap0 = capacity[links_u].astype(np.float64)
    cap = cap0.copy()
    has = np.zeros(n, dtype=bool)
    has[coflow] = True
    frozen = ~has
    rates[~has] = np.inf
    while not frozen.all():
        live = ~frozen[coflow]
        load = np.bincount(link_idx[live], weights=count[live], minlength=links_u.shape[0])
        used = load > 0
        if not used.any():
            break
        share = np.full(links_u.shape[0], np.inf)
        share[used] = cap[used] / load[used]
        inc = float(share.min())
        rates[~frozen] += inc
        cap -= inc * load
        hit = (used & (cap <= 1e-12 * cap0))[link_idx] & live
        frozen[coflow[hit]] = True
    return rates


@pytest.mark.parametrize("seed", range(6))
def test_max_min_matches_the_masked_filling(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, num_links = int(rng.integers(1, 30)), int(rng.integers(5, 3000))
    entries = int(rng.integers(1, 4000))
    coflow = rng.integers(0, n, entries)
    link = rng.integers(0, num_links, entries)
    count = rng.choice([0.25, 0.5, 1.0, 1 / 3, 2.0], entries)
    capacity = rng.choice([25e9, 50e9, 100e9, 37.5e9], num_links)
    got = max_min_rates(coflow, link, count, capacity, n)
    assert np.array_equal(got, _masked_max_min(coflow, link, count, capacity, n))
