"""Full mode unrolls a shared program once for all of its ranks, so steady-state skipping
works there as in the symmetric mode, and the results stay those of simulating every copy.

Why a test of its own: each rank whose stream had run out of unrolled ops used to unroll
one more piece, so with more ranks than region copies (GPT-80B on 1,024 Perlmutter GPUs:
16 microbatches) every copy was built before the periodic prover could skip any; a rank
now waits with those already parked on that stream. Compared with the unskipped run and
with the symmetric mode on several topologies, both networks and with a straggler.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.engine.core import EngineResult
from simulator.outputs.analysis import breakdown, with_skipped_periods
from simulator.outputs.report import rank_warps
from tests.engine_helpers import build_graph_topology, graph_of, run
from topologies.synthetic import build_full_mesh, build_switched
from topologies.types import Topology
from workloads.graph import OpGraph, Program, Segment
from workloads.ops import CollectiveKind, CollectiveOp, ComputeKind, ComputeOp, Op, WaitOp

WORLD = 16
COPIES = 6  # fewer than the ranks: one unroll per rank built every copy


def _program(compressed: bool = False) -> Program:
    """Microbatches with x/y collectives, then a 'data' all-reduce on a stream of its own
    that no microbatch uses (it ran out of unrolled ops on every rank at the start).
    Compressed: the text holds one microbatch standing for all (as the AxoNN workload)."""
    ops: list[Op] = [ComputeOp("prefix", ComputeKind.ELEMENTWISE, 1e9, 0.0)]
    segments = []
    for _m in range(1 if compressed else COPIES):
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
        segments.append(Segment(base, len(ops), "mb", COPIES if compressed else 1))
    last = len(ops) - 1
    ops.append(
        CollectiveOp("grad", CollectiveKind.ALL_REDUCE, "data", 2e8, "g", "comm:data", (last,))
    )
    ops.append(WaitOp("w", target=len(ops) - 1))
    return Program("p", tuple(ops), tuple(segments))


def _graph(classes: bool = True, compressed: bool = False) -> OpGraph:
    program = _program(compressed)
    grid = np.arange(WORLD).reshape(4, 2, 2)  # data x y x x
    groups = {
        "x": grid.reshape(-1, 2).tolist(),
        "y": grid.transpose(0, 2, 1).reshape(-1, 2).tolist(),
        "data": grid.reshape(4, 4).T.tolist(),
    }
    g = graph_of(
        {r: list(program.ops) for r in range(WORLD)},
        groups,
        WORLD,
        classes=[0] * WORLD if classes else None,
    )
    return OpGraph(WORLD, (program,), g.rank_program, g.groups, g.rank_class)


def _topology(kind: str) -> Topology:
    if kind == "switched":
        return build_switched(WORLD, 40e9, 1e-6)
    if kind == "mesh":
        return build_full_mesh(WORLD, 80e9, 2e-6)
    # two islands joined by one thin link: 'data' instances share it
    half = WORLD // 2
    edges = [(g, WORLD, 500) for g in range(half)]
    edges += [(g, WORLD + 1, 500) for g in range(half, WORLD)]
    edges.append((WORLD, WORLD + 1, 20))
    return build_graph_topology(WORLD, 2, edges, gpus_per_node=half)


def _same(a: EngineResult, b: EngineResult, ranks: range) -> None:
    """Identical iteration time and records (so per-group and per-kind times); link bytes
    as the steady-state tests compare them (skipped periods repeat the period's bytes)."""
    assert a.iteration_time_s == b.iteration_time_s
    for r in ranks:
        x, y = a.timeline.rank(r), b.timeline.rank(r)
        np.testing.assert_array_equal(x.start_s, y.start_s)
        np.testing.assert_array_equal(x.end_s, y.end_s)
        np.testing.assert_array_equal(x.sync_start_s, y.sync_start_s)
        np.testing.assert_array_equal(x.kind, y.kind)
        np.testing.assert_array_equal(x.group, y.group)
    np.testing.assert_allclose(a.link_bytes, b.link_bytes, rtol=1e-12)


@pytest.mark.parametrize("topology", ["switched", "mesh", "islands"])
@pytest.mark.parametrize("network", ["alpha-beta", "contention"])
def test_full_mode_skips_copies_and_equals_every_copy(topology: str, network: str) -> None:
    g = _graph()
    topo = _topology(topology)
    fast = run(g, topo, network, mode="full", steady_state=True)
    slow = run(g, topo, network, mode="full", steady_state=False)
    assert fast.mode == "full" and slow.skipped_segments == 0
    assert fast.skipped_segments > 0  # every copy was unrolled before the fix: none skipped
    assert fast.ops_processed < slow.ops_processed == slow.ops_represented
    _same(fast, slow, range(WORLD))
    # the compressed text (one microbatch standing for all) gives the same run
    packed = run(_graph(compressed=True), topo, network, mode="full", steady_state=True)
    assert packed.skipped_segments == fast.skipped_segments
    assert packed.iteration_time_s == fast.iteration_time_s
    np.testing.assert_allclose(packed.link_bytes, slow.link_bytes, rtol=1e-12)
    # its records stand for the skipped periods: the report's per-group and per-kind
    # times add the compared period's integrals (float sums, hence rel 1e-12)
    for r in (0, WORLD - 1):
        a = with_skipped_periods(packed.timeline.rank(r), rank_warps(packed.timeline, r))
        b = breakdown(slow.timeline.rank(r))
        for got, want in [
            (a.comm_by_group_s, b.comm_by_group_s),
            (a.exposed_by_group_s, b.exposed_by_group_s),
            (a.compute_by_kind_s, b.compute_by_kind_s),
        ]:
            assert got.keys() == want.keys()
            for k, v in want.items():
                assert got[k] == pytest.approx(v, rel=1e-12, abs=1e-18)
    sym = run(g, topo, network, mode="symmetric", steady_state=True)
    assert sym.mode == "symmetric" and sym.iteration_time_s == fast.iteration_time_s
    for r in range(WORLD):
        np.testing.assert_array_equal(fast.timeline.rank(r).end_s, sym.timeline.rank(r).end_s)


@pytest.mark.parametrize("network", ["alpha-beta", "contention"])
def test_full_mode_with_a_straggler_equals_every_copy(network: str) -> None:
    g = _graph(classes=False)
    topo = _topology("switched")
    kw = {"mode": "full", "stragglers": {5: 1.5}}
    fast = run(g, topo, network, steady_state=True, **kw)  # type: ignore[arg-type]
    slow = run(g, topo, network, steady_state=False, **kw)  # type: ignore[arg-type]
    assert fast.mode == "full"
    _same(fast, slow, range(WORLD))


@pytest.mark.parametrize("compressed", [False, True])
def test_last_rank_found_without_building_every_rank(compressed: bool) -> None:
    """The report's 'rank that finishes last' reads the engine's end times where the
    records are the engine's arrays (a compressed text), so no rank's records get built;
    either way they equal the records'."""
    g = _graph(compressed=compressed)
    res = run(g, _topology("islands"), "contention", mode="full", stragglers={3: 1.2})
    tl = res.timeline
    ends = [tl.rank_end_s(r) for r in tl.ranks]
    assert (not tl._cache) == compressed  # compressed: answered from the engine's arrays
    assert ends == [float(tl.rank(r).end_s.max(initial=0.0)) for r in tl.ranks]
    assert max(ends) == res.iteration_time_s
