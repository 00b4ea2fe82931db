"""Dragonfly and fat-tree fabrics: structure, minimal / Valiant routes, oversubscription."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from topologies.dragonfly.build import DragonflySpec, build_dragonfly
from topologies.errors import TopologyError
from topologies.fabric import Fabric
from topologies.fattree import FatTreeSpec, build_fat_tree
from topologies.types import LINK_KINDS, LinkKind


def _df(routing: str, groups: int = 6, nodes: int = 40) -> Fabric:
    spec = DragonflySpec(
        nodes_per_group=8,
        switches_per_group=4,
        groups_total=groups,
        global_links_per_group_pair=2,
        link_bandwidth_Bps=25e9,
        routing=routing,
    )
    return build_dragonfly(spec, nodes=nodes, nics_per_node=2)


def _walk(f: Fabric, src_ep: int, dst_ep: int, path: tuple[int, ...]) -> list[int]:
    """Switches visited by a fabric path (link ids are relative: link_base = 0)."""
    cur = int(f.endpoint_switch[src_ep])
    seen = [cur]
    for link in path:
        assert int(f.link_src[link]) == cur
        cur = int(f.link_dst[link])
        seen.append(cur)
    assert cur == int(f.endpoint_switch[dst_ep])
    return seen


def test_dragonfly_structure_counts() -> None:
    f = _df("minimal")
    g, s, h = 6, 4, 2
    kinds = [LINK_KINDS[int(k)] for k in f.link_kind]
    assert kinds.count(LinkKind.LOCAL) == g * s * (s - 1)
    assert kinds.count(LinkKind.GLOBAL) == g * (g - 1) // 2 * h * 2
    assert f.num_switches == g * s  # all groups instantiated though nodes use 5
    pairs = set(zip(f.link_src.tolist(), f.link_dst.tolist(), strict=True))
    assert len(pairs) == f.num_links  # no parallel links
    assert all((d, s_) in pairs for s_, d in pairs)  # every link has its reverse


@pytest.mark.parametrize("routing", ["minimal", "ecmp"])
def test_dragonfly_minimal_routes_at_most_three_switch_hops(routing: str) -> None:
    f = _df(routing)
    endpoints = f.endpoint_switch.shape[0]
    for a, b in itertools.permutations(range(0, endpoints, 3), 2):
        paths, weights = f.router.paths(a, b)
        assert abs(sum(weights) - 1.0) < 1e-12
        for p in paths:
            _walk(f, a, b, p)
            assert len(p) <= 3
            kinds = [LINK_KINDS[int(f.link_kind[x])] for x in p]
            assert kinds.count(LinkKind.GLOBAL) <= 1


def test_dragonfly_valiant_routes_visit_an_intermediate_group() -> None:
    f = _df("valiant")
    endpoints = f.endpoint_switch.shape[0]
    inter = 0
    for a, b in itertools.permutations(range(0, endpoints, 5), 2):
        ga, gb = (int(f.switch_group[f.endpoint_switch[e]]) for e in (a, b))
        paths, _ = f.router.paths(a, b)
        for p in paths:
            groups = {int(f.switch_group[s]) for s in _walk(f, a, b, p)}
            if ga != gb:
                inter += 1
                assert groups - {ga, gb}, "Valiant path stays in the end groups"
                assert len(p) <= 5
    assert inter > 0


def test_dragonfly_valiant_inside_a_group_uses_an_intermediate_switch() -> None:
    f = _df("valiant")
    a, b = 0, 12  # endpoints 0 and 12: group 0, switches 0 and 3
    sa, sb = int(f.endpoint_switch[a]), int(f.endpoint_switch[b])
    assert sa != sb and f.switch_group[sa] == f.switch_group[sb]
    paths, weights = f.router.paths(a, b)
    assert abs(sum(weights) - 1) < 1e-12
    for p in paths:
        switches = _walk(f, a, b, p)
        assert len(p) == 2 and switches[1] not in (sa, sb)


def test_dragonfly_adaptive_mixes_minimal_and_valiant() -> None:
    f = _df("adaptive")
    a, b = 0, f.endpoint_switch.shape[0] - 1
    paths, weights = f.router.paths(a, b)
    n_global = [sum(LINK_KINDS[int(f.link_kind[x])] is LinkKind.GLOBAL for x in p) for p in paths]
    minimal = sum(w for w, n in zip(weights, n_global, strict=True) if n == 1)
    assert minimal == pytest.approx(0.5)
    assert max(n_global) == 2


def test_dragonfly_two_groups_valiant_falls_back() -> None:
    f = _df("valiant", groups=2, nodes=16)
    paths, _ = f.router.paths(0, 31)
    assert len(paths) == 2  # the two minimal paths (ecmp)


def test_dragonfly_parallel_global_cables_merge() -> None:
    spec = DragonflySpec(
        nodes_per_group=4,
        switches_per_group=2,
        groups_total=3,
        global_links_per_group_pair=5,
        link_bandwidth_Bps=25e9,
        routing="ecmp",
    )
    f = build_dragonfly(spec, nodes=12, nics_per_node=1)
    pairs = list(zip(f.link_src.tolist(), f.link_dst.tolist(), strict=True))
    assert len(set(pairs)) == len(pairs)
    glob = f.link_bandwidth_Bps[
        np.array([LINK_KINDS[int(k)] is LinkKind.GLOBAL for k in f.link_kind])
    ]
    assert glob.sum() == pytest.approx(3 * 5 * 2 * 25e9)  # 3 group pairs x 5 cables x 2 directions
    paths, weights = f.router.paths(0, 11)
    assert len(paths) == 2 and sorted(weights) == pytest.approx([0.4, 0.6])
    for p in paths:
        _walk(f, 0, 11, p)


def test_dragonfly_cut_counts_global_links_between_halves() -> None:
    f = _df("minimal", groups=6, nodes=16)  # two full groups of 8 nodes
    assert f.minimal_cut_Bps == pytest.approx(2 * 25e9)  # h = 2 cables between them
    assert f.cut_Bps == pytest.approx(2 * 25e9 + 4 * 2 * 25e9)  # + relays via 4 idle groups


def test_dragonfly_spec_errors_name_the_field() -> None:
    fabric = {
        "nodes_per_group": 8,
        "switches_per_group": 0,
        "groups_total": 2,
        "global_links_per_group_pair": 1,
        "link_bandwidth_GBps": 25,
    }
    with pytest.raises(TopologyError, match=r"x\.switches_per_group"):
        DragonflySpec.from_fabric(fabric, "x")
    fabric["switches_per_group"] = 4
    with pytest.raises(TopologyError, match="routing 'bogus'"):
        DragonflySpec.from_fabric(fabric, "x", routing="bogus")


def _ft(oversubscription: float, nodes: int = 64, **kw: object) -> Fabric:
    spec = FatTreeSpec(radix=8, link_bandwidth_Bps=50e9, oversubscription=oversubscription, **kw)  # type: ignore[arg-type]
    return build_fat_tree(spec, nodes=nodes, nics_per_node=1, gpus_per_node=1)


def test_fat_tree_oversubscription_lowers_the_cut() -> None:
    full, over = _ft(1.0), _ft(3.0)
    half = 32
    assert full.cut_Bps == pytest.approx(half * 50e9)  # 4 down, 4 up: non-blocking
    assert over.cut_Bps == pytest.approx(half * 50e9 * 2 / 6)  # 6 down, 2 up
    assert over.cut_Bps < full.cut_Bps


def test_fat_tree_core_taper_and_three_tiers() -> None:
    flat = _ft(1.0, nodes=64)
    tapered = _ft(1.0, nodes=64, pod_gpus=16, core_oversubscription=4.0)
    assert tapered.parameters["pods"] == 4
    assert tapered.cut_Bps == pytest.approx(flat.cut_Bps / 4)
    for a, b in [(0, 1), (0, 5), (0, 40), (63, 2)]:
        paths, weights = tapered.router.paths(a, b)
        assert abs(sum(weights) - 1) < 1e-12
        for p in paths:
            switches = _walk(tapered, a, b, p)
            assert len(p) in (0, 2, 4)
            assert len(switches) == len(p) + 1


def test_fat_tree_rail_optimised_leaves() -> None:
    spec = FatTreeSpec(radix=8, link_bandwidth_Bps=50e9, rail_optimized=True)
    f = build_fat_tree(spec, nodes=10, nics_per_node=4, gpus_per_node=4)
    leaf = f.endpoint_switch.reshape(10, 4)
    assert (leaf % 4 == np.arange(4)).all()  # NIC k on a rail-k leaf
    assert (leaf[:4] == leaf[0]).all()  # 4 nodes per leaf block (4 down ports)
    assert f.router.paths(0, 4) == (((),), (1.0,))  # same rail, same block: one leaf


def test_fat_tree_bad_oversubscription() -> None:
    with pytest.raises(TopologyError, match="oversubscription"):
        FatTreeSpec.from_fabric(
            {"radix": 4, "link_bandwidth_GBps": 50, "oversubscription": 100}, "y"
        )
