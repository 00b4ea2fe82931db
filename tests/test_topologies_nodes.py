"""Node builders against the reference numbers of reference/hardware.md."""

from __future__ import annotations

import itertools

import pytest

from topologies.errors import TopologyError
from topologies.nodes import (
    FRONTIER_XGMI_GBps,
    NodeTemplate,
    build_alps_node,
    build_dgx_node,
    build_frontera_rtx_node,
    build_frontier_node,
    build_node,
    build_perlmutter_node,
)
from topologies.types import DEVICE_KINDS, LINK_KINDS, DeviceKind, LinkKind


def _links(t: NodeTemplate) -> dict[tuple[int, int], tuple[LinkKind, float]]:
    """(src, dst) local device -> (kind, GB/s)."""
    return {
        (int(s), int(d)): (LINK_KINDS[int(k)], float(bw) / 1e9)
        for s, d, k, bw in zip(
            t.link_src, t.link_dst, t.link_kind, t.link_bandwidth_Bps, strict=True
        )
    }


def _kind_of(t: NodeTemplate, local: int) -> DeviceKind:
    return DEVICE_KINDS[int(t.device_kind[local])]


def test_frontier_infinity_fabric_matrix_is_exact() -> None:
    t = build_frontier_node()
    links = _links(t)
    gcd = {
        (a, b): bw
        for (a, b), (kind, bw) in links.items()
        if kind is LinkKind.XGMI
        and _kind_of(t, a) is DeviceKind.GPU
        and _kind_of(t, b) is DeviceKind.GPU
    }
    expected = {}
    for (a, b), bw in FRONTIER_XGMI_GBps.items():
        expected[(t.gpus[a], t.gpus[b])] = bw
        expected[(t.gpus[b], t.gpus[a])] = bw
    assert gcd == expected
    for pair in [(0, 1), (2, 3), (4, 5), (6, 7)]:
        assert gcd[(t.gpus[pair[0]], t.gpus[pair[1]])] == 200
    assert (t.gpus[0], t.gpus[3]) not in gcd
    assert t.package_size == 2


def test_frontier_nics_on_odd_gcds_and_affinity() -> None:
    t = build_frontier_node()
    links = _links(t)
    hosts = []
    for nic in t.nics:
        (host,) = [a for (a, b) in links if b == nic]
        hosts.append(t.gpus.index(host))
        assert links[(host, nic)] == (LinkKind.PCIE, 50.0)
    assert hosts == [1, 3, 5, 7]
    assert t.gpu_nic == (0, 0, 1, 1, 2, 2, 3, 3)
    # GCD 0 reaches its NIC over the 200 GB/s package link to GCD 1.
    path = t.paths[(t.gpus[0], t.nics[0])]
    assert [float(t.link_bandwidth_Bps[i]) / 1e9 for i in path] == [200.0, 50.0]
    cpu = [i for i in range(t.num_devices) if _kind_of(t, i) is DeviceKind.CPU]
    assert len(cpu) == 1
    assert all(links[(g, cpu[0])][1] == 36.0 for g in t.gpus)


def test_frontier_gcd0_to_gcd3_takes_two_hops_at_50() -> None:
    t = build_frontier_node()
    path = t.paths[(t.gpus[0], t.gpus[3])]
    assert len(path) == 2
    assert t.path_bottleneck_Bps(path) == 50e9


def test_perlmutter_all_to_all_nvlink_100() -> None:
    t = build_perlmutter_node()
    links = _links(t)
    for a, b in itertools.permutations(t.gpus, 2):
        assert links[(a, b)] == (LinkKind.NVLINK, 100.0)
    assert t.gpu_nic == (0, 1, 2, 3)
    assert [len(t.paths[(g, t.nics[k])]) for g, k in zip(t.gpus, t.gpu_nic, strict=True)] == [
        1,
        1,
        1,
        1,
    ]


def test_dgx_nvswitch_450_per_gpu_and_one_nic_per_gpu() -> None:
    t = build_dgx_node()
    links = _links(t)
    (switch,) = [i for i in range(t.num_devices) if _kind_of(t, i) is DeviceKind.SWITCH]
    for g in t.gpus:
        assert links[(g, switch)] == (LinkKind.NVLINK, 450.0)
        assert links[(switch, g)] == (LinkKind.NVLINK, 450.0)
    assert t.gpu_nic == tuple(range(8))
    assert len(t.paths[(t.gpus[0], t.gpus[7])]) == 2


def test_alps_nics_on_grace_side() -> None:
    t = build_alps_node()
    links = _links(t)
    for a, b in itertools.permutations(t.gpus, 2):
        assert links[(a, b)] == (LinkKind.NVLINK, 150.0)
    for k, nic in enumerate(t.nics):
        path = t.paths[(t.gpus[k], nic)]
        kinds = [LINK_KINDS[int(t.link_kind[i])] for i in path]
        assert kinds == [LinkKind.C2C, LinkKind.PCIE]
        assert float(t.link_bandwidth_Bps[path[0]]) == 450e9


def test_frontera_pcie_only() -> None:
    t = build_frontera_rtx_node()
    kinds = {LINK_KINDS[int(k)] for k in t.link_kind}
    assert kinds == {LinkKind.PCIE}
    assert t.nics_per_node == 1
    assert t.path_bottleneck_Bps(t.paths[(t.gpus[0], t.gpus[1])]) == 16e9


@pytest.mark.parametrize("node", ["perlmutter", "frontier", "alps", "dgx", "frontera-rtx"])
def test_one_nic_is_shared_by_all_gpus(node: str) -> None:
    t = build_node(node, nics=1)
    assert set(t.gpu_nic) == {0}


@pytest.mark.parametrize(
    ("node", "nics"), [("perlmutter", 2), ("frontier", 2), ("dgx", 4), ("alps", 2)]
)
def test_fewer_nics_are_shared_evenly(node: str, nics: int) -> None:
    t = build_node(node, nics=nics)
    counts = [t.gpu_nic.count(k) for k in range(nics)]
    assert max(counts) - min(counts) <= 1


def test_bandwidth_scale_multiplies_every_link() -> None:
    a, b = build_frontier_node(), build_frontier_node(bandwidth_scale=2.0)
    assert (b.link_bandwidth_Bps == 2 * a.link_bandwidth_Bps).all()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"nics": 0}, "nics_per_node"),
        ({"nics": 9}, "nics_per_node"),
        ({"bandwidth_scale": 0.0}, "intra_node_bandwidth_scale"),
    ],
)
def test_bad_node_parameters(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(TopologyError, match=field):
        build_frontier_node(**kwargs)  # type: ignore[arg-type]


def test_unknown_node_type() -> None:
    with pytest.raises(TopologyError, match="unknown node type"):
        build_node("cray-1", nics=1)
