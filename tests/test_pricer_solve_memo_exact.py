"""Issue 22 (GPT-320B on 32,768 Frontier GCDs): three exact savings held to the paths
they replace, bit for bit.

- the adaptive solver builds its entries, links and link index once per solve and
  memoises its max-min evaluations on the shares (reference: the solver re-building and
  re-evaluating everything, as before);
- the Valiant usage of an adaptive phase is routed without the per-flow rates and
  latencies nobody reads (reference: routed with them);
- the packaged data files are parsed by libyaml where PyYAML has it (reference: the
  pure-Python SafeLoader).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from importlib import resources

import numpy as np
import pytest
import yaml

from simulator.network import adaptive
from simulator.network.adaptive import ROUNDS, SplitUsage, best_split, solve
from simulator.network.maxmin import max_min_rates
from simulator.network.params import network_params_for
from simulator.network.pricing import CollectivePricer
from tests.engine_helpers import SMALL_FRONTIER, run_fingerprint
from topologies.machines import build_machine
from topologies.rows import link_index
from topologies.yaml_loader import PACKAGED_LOADER


def _reference_solve(phases: Sequence[adaptive.AdaptivePhase], capacity: np.ndarray) -> np.ndarray:
    """`solve` as it was: every evaluation rebuilds its entries and re-solves."""
    idx = [i for i, ph in enumerate(phases) if ph.split is not None]
    if not idx:
        return adaptive._max_min(phases, [ph.counts for ph in phases], capacity)
    by_family: dict[Hashable, list[int]] = {}
    for i in idx:
        fam = phases[i].family
        by_family.setdefault(("coflow", i) if fam is None else fam, []).append(i)
    families = list(by_family.values())
    usage = [adaptive._family_usage(phases, m, capacity.shape[0]) for m in families]
    fixed = [i for i, ph in enumerate(phases) if ph.split is None]
    links = [u[0] for u in usage] + [phases[i].links for i in fixed]

    def rates_at(x: list[float]) -> np.ndarray:
        counts = [u[1].mixture(xf) for u, xf in zip(usage, x, strict=True)]
        counts += [phases[i].counts for i in fixed]
        cf = np.concatenate([np.full(lk.size, g, dtype=np.int64) for g, lk in enumerate(links)])
        group_rates = max_min_rates(
            cf, np.concatenate(links), np.concatenate(counts), capacity, len(links)
        )
        out = np.empty(len(phases))
        for f, members in enumerate(families):
            out[members] = group_rates[f]
        out[fixed] = group_rates[len(families) :]
        return out

    x = [best_split(u[1], capacity[u[0]]) for u in usage]
    rates = rates_at(x)
    for _ in range(ROUNDS):
        finite = np.where(np.isfinite(rates), rates, 0.0)
        load = np.zeros(capacity.shape[0])
        for f, members in enumerate(families):
            np.add.at(load, usage[f][0], finite[members[0]] * usage[f][1].mixture(x[f]))
        for i in fixed:
            np.add.at(load, phases[i].links, finite[i] * phases[i].counts)
        for f, (lk, split) in enumerate(usage):
            other = load[lk] - finite[families[f][0]] * split.mixture(x[f])
            cap = capacity[lk]
            x[f] = best_split(split, np.maximum(cap - other, 1e-6 * cap))
        rates = rates_at(x)
    best = rates
    for pure in (1.0, 0.0):
        alt = rates_at([pure] * len(families))
        if float(alt[idx].min()) > float(best[idx].min()) * (1 + 1e-9):
            best = alt
    return best


class _Phase:
    def __init__(
        self, links: np.ndarray, counts: np.ndarray, split: SplitUsage | None, family: Hashable
    ) -> None:
        self.links, self.counts, self.split, self.family = links, counts, split, family
        self.split_x = 1.0


@pytest.mark.parametrize("seed", range(8))
def test_solve_matches_the_unmemoised_solver(seed: int) -> None:
    rng = np.random.default_rng(seed)
    num_links = int(rng.integers(20, 400))
    capacity = rng.choice([25e9, 50e9, 100e9], num_links)
    phases = []
    for i in range(int(rng.integers(1, 9))):
        links = np.unique(rng.integers(0, num_links, int(rng.integers(1, 60))))
        if rng.random() < 0.6:  # adaptive: minimal on some links, Valiant on others
            mini = rng.choice([0.0, 0.5, 1.0, 2.0], links.size)
            vali = rng.choice([0.0, 0.25, 1.0], links.size)
            mini[0] = vali[-1] = 1.0
            split = SplitUsage(mini, vali)
            x = best_split(split, capacity[links])
            family: Hashable = ("f", int(rng.integers(0, 3)))
            phases.append(_Phase(links, split.mixture(x), split, family))
        else:
            phases.append(_Phase(links, rng.choice([0.5, 1.0, 3.0], links.size), None, i))
    assert solve(phases, capacity).tobytes() == _reference_solve(phases, capacity).tobytes()


def test_max_min_with_a_given_index_is_the_same() -> None:
    rng = np.random.default_rng(1)
    coflow = rng.integers(0, 7, 3000)
    link = rng.integers(0, 900, 3000)
    count = rng.choice([0.5, 1.0, 1 / 3], 3000)
    capacity = rng.choice([25e9, 50e9], 900)
    index = link_index(link, 900)
    got = max_min_rates(coflow, link, count, capacity, 7, index)
    assert got.tobytes() == max_min_rates(coflow, link, count, capacity, 7).tobytes()


def test_valiant_usage_untimed_is_the_timed_usage() -> None:
    topo = build_machine("frontier", 64)
    pricer = CollectivePricer(topo, network_params_for(topo))
    rng = np.random.default_rng(3)
    n = int(topo.num_gpus)  # 512 GCDs over several dragonfly groups
    src = rng.integers(0, n, 4000)
    dst = (src + rng.integers(1, n, 4000)) % n
    share = rng.choice([0.5, 1.0], 4000)
    for sh in (None, share):
        timed = pricer._link_loads(src, dst, sh, "valiant")
        untimed = pricer._link_loads(src, dst, sh, "valiant", timed=False)
        assert timed[0][0].tobytes() == untimed[0][0].tobytes()
        assert timed[0][1].tobytes() == untimed[0][1].tobytes()
        assert timed[3] == untimed[3]


def _outcome(optimised: bool) -> tuple[object, ...]:
    mp = pytest.MonkeyPatch()
    if not optimised:
        mp.setattr(adaptive.SolveMemo, "solve", lambda _self, ph, cap: _reference_solve(ph, cap))
        loads = CollectivePricer._link_loads

        def timed_loads(
            self: CollectivePricer,
            src: np.ndarray,
            dst: np.ndarray,
            share: np.ndarray | None,
            policy: str | None = None,
            timed: bool = True,
        ) -> object:
            return loads(self, src, dst, share, policy)  # always with rates and latencies

        mp.setattr(CollectivePricer, "_link_loads", timed_loads)
    try:
        return run_fingerprint(SMALL_FRONTIER)
    finally:
        mp.undo()


def test_frontier_run_is_bit_identical_to_the_reference_paths() -> None:
    assert _outcome(optimised=True) == _outcome(optimised=False)


PACKAGED = [
    ("topologies", "data/gpus.yaml"),
    ("topologies", "data/machines.yaml"),
    ("simulator.network", "data/network_defaults.yaml"),
    ("simulator.cost", "data/kernel_defaults.yaml"),
    ("workloads", "data/block_kernels.yaml"),
]


@pytest.mark.parametrize(("package", "name"), PACKAGED)
def test_packaged_yaml_parses_as_the_python_loader_does(package: str, name: str) -> None:
    text = resources.files(package).joinpath(name).read_text()
    fast = yaml.load(text, Loader=PACKAGED_LOADER)
    slow = yaml.load(text, Loader=yaml.SafeLoader)
    assert repr(fast) == repr(slow)  # repr: same types too (1 vs 1.0 vs '1')
    assert json.dumps(fast, sort_keys=True, default=repr) == json.dumps(
        slow, sort_keys=True, default=repr
    )


@pytest.mark.parametrize("machine", ["frontier", "dgx-h100", "perlmutter"])
def test_direct_route_matches_the_whole_machine_lists(machine: str) -> None:
    """`_direct_route` reads each path's bandwidths and latencies as Python floats; the
    reference indexes lists built over every link, as the pricer did before."""
    topo = build_machine(machine, 4)
    pricer = CollectivePricer(topo, network_params_for(topo))
    bw = pricer.bandwidth_Bps.tolist()
    lt = np.asarray(pricer.latency_s, dtype=np.float64).tolist()
    n = int(topo.num_gpus)
    for a, b in [(0, 1), (0, n - 1), (1, n // 2), (n - 1, 2)]:
        route = topo.route(a, b)
        rate, lat = float("inf"), 0.0
        for path, w in zip(route.paths, route.weights, strict=True):
            rate = min(rate, min(bw[x] for x in path) / w)
            lat = max(lat, sum(lt[x] for x in path))
        _, _, got_rate, got_lat = pricer._direct_route(a, b)
        assert (type(got_rate), got_rate, type(got_lat), got_lat) == (float, rate, float, lat)


@pytest.mark.parametrize("seed", range(4))
def test_distinct_counts_are_numpys_unique(seed: int) -> None:
    from topologies.rows import distinct_count

    rng = np.random.default_rng(seed)
    for n, bound in [(0, 5), (1, 1), (50, 60), (3000, 4000), (32768, 32768)]:
        values = rng.integers(0, bound, n) if seed % 2 else rng.permutation(bound)[:n]
        assert distinct_count(values) == np.unique(values).size


def test_position_split_is_numpys_unique() -> None:
    """Frontier's GCDs are wired unalike (positions/), so its rank classes split."""
    machine = "frontier"
    from simulator.engine import core

    topo = build_machine(machine, 8)
    positions = core.node_position_classes(topo)
    if positions is None:
        pytest.skip(f"{machine}: its node's GPUs are wired alike")
    world = int(topo.num_gpus)
    rank_class = np.random.default_rng(7).integers(0, 5, world)
    graph = type("G", (), {})()
    graph.world_size, graph.rank_class = world, rank_class
    placement = np.random.default_rng(8).permutation(world)
    pairs = np.stack([rank_class, positions[placement]], axis=1)
    _, want = np.unique(pairs, axis=0, return_inverse=True)
    mp = pytest.MonkeyPatch()
    mp.setattr(core, "replace", lambda g, rank_class: rank_class)
    try:
        got = core.split_classes_by_position(graph, topo, placement)  # type: ignore[arg-type]
    finally:
        mp.undo()
    assert got.dtype == np.int64 and np.array_equal(got, want.reshape(-1))


