"""Hypothesis properties and semantics of the engine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.errors import EngineError
from tests.engine_helpers import build_graph_topology, graph_of, run
from topologies.synthetic import build_full_mesh, build_switched
from topologies.types import LinkTable, Topology
from workloads.ops import CollectiveKind, CollectiveOp, ComputeKind, ComputeOp, Op, WaitOp

KINDS = [
    CollectiveKind.ALL_REDUCE,
    CollectiveKind.ALL_GATHER,
    CollectiveKind.REDUCE_SCATTER,
    CollectiveKind.ALL_TO_ALL,
]
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def symmetric_programs(draw: st.DrawFn) -> tuple[list[Op], dict[str, list[list[int]]], int]:
    gx = draw(st.sampled_from([1, 2, 4]))
    gy = draw(st.sampled_from([1, 2, 4]))
    world = gx * gy
    grid = np.arange(world).reshape(gy, gx)
    groups = {"x": grid.tolist(), "y": grid.T.tolist(), "world": [list(range(world))]}
    ops: list[Op] = []
    comm_ops: list[int] = []
    for i in range(draw(st.integers(3, 14))):
        choice = draw(st.integers(0, 3))
        deps = (
            tuple(sorted(set(draw(st.lists(st.integers(0, max(i - 1, 0)), max_size=2)))))
            if i
            else ()
        )
        if choice <= 1:
            stream = draw(st.sampled_from(["compute", "side"]))
            ops.append(
                ComputeOp(f"k{i}", ComputeKind.GEMM, draw(st.floats(1e8, 5e10)), 0.0, stream, deps)
            )
        elif choice == 2 or not comm_ops:
            g = draw(st.sampled_from(["x", "y", "world"]))
            kind = draw(st.sampled_from(KINDS))
            nbytes = draw(st.floats(1e3, 1e9))
            ops.append(CollectiveOp(f"c{i}", kind, g, nbytes, f"t{i}", f"comm:{g}", deps))
            comm_ops.append(i)
        else:
            ops.append(WaitOp(f"w{i}", target=draw(st.sampled_from(comm_ops)), deps=deps))
    return ops, groups, world


def _topology(world: int, kind: int) -> Topology:
    if kind == 0:
        return build_full_mesh(max(world, 2), 80e9, 2e-6)
    if kind == 1:
        return build_switched(max(world, 2), 120e9, 1e-6)
    # two islands joined by one thin link (instances of 'y' share it)
    half = max(world // 2, 1)
    edges = [(g, world, 500) for g in range(half)] + [
        (g, world + 1, 500) for g in range(half, world)
    ]
    edges.append((world, world + 1, 20))
    return build_graph_topology(world, 2, edges, gpus_per_node=half)


@SETTINGS
@given(symmetric_programs(), st.integers(0, 2), st.sampled_from(["alpha-beta", "contention"]))
def test_full_and_symmetric_modes_agree_exactly(prog: tuple, topo_kind: int, network: str) -> None:
    ops, groups, world = prog
    if world < 2:
        return
    g = graph_of({r: ops for r in range(world)}, groups, world, classes=[0] * world)
    topo = _topology(world, topo_kind)
    full = run(g, topo, network, mode="full", algorithm="auto")
    sym = run(g, topo, network, mode="symmetric", algorithm="auto")
    assert full.mode == "full" and sym.mode == "symmetric"
    assert full.iteration_time_s == sym.iteration_time_s
    rep = sym.timeline.rank(0)
    for r in range(world):
        tl = full.timeline.rank(r)
        np.testing.assert_array_equal(tl.start_s, rep.start_s)
        np.testing.assert_array_equal(tl.end_s, rep.end_s)


def _scaled(topo: Topology, link: int, factor: float) -> Topology:
    bw = topo.links.bandwidth_Bps.copy()
    bw[link] *= factor
    lt = topo.links
    links = LinkTable(
        src=lt.src, dst=lt.dst, kind=lt.kind, bandwidth_Bps=bw, latency_s=lt.latency_s
    )
    return Topology(
        topo.name,
        topo.devices,
        links,
        topo.gpus,
        topo.gpus_per_node,
        topo.router,
        metadata=topo.metadata,
    )


@SETTINGS
@given(symmetric_programs(), st.integers(0, 2), st.data())
def test_less_bandwidth_is_never_faster_alpha_beta(
    prog: tuple, topo_kind: int, data: st.DataObject
) -> None:
    ops, groups, world = prog
    if world < 2:
        return
    g = graph_of({r: ops for r in range(world)}, groups, world, classes=[0] * world)
    topo = _topology(world, topo_kind)
    link = data.draw(st.integers(0, topo.num_links - 1))
    factor = data.draw(st.floats(0.05, 0.95))
    base = run(g, topo, "alpha-beta", algorithm="auto").iteration_time_s
    slow = run(g, _scaled(topo, link, factor), "alpha-beta", algorithm="auto").iteration_time_s
    assert slow >= base


@SETTINGS
@given(
    st.sampled_from(KINDS),
    st.sampled_from(["ring", "direct"]),
    st.floats(1e4, 1e9),
    st.integers(0, 2),
    st.data(),
)
def test_less_bandwidth_never_speeds_up_a_collective_under_contention(
    kind: CollectiveKind, algorithm: str, nbytes: float, topo_kind: int, data: st.DataObject
) -> None:
    if kind is CollectiveKind.ALL_TO_ALL:
        algorithm = "direct"
    world = 4
    grid = np.arange(world).reshape(2, 2)
    groups = {"x": grid.tolist(), "y": grid.T.tolist()}
    ops = [
        CollectiveOp("a", kind, "x", nbytes, "a", "comm:x"),
        CollectiveOp("b", kind, "y", nbytes, "b", "comm:y"),
    ]
    g = graph_of({r: ops for r in range(world)}, groups, world)
    topo = _topology(world, topo_kind)
    link = data.draw(st.integers(0, topo.num_links - 1))
    factor = data.draw(st.floats(0.05, 0.95))
    base = run(g, topo, "contention", algorithm=algorithm).iteration_time_s
    slow = run(g, _scaled(topo, link, factor), "contention", algorithm=algorithm).iteration_time_s
    assert slow >= base * (1 - 1e-12)


@SETTINGS
@given(symmetric_programs(), st.integers(0, 2), st.sampled_from(["alpha-beta", "contention"]))
def test_bytes_sent_equal_bytes_received(prog: tuple, topo_kind: int, network: str) -> None:
    ops, groups, world = prog
    if world < 2:
        return
    g = graph_of({r: ops for r in range(world)}, groups, world, classes=[0] * world)
    topo = _topology(world, topo_kind)
    res = run(g, topo, network, mode="symmetric", algorithm="auto")
    gpu = np.zeros(topo.num_devices, dtype=bool)
    gpu[topo.gpus] = True
    sent = res.link_bytes[gpu[topo.links.src]].sum()
    received = res.link_bytes[gpu[topo.links.dst]].sum()
    assert sent == pytest.approx(received, rel=1e-12)
    assert np.all(res.link_bytes >= 0)


def _compute(
    name: str, us: float, stream: str = "compute", deps: tuple[int, ...] = ()
) -> ComputeOp:
    return ComputeOp(name, ComputeKind.GEMM, us * 1e9, 0.0, stream, deps)


def test_stream_order_is_fifo_and_streams_run_in_parallel() -> None:
    ops: list[Op] = [_compute("a", 3), _compute("b", 2), _compute("c", 4, "side")]
    g = graph_of({0: ops, 1: ops}, {}, 2)
    res = run(g, build_full_mesh(2, 1e9))
    tl = res.timeline.rank(0)
    assert list(tl.start_s * 1e6) == pytest.approx([0, 3, 0])
    assert list(tl.end_s * 1e6) == pytest.approx([3, 5, 4])


def test_wait_blocks_its_stream_until_the_async_collective_ends() -> None:
    ops: list[Op] = [
        CollectiveOp(
            "ar", CollectiveKind.ALL_REDUCE, "w", 2e9, "t", "comm"
        ),  # 2(p-1)/p·2e9/1e9 = 2 s
        _compute("overlap", 1e6),  # 1 s, overlaps
        WaitOp("wait", target=0),
        _compute("after", 1e6),
    ]
    g = graph_of({0: ops, 1: ops}, {"w": [[0, 1]]}, 2)
    tl = run(g, build_full_mesh(2, 1e9)).timeline.rank(0)
    assert tl.end_s[0] == pytest.approx(2.0)
    assert tl.start_s[3] == pytest.approx(2.0)
    assert tl.end_s[3] == pytest.approx(3.0)


def test_collective_waits_for_the_last_participant() -> None:
    slow = [
        _compute("slow", 5),
        CollectiveOp("ar", CollectiveKind.ALL_REDUCE, "w", 0.0, "t", "comm", deps=(0,)),
    ]
    fast = [
        _compute("fast", 1),
        CollectiveOp("ar", CollectiveKind.ALL_REDUCE, "w", 0.0, "t", "comm", deps=(0,)),
    ]
    g = graph_of({0: slow, 1: fast}, {"w": [[0, 1]]}, 2)
    res = run(g, build_full_mesh(2, 1e9))
    fast_tl = res.timeline.rank(1)
    assert fast_tl.start_s[1] == pytest.approx(1e-6)  # launched early, waits
    assert fast_tl.sync_start_s is not None and fast_tl.sync_start_s[1] == pytest.approx(5e-6)


def test_results_are_deterministic() -> None:
    ops: list[Op] = [
        _compute("a", 3),
        CollectiveOp("ar", CollectiveKind.ALL_REDUCE, "w", 1e8, "t", "comm:w", deps=(0,)),
        CollectiveOp("ag", CollectiveKind.ALL_GATHER, "v", 3e8, "u", "comm:v"),
        WaitOp("w1", 1),
        WaitOp("w2", 2),
    ]
    groups = {"w": [[0, 1], [2, 3]], "v": [[0, 2], [1, 3]]}
    g = graph_of({r: ops for r in range(4)}, groups, 4)
    topo = build_switched(4, 50e9, 1e-6)
    a, b = run(g, topo), run(g, topo)
    for r in range(4):
        np.testing.assert_array_equal(a.timeline.rank(r).end_s, b.timeline.rank(r).end_s)


def test_mismatched_collective_order_is_reported_as_deadlock() -> None:
    a = [
        CollectiveOp("c1", CollectiveKind.ALL_REDUCE, "w", 1e6, "t1", "s1"),
        CollectiveOp("c2", CollectiveKind.ALL_REDUCE, "v", 1e6, "t2", "s1"),
    ]
    b = [
        CollectiveOp("c2", CollectiveKind.ALL_REDUCE, "v", 1e6, "t2", "s1"),
        CollectiveOp("c1", CollectiveKind.ALL_REDUCE, "w", 1e6, "t1", "s1"),
    ]
    g = graph_of({0: a, 1: b}, {"w": [[0, 1]], "v": [[0, 1]]}, 2)
    with pytest.raises(EngineError, match="deadlock"):
        run(g, build_full_mesh(2, 1e9))


def test_symmetric_mode_without_rank_classes_finds_them() -> None:
    """A workload that declares no classes gets them by colour refinement (its programs
    and groups): two ranks of one program are one class, two programs two."""
    ops: list[Op] = [_compute("a", 1)]
    g = graph_of({0: ops, 1: ops}, {}, 2)
    sym = run(g, build_full_mesh(2, 1e9), mode="symmetric")
    assert sym.mode == "symmetric" and sym.timeline.ranks == (0,)
    auto = run(g, build_full_mesh(2, 1e9), mode="auto")
    assert auto.mode == "symmetric" and auto.iteration_time_s == sym.iteration_time_s
    other = graph_of({0: ops, 1: [_compute("b", 2)]}, {}, 2)
    assert run(other, build_full_mesh(2, 1e9), mode="auto").mode == "full"  # 2 of 2 ranks
