"""Collective algorithms: volumes and steps per phase, and their error cases."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.errors import CostModelError
from simulator.network.schedules import Layout, build_schedule, candidate_algorithms, ring_channels
from workloads.ops import CollectiveKind as K


def layout(nodes: int, per_node: int, package: int = 1) -> Layout:
    node = tuple(n for n in range(nodes) for _ in range(per_node))
    local = tuple(i for _ in range(nodes) for i in range(per_node))
    return Layout(node=node, local=local, package=tuple(i // package for i in local))


def per_gpu_bytes(schedule, p: int) -> float:
    """Bytes each position sends in total, as a multiple of S."""
    total = 0.0
    for ph in schedule.phases:
        total += ph.bytes_factor * len(ph.src) / p
    return total


@pytest.mark.parametrize(
    "algorithm", ["ring", "direct", "recursive-halving-doubling", "hierarchical"]
)
@pytest.mark.parametrize(
    "kind,volume", [(K.ALL_REDUCE, 2.0), (K.REDUCE_SCATTER, 1.0), (K.ALL_GATHER, 1.0)]
)
def test_bandwidth_optimal_volume(algorithm: str, kind: K, volume: float) -> None:
    p = 8
    sched = build_schedule(algorithm, kind, layout(2, 4))
    assert per_gpu_bytes(sched, p) == pytest.approx(volume * (p - 1) / p)


def test_ring_steps_and_channels() -> None:
    single = build_schedule("ring", K.ALL_REDUCE, layout(1, 8))
    assert single.steps == 14 and len(single.phases[0].src) == 8
    multi = build_schedule("ring", K.ALL_GATHER, layout(2, 4))
    assert len(ring_channels(layout(2, 4))) == 4  # one channel per GPU of a node
    ph = multi.phases[0]
    assert len(ph.src) == 4 * 8 and ph.steps == 7
    # each channel leaves node 0 from a different GPU
    exits = {int(s) for s, d in zip(ph.src, ph.dst, strict=True) if s < 4 <= d}
    assert exits == {0, 1, 2, 3}


def test_hierarchical_three_levels_on_frontier_like_layout() -> None:
    sched = build_schedule("hierarchical", K.ALL_REDUCE, layout(2, 8, package=2))
    # package RS, node RS, global AR, node AG, package AG
    assert len(sched.phases) == 5
    factors = [ph.bytes_factor for ph in sched.phases]
    assert factors == pytest.approx([1 / 2, 3 / 4 / 2, 2 * 1 / 2 / 8, 3 / 4 / 2, 1 / 2])


def test_tree_and_direct_shapes() -> None:
    tree = build_schedule("tree", K.ALL_REDUCE, layout(4, 1))
    assert tree.phases[0].bytes_factor == 0.5
    a2a = build_schedule("direct", K.ALL_TO_ALL, layout(1, 4))
    assert len(a2a.phases[0].src) == 12 and a2a.phases[0].bytes_factor == 0.25
    bcast = build_schedule("ring", K.BROADCAST, layout(1, 4), root=2)
    assert int(bcast.phases[0].src[0]) == 2 and bcast.phases[0].bytes_factor == 1.0


def test_size_one_group_has_no_phases() -> None:
    for algo in ("ring", "direct", "tree", "recursive-halving-doubling", "hierarchical"):
        assert build_schedule(algo, K.ALL_REDUCE, layout(1, 1)).phases == ()


@pytest.mark.parametrize(
    "algorithm,kind,lay,match",
    [
        ("recursive-halving-doubling", K.ALL_REDUCE, layout(1, 6), "power-of-two"),
        ("ring", K.ALL_TO_ALL, layout(1, 4), "does not support all-to-all"),
        ("tree", K.ALL_GATHER, layout(2, 2), "does not support all-gather"),
        ("hierarchical", K.BROADCAST, layout(2, 2), "does not support broadcast"),
        ("magic", K.ALL_REDUCE, layout(1, 2), "unknown collective algorithm"),
    ],
)
def test_unsupported_combinations_raise(algorithm: str, kind: K, lay: Layout, match: str) -> None:
    with pytest.raises(CostModelError, match=match):
        build_schedule(algorithm, kind, lay)


def test_hierarchical_needs_equal_members_per_node() -> None:
    lay = Layout(node=(0, 0, 0, 1), local=(0, 1, 2, 0), package=(0, 1, 2, 0))
    with pytest.raises(CostModelError, match="same number"):
        build_schedule("hierarchical", K.ALL_REDUCE, lay)


def test_candidates_follow_nccl() -> None:
    assert candidate_algorithms(K.ALL_REDUCE, layout(1, 8)) == ("ring", "direct")
    assert candidate_algorithms(K.ALL_REDUCE, layout(4, 2)) == ("ring", "tree")
    assert candidate_algorithms(K.ALL_GATHER, layout(4, 2)) == ("ring",)
    assert candidate_algorithms(K.ALL_TO_ALL, layout(4, 2)) == ("direct",)
    assert np.all(
        np.asarray(candidate_algorithms(K.BROADCAST, layout(2, 2))) == np.array(["ring", "tree"])
    )
