"""The refined view (rank classes by colour refinement) equals the full mode, per rank.

Stragglers on random ranks and a machine of mixed GPU types make some ranks differ;
the symmetric mode then runs on the classes colour refinement finds
(simulator/engine/refine.py), and its components' periods are proved apart
(simulator/engine/prover.py). The oracle is the full mode simulating every copy: the
iteration time and every record of every rank must be identical, with and without
steady-state skipping, on a switched fabric, on two islands sharing one thin link, and
on two Frontier nodes (even and odd GCDs wired differently: position classes that a
straggler's classes must respect).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cost.model import CostModel, GpuCompute, RooflineKernels
from simulator.engine.core import Engine, EngineResult
from simulator.engine.refine import refine_classes
from simulator.network.params import NetworkParams
from simulator.network.pricing import CollectivePricer
from tests.engine_helpers import FLOPS, build_graph_topology, graph_of
from topologies.machines import build_machine
from topologies.synthetic import build_switched
from topologies.types import Topology
from workloads.graph import OpGraph, Program, Segment
from workloads.ops import CollectiveKind, CollectiveOp, ComputeKind, ComputeOp, Op, WaitOp

WORLD = 16
COPIES = 5


def _program(copies: int = COPIES) -> Program:
    """Microbatches with x / y collectives beside compute, then a 'data' all-reduce."""
    ops: list[Op] = [ComputeOp("prefix", ComputeKind.ELEMENTWISE, 1e9, 0.0)]
    segments = []
    for _m in range(copies):
        base = len(ops)
        ops += [
            ComputeOp("fwd", ComputeKind.GEMM, 4e9, 0.0, deps=(base - 1,)),
            CollectiveOp("ar", CollectiveKind.ALL_REDUCE, "x", 3e7, "ar", "comm:x", (base,)),
            CollectiveOp("ag", CollectiveKind.ALL_GATHER, "y", 5e7, "ag", "comm:y", (base,)),
            ComputeOp("side", ComputeKind.ELEMENTWISE, 2e9, 0.0, "side", deps=(base,)),
            WaitOp("w_ar", target=base + 1),
            ComputeOp("bwd", ComputeKind.GEMM, 6e9, 0.0, deps=(base + 3,)),
            WaitOp("w_ag", target=base + 2),
            ComputeOp("end", ComputeKind.ELEMENTWISE, 1e8, 0.0, deps=(base + 3,)),
        ]
        segments.append(Segment(base, len(ops), "mb", 1))
    last = len(ops) - 1
    ops.append(
        CollectiveOp("grad", CollectiveKind.ALL_REDUCE, "data", 2e8, "g", "comm:data", (last,))
    )
    ops.append(WaitOp("w", target=len(ops) - 1))
    return Program("p", tuple(ops), tuple(segments))


def _graph(copies: int = COPIES) -> OpGraph:
    program = _program(copies)
    grid = np.arange(WORLD).reshape(4, 2, 2)  # data x y x x
    groups = {
        "x": grid.reshape(-1, 2).tolist(),
        "y": grid.transpose(0, 2, 1).reshape(-1, 2).tolist(),
        "data": grid.reshape(4, 4).T.tolist(),
    }
    g = graph_of({r: list(program.ops) for r in range(WORLD)}, groups, WORLD, [0] * WORLD)
    return OpGraph(WORLD, (program,), g.rank_program, g.groups, g.rank_class)


def _topology(kind: str) -> Topology:
    if kind == "switched":
        return build_switched(WORLD, 40e9, 1e-6)
    if kind == "frontier":  # 2 nodes of 8 GCDs: NICs on the odd ones
        return build_machine("frontier", 2)
    half = WORLD // 2  # two islands joined by one thin link: 'data' instances share it
    edges = [(g, WORLD, 500) for g in range(half)]
    edges += [(g, WORLD + 1, 500) for g in range(half, WORLD)]
    edges.append((WORLD, WORLD + 1, 20))
    return build_graph_topology(WORLD, 2, edges, gpus_per_node=half)


def _run(
    topo: Topology,
    network: str,
    mode: str,
    stragglers: dict[int, float],
    slow_nodes: list[int],
    steady: bool,
    copies: int = COPIES,
) -> EngineResult:
    pricer = CollectivePricer(topo, NetworkParams.ideal(), "ring")
    cost = CostModel(RooflineKernels(FLOPS), pricer, network)
    if slow_nodes:  # a mixed machine: these nodes' GPUs compute at 60%
        node = topo.devices.node[topo.gpus]
        cost.gpu_mix = np.isin(node, slow_nodes).astype(np.int64)
        cost.mixed = (GpuCompute("slow", RooflineKernels(0.6 * FLOPS)),)
    engine = Engine(
        _graph(copies), topo, cost, mode=mode, stragglers=stragglers, steady_state=steady
    )
    return engine.run()


def _same_records(a: EngineResult, b: EngineResult) -> None:
    assert a.iteration_time_s == b.iteration_time_s
    for r in range(WORLD):
        x, y = a.timeline.rank(r), b.timeline.rank(r)
        for col in ("start_s", "end_s", "sync_start_s", "issue_s", "interference_s"):
            np.testing.assert_array_equal(getattr(x, col), getattr(y, col), err_msg=col)
        np.testing.assert_array_equal(x.name, y.name)


TOPOLOGIES = ["switched", "islands", "frontier"]
ORACLES: dict[tuple[object, ...], EngineResult] = {}


@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    copies=st.sampled_from([COPIES, 12]),
    topology=st.sampled_from(TOPOLOGIES),
    network=st.sampled_from(["alpha-beta", "contention"]),
    stragglers=st.dictionaries(
        st.integers(0, WORLD - 1), st.sampled_from([0.5, 1.25, 1.5, 2.0]), max_size=2
    ),
    slow_nodes=st.sampled_from([[], [1]]),
)
def test_refined_view_equals_full_mode_per_rank(
    copies: int, topology: str, network: str, stragglers: dict[int, float], slow_nodes: list[int]
) -> None:
    topo = _topology(topology)
    key = (copies, topology, network, tuple(sorted(stragglers.items())), tuple(slow_nodes))
    oracle = ORACLES.get(key)
    if oracle is None:
        oracle = _run(topo, network, "full", stragglers, slow_nodes, False, copies)
        ORACLES[key] = oracle
    assert oracle.skipped_segments == 0
    exact = _run(topo, network, "symmetric", stragglers, slow_nodes, False, copies)
    assert exact.mode == "symmetric"
    _same_records(exact, oracle)
    skipping = _run(topo, network, "symmetric", stragglers, slow_nodes, True, copies)
    _same_records(skipping, oracle)


@pytest.mark.parametrize("network", ["alpha-beta", "contention"])
def test_a_straggler_and_a_slow_node_each_skip_their_copies(network: str) -> None:
    """A straggler's data-parallel replica and the other replica run their microbatches
    at their own pace (as do a slow node's ranks and the others): each component proves
    its own period and skips its copies (each of 12: 8 skipped, as without a straggler),
    with the contention network too, since each island's traffic stays on its own
    links."""
    topo = _topology("islands")
    for stragglers, slow in (({5: 0.5}, []), ({}, [1])):
        res = _run(topo, network, "symmetric", stragglers, slow, True, 12)
        oracle = _run(topo, network, "full", stragglers, slow, False, 12)
        _same_records(res, oracle)
        assert res.skipped_segments == 2 * 8
        assert res.ops_processed < oracle.ops_processed / 4


def test_refinement_splits_what_differs_and_no_more() -> None:
    """One straggler in a 4 x 2 x 2 grid: a rank's class is which of its coordinates it
    shares with the straggler (2^3 classes); no seed, one class."""
    g = _graph()
    factors = np.ones(WORLD)
    assert refine_classes(g, [np.zeros(WORLD, dtype=np.int64)]).max() == 0
    factors[5] = 1.5
    _, fid = np.unique(factors, return_inverse=True)
    classes = refine_classes(g, [fid])
    assert classes.max() + 1 == 8
    coords = np.stack(np.unravel_index(np.arange(WORLD), (4, 2, 2)), axis=1)
    pattern = (coords == coords[5]) @ np.array([4, 2, 1])
    for c in range(8):  # one class per pattern of shared coordinates
        assert len(set(pattern[classes == c].tolist())) == 1


@pytest.mark.parametrize("network", ["alpha-beta", "contention"])
def test_auto_chooses_the_refined_view_and_says_so(network: str) -> None:
    topo = _topology("switched")
    res = _run(topo, network, "auto", {5: 1.5}, [], True)
    assert res.mode == "symmetric"
    assert len(res.timeline.ranks) == 8


SMALL_AXONN = [
    "cluster.gpus=64",
    "cluster.nodes=null",
    "model.name=gpt-10b",
    "model.layers=4",
    "parallel.grid={x: 2, y: 2, z: 2, data: 8}",
    "training.batch_tokens=262144",
    "training.microbatch_sequences=2",
]


@pytest.mark.parametrize(
    "setup",
    [
        # Frontier: even and odd GCDs are position classes; the stragglers sit on both
        [
            "cluster.machine=frontier",
            "cluster.stragglers=[{rank: 2, slowdown: 1.3}, {rank: 21, slowdown: 0.8}]",
        ],
        # Perlmutter with its last 8 nodes of another GPU type, and a straggler
        [
            "cluster.machine=perlmutter",
            "cluster.node_gpus=[{first_node: 8, nodes: 8, gpu: a100-80gb}]",
            "cluster.stragglers=[{rank: 5, slowdown: 1.2}]",
        ],
    ],
)
def test_axonn_refined_view_equals_full_mode(setup: list[str]) -> None:
    """The AxoNN workload itself: every record of every rank as the full mode gives it.
    Both simulating every copy of the expanded text; then with the compressed text (one
    microbatch standing for all, which the full mode simulates copy by copy where a
    straggler defeats its proof, and the refined view skips copies of) the same
    iteration time and per-rank end times. (The two texts differ by a picosecond: the
    overlap estimate replays each in floats.)"""
    from simulator.api import simulate
    from simulator.config import load_config

    def go(mode: str, steady: bool) -> EngineResult:
        over = [*SMALL_AXONN, *setup, f"engine.mode={mode}", f"engine.steady_state={steady}"]
        return simulate(load_config(None, over)).engine

    oracle, exact = go("full", False), go("auto", False)
    assert exact.mode == "symmetric" and oracle.mode == "full"
    assert len(exact.timeline.ranks) < 64 // 2
    assert exact.iteration_time_s == oracle.iteration_time_s
    o, e = oracle.timeline, exact.timeline
    for r in range(64):
        for col in ("start_s", "end_s", "sync_start_s"):
            np.testing.assert_array_equal(getattr(e.rank(r), col), getattr(o.rank(r), col))
    packed, skipping = go("full", True), go("auto", True)
    assert skipping.skipped_segments > packed.skipped_segments
    assert skipping.iteration_time_s == packed.iteration_time_s
    for r in range(64):
        assert skipping.timeline.rank_end_s(r) == packed.timeline.rank_end_s(r)


def test_uneven_groups_on_frontier_equal_the_full_mode() -> None:
    """x = 3 on 8-GCD nodes: the workload's one class cannot be simulated symmetrically
    (its groups mix even and odd GCDs unevenly; `auto` ran the full mode). The refined
    classes must also tell apart instances laid out alike up to GPU position classes but
    joined by Infinity Fabric links of other widths (GCDs 0, 1, 2 against 2, 3, 4), and
    instances on one leaf switch from those across two: aggregated, such instances would
    all finish with the slowest (the first all-reduce ended 1.4 us late before)."""
    from simulator.api import simulate
    from simulator.config import load_config

    over = [
        "cluster.machine=frontier",
        "cluster.gpus=192",
        "cluster.nodes=null",
        "model.name=gpt-80b",
        "model.layers=1",
        "parallel.grid={x: 3, y: 4, z: 4, data: 4}",
        "training.batch_tokens=65536",
        "training.microbatch_sequences=2",
        "engine.steady_state=false",
    ]
    full = simulate(load_config(None, [*over, "engine.mode=full"])).engine
    auto = simulate(load_config(None, [*over, "engine.mode=auto"])).engine
    assert auto.mode == "symmetric" and len(auto.timeline.ranks) <= 192 // 2
    assert auto.iteration_time_s == full.iteration_time_s
    for r in range(0, 192, 5):
        np.testing.assert_array_equal(auto.timeline.rank(r).end_s, full.timeline.rank(r).end_s)


def test_node_symmetries() -> None:
    """Frontier's node maps onto itself by 4 relabellings of its GCDs (the packages
    swapped in pairs), under which GCDs 0, 1, 2 and 4, 5, 6 are alike and 2, 3, 4 is not;
    a Perlmutter node by every relabelling (NVLink all-to-all, a NIC per GPU)."""
    from topologies.positions import canonical_locals, local_symmetries

    sym = local_symmetries(build_machine("frontier", 2))
    assert sym is not None and sym.shape == (4, 8)
    forms = canonical_locals(np.array([[0, 1, 2], [4, 5, 6], [2, 3, 4]]), sym)
    assert (forms[0] == forms[1]).all() and not (forms[0] == forms[2]).all()
    assert local_symmetries(build_machine("perlmutter", 2)) is None
    same = canonical_locals(np.array([[0, 0, 0], [3, 3, 3], [0, 1, 0]]), None)
    assert same.tolist() == [[0, 0, 0], [0, 0, 0], [0, 1, 0]]
