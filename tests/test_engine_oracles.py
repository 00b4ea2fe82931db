"""Closed-form oracles for the engine and the network models."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine_helpers import FLOPS, build_graph_topology, graph_of, run
from topologies.synthetic import build_full_mesh, build_switched
from workloads.ops import CollectiveKind, CollectiveOp, ComputeKind, ComputeOp, WaitOp

NETWORKS = ("alpha-beta", "contention")


def uniform(p: int, bandwidth: float, latency: float):  # type: ignore[no-untyped-def]
    """p GPUs behind one crossbar: every ring step crosses two links of `bandwidth`, with
    `latency` in total, and every GPU sends and receives on one link each (the textbook
    setting: a single ring, no parallel channels to gain from)."""
    return build_switched(p, bandwidth, latency / 2)


def _collective_graph(p: int, kind: CollectiveKind, nbytes: float):
    ops = [CollectiveOp("c", kind, "world", nbytes, "t", "comm")]
    return graph_of({r: ops for r in range(p)}, {"world": [list(range(p))]}, p, classes=[0] * p)


@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("mode", ["full", "symmetric"])
@pytest.mark.parametrize("p", [2, 3, 4, 8, 16])
@pytest.mark.parametrize("nbytes", [1e3, 1e6, 3.3e8])
def test_ring_all_reduce_matches_formula(network: str, mode: str, p: int, nbytes: float) -> None:
    bw, lat = 50e9, 3e-6
    res = run(
        _collective_graph(p, CollectiveKind.ALL_REDUCE, nbytes),
        uniform(p, bw, lat),
        network,
        mode,
    )
    expected = 2 * (p - 1) * (lat + nbytes / (p * bw))
    assert res.iteration_time_s == pytest.approx(expected, rel=1e-9, abs=2e-12)


@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("kind", [CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER])
@pytest.mark.parametrize("p", [2, 5, 8])
def test_ring_all_gather_reduce_scatter_match_formula(
    network: str, kind: CollectiveKind, p: int
) -> None:
    bw, lat, n = 25e9, 5e-6, 4e8
    res = run(_collective_graph(p, kind, n), uniform(p, bw, lat), network)
    assert res.iteration_time_s == pytest.approx((p - 1) * (lat + n / (p * bw)), rel=1e-9)


@pytest.mark.parametrize("network", NETWORKS)
def test_fully_connected_node_runs_two_ring_channels(network: str) -> None:
    # K4 has no two link-disjoint Hamiltonian cycles in one direction, but a ring and its
    # reverse use disjoint directed links: NCCL-like planning runs both, each on half the data
    p, bw, lat, n = 4, 50e9, 2e-6, 4e8
    res = run(
        _collective_graph(p, CollectiveKind.ALL_REDUCE, n), build_full_mesh(p, bw, lat), network
    )
    assert res.iteration_time_s == pytest.approx(
        2 * (p - 1) * lat + 2 * (p - 1) / p * (n / 2) / bw, rel=1e-9
    )


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_recursive_halving_doubling_formula(p: int) -> None:
    bw, lat, n = 40e9, 2e-6, 1e8
    res = run(
        _collective_graph(p, CollectiveKind.ALL_REDUCE, n),
        uniform(p, bw, lat),
        "alpha-beta",
        algorithm="recursive-halving-doubling",
    )
    logp = int(np.log2(p))
    expected = 2 * logp * lat + 2 * (p - 1) / p * n / bw
    assert res.iteration_time_s == pytest.approx(expected, rel=1e-9)


def test_two_rings_through_one_link_each_get_half() -> None:
    # GPUs 0,1 behind switch 4; GPUs 2,3 behind switch 5; one 10 GB/s link between switches.
    edges = [(0, 4, 1000), (1, 4, 1000), (2, 5, 1000), (3, 5, 1000), (4, 5, 10)]
    topo = build_graph_topology(4, 2, edges, gpus_per_node=2)
    n = 1e9
    ar = [CollectiveOp("ar", CollectiveKind.ALL_REDUCE, "pair", n, "t", "comm")]
    one = graph_of({0: ar, 2: ar, 1: [], 3: []}, {"pair": [[0, 2]]}, 4)
    both = graph_of({r: ar for r in range(4)}, {"pair": [[0, 2], [1, 3]]}, 4)
    t_one = run(one, topo).iteration_time_s
    t_both = run(both, topo).iteration_time_s
    assert t_one == pytest.approx(n / 10e9, rel=1e-6)  # 2(p-1)/p·n = n each way
    assert t_both == pytest.approx(2 * t_one, rel=1e-6)
    # alpha-beta ignores the sharing
    assert run(both, topo, "alpha-beta").iteration_time_s == pytest.approx(t_one, rel=1e-6)


@pytest.mark.parametrize("network", NETWORKS)
def test_infinite_bandwidth_leaves_compute_critical_path(network: str) -> None:
    # rank program: two compute streams joined by an all-reduce; critical path is analytic
    def gemm(
        name: str, flops: float, stream: str = "compute", deps: tuple[int, ...] = ()
    ) -> ComputeOp:
        return ComputeOp(name, ComputeKind.GEMM, flops, 0.0, stream, deps)

    ops = [
        gemm("a", 3e9),  # 3 µs
        gemm("b", 5e9, "side"),  # 5 µs on another stream, in parallel
        CollectiveOp("ar", CollectiveKind.ALL_REDUCE, "world", 1e9, "t", "comm", deps=(0, 1)),
        WaitOp("w", target=2),
        gemm("c", 2e9),  # after the wait: starts at 5 µs
    ]
    g = graph_of({r: ops for r in range(4)}, {"world": [[0, 1, 2, 3]]}, 4, classes=[0] * 4)
    res = run(g, build_full_mesh(4, 1e30, 0.0), network)
    assert res.iteration_time_s == pytest.approx(7e-6, abs=1e-12)


@pytest.mark.parametrize("network", NETWORKS)
def test_fully_overlapped_collective_adds_no_time(network: str) -> None:
    compute = ComputeOp("long", ComputeKind.GEMM, 1e13, 0.0)  # 10 ms
    ops = [
        CollectiveOp("ar", CollectiveKind.ALL_REDUCE, "world", 1e6, "t", "comm"),
        compute,
        WaitOp("w", target=0),
    ]
    g = graph_of({r: ops for r in range(4)}, {"world": [[0, 1, 2, 3]]}, 4, classes=[0] * 4)
    res = run(g, build_full_mesh(4, 100e9, 1e-6), network)
    assert res.iteration_time_s == pytest.approx(1e13 / FLOPS, abs=1e-12)
    tl = res.timeline.rank(0)
    ar = tl.kind == "all-reduce"
    assert tl.end_s[ar][0] < tl.end_s[tl.kind == "gemm"][0]
