"""build_machine: presets at any size, routes, what-ifs, validation, scale."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topologies.errors import TopologyError
from topologies.machines import build_machine
from topologies.summary import route_bandwidth_Bps, summarize_topology
from topologies.types import LINK_KINDS, LinkKind, Topology

MACHINES = ["perlmutter", "frontier", "alps", "dgx-h100", "dgx-h200", "frontera-rtx"]


@cache
def machine(name: str, nodes: int, routing: str | None = None, nics: int | None = None) -> Topology:
    return build_machine(name, nodes, routing=routing, nics_per_node=nics)


def _check_contiguous(t: Topology, a: int, b: int) -> None:
    route = t.route(a, b)
    assert sum(route.weights) == pytest.approx(1.0)
    assert all(w > 0 for w in route.weights)
    for path in route.paths:
        cur = int(t.gpus[a])
        for link in path:
            assert int(t.links.src[link]) == cur
            cur = int(t.links.dst[link])
        assert cur == int(t.gpus[b])
        assert len(set(path)) == len(path)


@pytest.mark.parametrize("name", MACHINES)
def test_presets_build_with_metadata(name: str) -> None:
    t = machine(name, 3)
    meta = t.metadata
    for key in ("machine", "nodes", "gpus_per_node", "nics_per_node", "package_size", "fabric"):
        assert key in meta
    assert meta["machine"] == name and meta["nodes"] == 3 and t.num_nodes == 3
    assert t.num_gpus == 3 * t.gpus_per_node
    assert t.gpu_type
    nodes = t.devices.node[t.gpus]
    assert (nodes == np.arange(t.num_gpus) // t.gpus_per_node).all()
    assert meta["package_size"] == (2 if name == "frontier" else 1)


@pytest.mark.parametrize("name", MACHINES)
@pytest.mark.parametrize("nodes", [1, 2, 130])
def test_every_route_is_contiguous_small(name: str, nodes: int) -> None:
    t = machine(name, nodes)
    rng = np.random.default_rng(0)
    for _ in range(200):
        a, b = rng.choice(t.num_gpus, size=2, replace=False)
        _check_contiguous(t, int(a), int(b))


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["frontier", "perlmutter", "dgx-h100"]),
    routing=st.sampled_from(["minimal", "ecmp", "adaptive"]),
    data=st.data(),
)
def test_random_pairs_route_contiguously_and_symmetrically(
    name: str, routing: str, data: st.DataObject
) -> None:
    t = machine(name, 300, routing)
    a = data.draw(st.integers(0, t.num_gpus - 1))
    b = data.draw(st.integers(0, t.num_gpus - 1).filter(lambda x: x != a))
    _check_contiguous(t, a, b)
    fwd, back = t.route(a, b), t.route(b, a)
    assert sorted(len(p) for p in fwd.paths) == sorted(len(p) for p in back.paths)
    assert t.path_bottleneck_Bps(fwd.primary) == t.path_bottleneck_Bps(back.primary)
    assert route_bandwidth_Bps(t, fwd) == pytest.approx(route_bandwidth_Bps(t, back))


def test_frontier_routes_use_the_documented_links() -> None:
    t = machine("frontier", 2)
    gpu = t.gpus
    assert t.links.bandwidth_Bps[t.link_between(int(gpu[0]), int(gpu[1]))] == 200e9
    assert t.link_between(int(gpu[0]), int(gpu[3])) is None
    path = t.path(0, 8)  # GCD 0 of node 0 -> GCD 0 of node 1
    names = [t.device_name(int(t.links.dst[x])) for x in path]
    assert names[:2] == ["n0.gpu1", "n0.nic0"]
    assert t.path_bottleneck_Bps(path) == 25e9
    assert t.metadata["injection_per_gpu_GBps"] == 12.5


def test_dragonfly_minimal_machine_routes_at_most_three_fabric_hops() -> None:
    t = machine("frontier", 300, "minimal")
    fabric = {LinkKind.LOCAL, LinkKind.GLOBAL}
    rng = np.random.default_rng(1)
    for _ in range(300):
        a, b = rng.choice(t.num_gpus, size=2, replace=False)
        (path,) = t.route(int(a), int(b)).paths
        assert sum(LINK_KINDS[int(t.links.kind[x])] in fabric for x in path) <= 3


def test_valiant_machine_routes_cross_an_intermediate_group() -> None:
    t = machine("perlmutter", 300, "valiant")
    src, dst = 0, t.num_gpus - 1  # group 0 -> group 2
    groups = {int(t.devices.group[int(t.gpus[g])]) for g in (src, dst)}
    for path in t.route(src, dst).paths:
        visited = {int(t.devices.group[int(t.links.dst[x])]) for x in path}
        assert visited - groups


def test_nic_sharing_with_one_nic() -> None:
    one, four = machine("perlmutter", 2, None, 1), machine("perlmutter", 2)
    for t, expected in ((one, {"n0.nic0"}), (four, {"n0.nic0", "n0.nic1", "n0.nic2", "n0.nic3"})):
        used = set()
        for g in range(4):
            for path in t.route(g, 4 + g).paths:
                used |= {
                    t.device_name(int(t.links.dst[x]))
                    for x in path
                    if t.device_name(int(t.links.dst[x])).startswith("n0.nic")
                }
        assert used == expected
    assert one.metadata["injection_per_gpu_GBps"] == 25 / 4
    assert summarize_topology(one)["injection_per_gpu_GBps"] == pytest.approx(25 / 4)


def test_what_if_overrides() -> None:
    t = build_machine(
        "dgx-h100",
        2,
        gpu="h200",
        nic_bandwidth_GBps=100,
        intra_node_bandwidth_scale=2,
        fabric_link_bandwidth_GBps=100,
        routing="minimal",
    )
    assert t.gpu_type == "h200"
    kinds = np.array([LINK_KINDS[int(k)] for k in t.links.kind])
    assert set(t.links.bandwidth_Bps[kinds == LinkKind.NIC]) == {100e9}
    assert set(t.links.bandwidth_Bps[kinds == LinkKind.NVLINK]) == {900e9}
    assert set(t.links.bandwidth_Bps[kinds == LinkKind.LOCAL]) == {100e9}
    assert t.metadata["routing"] == "minimal"


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("cray-1", 4), {}, "unknown machine 'cray-1'"),
        (("frontier", 0), {}, "nodes must be a positive integer"),
        (("frontier", -3), {}, "nodes must be a positive integer"),
        (("frontier", 2), {"gpu": "v100x"}, "unknown GPU 'v100x'"),
        (("frontier", 2), {"nic_bandwidth_GBps": 0}, "nic_bandwidth_GBps"),
        (("frontier", 2), {"fabric_link_bandwidth_GBps": -1}, "fabric_link_bandwidth_GBps"),
        (("frontier", 2), {"intra_node_bandwidth_scale": 0}, "intra_node_bandwidth_scale"),
        (("frontier", 2), {"nics_per_node": 0}, "nics_per_node"),
        (("perlmutter", 2), {"nics_per_node": 5}, "nics_per_node"),
        (("dgx-h100", 2), {"routing": "valiant"}, "routing 'valiant'"),
    ],
)
def test_invalid_inputs_raise_one_line_errors(
    args: tuple[str, int], kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(TopologyError, match=message) as info:
        build_machine(*args, **kwargs)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_bisection_figures() -> None:
    assert machine("frontier", 1).metadata["bisection_GBps"] is None
    rtx = machine("frontera-rtx", 90).metadata
    assert float(rtx["bisection_GBps"]) < 45 * 12.5  # type: ignore[arg-type]  # 22:18 leaf oversubscription shows
    dgx = machine("dgx-h100", 1024).metadata  # 8,192 GPUs: 3 pods above a 7:1 taper
    assert dgx["bisection_GBps"] == pytest.approx(512 * 400 / 7)
    small = machine("dgx-h100", 64).metadata  # one pod: non-blocking
    assert small["bisection_GBps"] == pytest.approx(32 * 400)


def test_largest_benchmark_case_builds() -> None:
    t = build_machine("dgx-h100", 8192)
    assert t.num_gpus == 65536
    assert t._graph is None  # no networkx graph was built
    _check_contiguous(t, 0, 65535)
    _check_contiguous(t, 12345, 54321)
