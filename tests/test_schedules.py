"""Collective algorithms: volumes and steps per phase, and their error cases."""

from __future__ import annotations

import pytest

from simulator.errors import CostModelError
from simulator.network.library import Library
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
    # broadcast / reduce: the ring's pipelined chain only (tuning.cc skips the rest)
    assert candidate_algorithms(K.BROADCAST, layout(2, 2)) == ("ring",)
    assert candidate_algorithms(K.REDUCE, layout(4, 1)) == ("ring",)


def test_pat_only_for_nccl_builds_that_have_it_with_one_gpu_per_node() -> None:
    """NCCL >= 2.23 enables PAT for all-gather / reduce-scatter where nNodes == nRanks
    (v2.23.4-1 tuning.cc ncclPatEnable); no RCCL release has it."""
    new, old, rccl = (Library.parse(x) for x in ("NCCL 2.23.4", "NCCL 2.22.3", "RCCL 2.21.5"))
    sparse, dense = layout(8, 1), layout(4, 2)
    assert candidate_algorithms(K.ALL_GATHER, sparse, new) == ("ring", "pat")
    assert candidate_algorithms(K.REDUCE_SCATTER, sparse, new) == ("ring", "pat")
    assert candidate_algorithms(K.ALL_GATHER, dense, new) == ("ring",)
    assert candidate_algorithms(K.ALL_GATHER, sparse, old) == ("ring",)
    assert candidate_algorithms(K.ALL_GATHER, sparse, rccl) == ("ring",)
    assert candidate_algorithms(K.ALL_REDUCE, sparse, new) == ("ring", "tree")
    pat = build_schedule("pat", K.ALL_GATHER, sparse)
    assert len(pat.phases) == 3 and all(ph.steps == 1 for ph in pat.phases)
    # the ring's volume ((p - 1) / p of S per member) at 0.85 of its bandwidth
    moved = sum(ph.bytes_factor for ph in pat.phases)
    assert moved == pytest.approx(7 / 8 / 0.85)


def test_broadcast_chain_carries_the_pipeline_fill() -> None:
    """A broadcast is one chain per channel whose L = p - 1 hops each carry the channel's
    share; the schedule records L for the pipelined chunks' fill."""
    sched = build_schedule("ring", K.BROADCAST, layout(2, 4), root=0)
    (ph,) = sched.phases
    assert ph.chain_hops == 7 and ph.bytes_factor == pytest.approx(1 / 4)
    assert not build_schedule("ring", K.ALL_GATHER, layout(2, 4)).phases[0].chain_hops


def test_hierarchical_levels_are_separate_calls_with_their_step_messages() -> None:
    """ZeRO++'s 3-level tiers: an all-gather over 2 Frontier nodes gathers across nodes
    first (S/8 per GPU ring of 2), then among the node's package leaders (S/2 over 4),
    then inside the GCD pair (S over 2); each level a call of its own."""
    sched = build_schedule("hierarchical", K.ALL_GATHER, layout(2, 8, package=2))
    assert sched.separate_calls and len(sched.phases) == 3
    assert [ph.bytes_factor for ph in sched.phases] == pytest.approx([1 / 2 / 8, 3 / 4 / 2, 1 / 2])
    assert [ph.chunk_factor for ph in sched.phases] == pytest.approx([1 / 16, 1 / 8, 1 / 2])
