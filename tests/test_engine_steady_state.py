"""Steady-state skipping keeps results identical to simulating every microbatch."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.cost.model import RooflineKernels
from simulator.engine.compiled import compile_program
from simulator.engine.regions import find_regions
from tests.engine_helpers import graph_of, run
from topologies.synthetic import build_switched
from workloads.graph import OpGraph, Program, Segment
from workloads.ops import CollectiveKind, CollectiveOp, ComputeKind, ComputeOp, Op, WaitOp


def _microbatch(base: int, first: bool) -> list[Op]:
    prev = () if first else (base - 1,)
    return [
        ComputeOp("fwd", ComputeKind.GEMM, 4e9, 0.0, deps=prev),
        CollectiveOp("ar", CollectiveKind.ALL_REDUCE, "x", 3e7, "ar", "comm:x", deps=(base,)),
        CollectiveOp("ag", CollectiveKind.ALL_GATHER, "y", 5e7, "ag", "comm:y", deps=(base,)),
        ComputeOp("side", ComputeKind.ELEMENTWISE, 2e9, 0.0, "side", deps=(base,)),
        WaitOp("w_ar", target=base + 1),
        ComputeOp("bwd", ComputeKind.GEMM, 6e9, 0.0, deps=(base + 3,)),
        WaitOp("w_ag", target=base + 2),
        ComputeOp("end", ComputeKind.ELEMENTWISE, 1e8, 0.0, deps=(base + 3,)),
    ]


def _program(microbatches: int, barrier: bool = True) -> Program:
    ops: list[Op] = [ComputeOp("prefix", ComputeKind.ELEMENTWISE, 1e9, 0.0)]
    segments = []
    for _m in range(microbatches):
        base = len(ops)
        body = _microbatch(base, first=False)
        if not barrier:
            body = body[:-2]  # no wait on the all-gather: no barrier at the boundary
        ops += body
        segments.append(Segment(base, len(ops), "mb"))
    ops.append(
        CollectiveOp(
            "grad_ar", CollectiveKind.ALL_REDUCE, "x", 2e8, "grad", "comm:x", deps=(len(ops) - 1,)
        )
    )
    ops.append(WaitOp("w", target=len(ops) - 1))
    return Program("p", tuple(ops), tuple(segments))


def _graph(program: Program, classes: bool = True) -> OpGraph:
    world = 4
    g = graph_of(
        {r: list(program.ops) for r in range(world)},
        {"x": [[0, 1], [2, 3]], "y": [[0, 2], [1, 3]]},
        world,
        classes=[0] * world if classes else None,
    )
    return OpGraph(world, (program,), g.rank_program, g.groups, g.rank_class)


def _regions(program: Program):
    return find_regions(program, compile_program(program, RooflineKernels(1e15)))


def test_regions_find_the_repeated_microbatches() -> None:
    (region,) = _regions(_program(6))
    assert region.copies == 6 and region.length == 8
    (open_region,) = _regions(_program(6, barrier=False))  # no barrier needed any more
    assert open_region.copies == 6 and open_region.length == 6


@pytest.mark.parametrize("network", ["alpha-beta", "contention"])
@pytest.mark.parametrize("mode", ["full", "symmetric"])
def test_skipping_gives_identical_timelines(network: str, mode: str) -> None:
    g = _graph(_program(7))
    topo = build_switched(4, 40e9, 1e-6)
    fast = run(g, topo, network, mode=mode, steady_state=True)
    slow = run(g, topo, network, mode=mode, steady_state=False)
    assert fast.skipped_segments > 0 and slow.skipped_segments == 0
    assert fast.ops_processed < slow.ops_processed
    assert fast.iteration_time_s == slow.iteration_time_s
    for r in fast.timeline.ranks:
        a, b = fast.timeline.rank(r), slow.timeline.rank(r)
        np.testing.assert_array_equal(a.start_s, b.start_s)
        np.testing.assert_array_equal(a.end_s, b.end_s)
        np.testing.assert_array_equal(a.sync_start_s, b.sync_start_s)
    np.testing.assert_allclose(fast.link_bytes, slow.link_bytes, rtol=1e-12)


def test_straggler_breaks_alignment_and_falls_back_to_exact() -> None:
    g = _graph(_program(5), classes=False)
    topo = build_switched(4, 40e9, 1e-6)
    fast = run(g, topo, "contention", mode="full", steady_state=True, stragglers={2: 1.5})
    slow = run(g, topo, "contention", mode="full", steady_state=False, stragglers={2: 1.5})
    assert fast.iteration_time_s == slow.iteration_time_s
    for r in range(4):
        np.testing.assert_array_equal(fast.timeline.rank(r).end_s, slow.timeline.rank(r).end_s)


def test_a_slowdown_of_one_is_no_straggler_and_keeps_the_symmetric_mode() -> None:
    """A what-if sweep's baseline point (slowdown 1.0) must not force the full mode."""
    g = _graph(_program(5))
    topo = build_switched(4, 40e9, 1e-6)
    base = run(g, topo, "contention", mode="auto")
    neutral = run(g, topo, "contention", mode="auto", stragglers={2: 1.0})
    slowed = run(g, topo, "contention", mode="auto", stragglers={2: 1.5})
    assert neutral.mode == base.mode == "symmetric" and slowed.mode == "full"
    assert neutral.iteration_time_s == base.iteration_time_s < slowed.iteration_time_s
