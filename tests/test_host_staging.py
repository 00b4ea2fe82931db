"""Network traffic without GPUDirect RDMA (topologies/host_staging.py): GPU <-> NIC paths
through host memory, the config switch, and the like-for-like environment of the AxoNN
Frontier cases."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.benchmarks.collectives import collective_sweep
from simulator.build import build_topology
from simulator.config import default_config_mapping, validate_config
from simulator.errors import ConfigError
from simulator.network.params import network_params_for
from topologies.errors import TopologyError
from topologies.host_staging import stage_through_host
from topologies.machines import build_machine
from topologies.nodes import _Sketch, build_node
from topologies.types import DEVICE_KINDS, DeviceKind, LinkKind
from validation.published import axonn_environment, load_yaml


def _kinds_on_route(topo, src: int, dst: int) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    route = topo.route(src, dst)
    kinds = [DEVICE_KINDS[int(k)].value for k in topo.devices.kind]
    return [
        (kinds[int(topo.links.src[link])], kinds[int(topo.links.dst[link])])
        for link in route.paths[0]
    ]


def test_staged_route_crosses_each_end_cpu_link_both_ways() -> None:
    direct = build_machine("frontier", 2)
    staged = build_machine("frontier", 2, gpudirect_rdma=False)
    # GPU index 0 (node 0, GCD 0) to GPU index 8 (node 1, GCD 0)
    d = _kinds_on_route(direct, 0, 8)
    s = _kinds_on_route(staged, 0, 8)
    assert ("gpu", "cpu") not in d and ("cpu", "gpu") not in d
    # sender: GCD 0 -> CPU -> GCD 1 (the NIC's host) -> NIC; receiver: NIC -> GCD 1 -> CPU -> GCD 0
    assert s[:3] == [("gpu", "cpu"), ("cpu", "gpu"), ("gpu", "nic")]
    assert s[-3:] == [("nic", "gpu"), ("gpu", "cpu"), ("cpu", "gpu")]
    assert staged.metadata["gpudirect_rdma"] is False
    assert direct.metadata["gpudirect_rdma"] is True
    # node-local GPU <-> GPU paths are not touched (P2P over Infinity Fabric)
    assert _kinds_on_route(staged, 0, 3) == _kinds_on_route(direct, 0, 3)


def test_staging_keeps_each_gpus_nic() -> None:
    node = build_node("frontier", nics=4)
    staged = stage_through_host(node)
    assert staged.gpu_nic == node.gpu_nic
    assert staged.name == node.name  # the platform model is looked up by node type
    for g, k in zip(node.gpus, node.gpu_nic, strict=True):
        path = staged.paths[(g, node.nics[k])]
        assert int(staged.link_dst[path[-1]]) == node.nics[k]
        assert int(staged.link_src[path[0]]) == g


def test_eight_one_per_node_pairs_share_the_nic_hosts_cpu_link() -> None:
    """Closed form: 8 concurrent 2-GCD all-reduces, each GCD paired with its counterpart
    on the other node. Staged, the GCD hosting a NIC carries three transfers on each
    direction of its CPU link (its own, and the NIC's traffic for itself and its package
    peer): busbw = 36 GB/s x xGMI efficiency / 3. With GPUDirect RDMA the node's 4 NICs
    are shared by 8 GCDs: 100 GB/s x NIC efficiency / 8."""
    sizes = [2**30]
    direct = build_machine("frontier", 2)
    staged = build_machine("frontier", 2, gpudirect_rdma=False)
    eff = network_params_for(staged)
    xgmi, nic = eff.efficiency_of("xgmi"), eff.efficiency_of("nic")
    got_s = collective_sweep(staged, "all-reduce", 2, 8, sizes)[0].as_dict()["busbw_GBps"]
    got_d = collective_sweep(direct, "all-reduce", 2, 8, sizes)[0].as_dict()["busbw_GBps"]
    assert got_s == pytest.approx(36 * xgmi / 3, rel=0.03)
    assert got_d == pytest.approx(100 * nic / 8, rel=0.03)


def test_node_without_cpu_cannot_stage() -> None:
    s = _Sketch("bare", 1.0)
    gpus = s.add(DeviceKind.GPU, 2)
    nics = s.add(DeviceKind.NIC, 1)
    s.cable(gpus[0], gpus[1], LinkKind.NVLINK, 100.0, 0.5)
    s.cable(gpus[0], nics[0], LinkKind.PCIE, 32.0, 0.75)
    with pytest.raises(TopologyError, match="gpudirect_rdma"):
        stage_through_host(s.finish(gpus, nics, package_size=1))


def _config(cluster: dict[str, object]):  # type: ignore[no-untyped-def]
    data = default_config_mapping()
    data["cluster"] = cluster
    return validate_config(data)


def test_config_switch_and_custom_refusal(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = _config({"machine": "frontier", "gpus": 16, "gpudirect_rdma": False})
    assert cfg.cluster.gpudirect_rdma is False
    assert build_topology(cfg.cluster).metadata["gpudirect_rdma"] is False
    assert _config({"machine": "frontier", "gpus": 16}).cluster.gpudirect_rdma
    custom = {"machine": "custom", "topology_file": str(tmp_path / "t.yaml")}
    with pytest.raises(ConfigError, match="gpudirect_rdma"):
        _config({**custom, "gpudirect_rdma": False})


def test_axonn_frontier_cases_run_the_authors_environment() -> None:
    """Every AxoNN Frontier data file names the 2024 environment (GPUDirect RDMA off), the
    Perlmutter ones GPUDirect RDMA on; the Fig. 7, Table III and Fig. 5 files agree (they
    share the paper procedure's simulations)."""
    for name in ("axonn_frontier", "axonn_frontier_split", "axonn_frontier_overlap"):
        assert axonn_environment(load_yaml(name)) == {"cluster": {"gpudirect_rdma": False}}
    assert axonn_environment(load_yaml("axonn_perlmutter")) == {"cluster": {"gpudirect_rdma": True}}
    bw = load_yaml("axonn_bandwidths")["machines"]
    assert axonn_environment(bw["frontier"])["cluster"]["gpudirect_rdma"] is False
    with pytest.raises(KeyError, match="no environment"):
        axonn_environment({"environment": "nowhere"})
    assert axonn_environment({}) == {}


def test_staging_never_speeds_up_inter_node_traffic() -> None:
    for own, inner in ((16, 1), (2, 8), (8, 2)):
        direct = build_machine("frontier", 4)
        staged = build_machine("frontier", 4, gpudirect_rdma=False)
        d = collective_sweep(direct, "all-gather", own, inner, [2**26])[0].as_dict()["time_s"]
        s = collective_sweep(staged, "all-gather", own, inner, [2**26])[0].as_dict()["time_s"]
        assert np.isfinite(s) and s >= d