def test_solve_memo_hits_give_the_solvers_rates() -> None:
    """Phases sharing usage arrays (as bound phases do) hit the memo; families are
    compared by grouping only, as `solve` reads them."""
    rng = np.random.default_rng(11)
    capacity = rng.choice([25e9, 50e9, 100e9], 300)
    base = []
    for i in range(6):
        links = np.unique(rng.integers(0, 300, 40))
        mini = rng.choice([0.0, 1.0, 2.0], links.size)
        vali = rng.choice([0.0, 0.5, 1.0], links.size)
        mini[0] = vali[-1] = 1.0
        split = SplitUsage(mini, vali) if i % 3 else None
        base.append((links, rng.choice([0.5, 1.0], links.size), split))
    memo = adaptive.SolveMemo()
    for trial in range(20):
        pick = rng.permutation(6)[: int(rng.integers(1, 7))]
        fams = rng.integers(0, 2, pick.size)
        phases = [
            _Phase(base[j][0], base[j][1], base[j][2], ("fam", trial % 3, int(f)))
            for j, f in zip(pick.tolist(), fams.tolist(), strict=True)
        ]
        got = memo.solve(phases, capacity)
        assert not got.flags.writeable
        assert got.tobytes() == solve(phases, capacity).tobytes()
    assert len(memo._entries) < 20  # some trials were hits
