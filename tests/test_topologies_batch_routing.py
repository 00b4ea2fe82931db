"""Batch routing equals scalar routing, pair by pair, bit for bit.

The scalar routers (`Topology.route`, `DragonflyPaths.paths`, `FatTreePaths.paths`) are the
reference; `Topology.routes_batch` must give the same paths, in the same order, with the
same float weights, for every preset and policy, and raise the same errors.
"""

from __future__ import annotations

import dataclasses
import itertools
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topologies.batch_routing import (
    CHUNK_PAIRS,
    PaddedPaths,
    compact,
    in_chunks,
    merge_duplicates,
    mix64_array,
)
from topologies.catalogue import machine_presets
from topologies.custom import parse_custom_topology
from topologies.dragonfly.build import DragonflySpec, build_dragonfly
from topologies.dragonfly.routing import (
    DragonflyPaths,
    _draw,
    _draw_array,
    _pair_key,
    _pair_key_array,
)
from topologies.errors import TopologyError
from topologies.fabric import Fabric, FabricBatch, FabricRoute, merge_paths
from topologies.fattree import FatTreePaths, FatTreeSpec, build_fat_tree
from topologies.machines import build_machine
from topologies.nodes import build_node
from topologies.paths import mix64
from topologies.routing import MachineRouter
from topologies.synthetic import build_full_mesh, build_switched
from topologies.types import Route, RouteBatch, Topology

DRAGONFLY = ("minimal", "ecmp", "valiant", "adaptive")
FAT_TREE = ("minimal", "ecmp", "adaptive")
# node counts that span several dragonfly groups / fat-tree leaves and pods
PRESETS: dict[str, tuple[int, tuple[str, ...]]] = {
    "perlmutter": (300, DRAGONFLY),
    "frontier": (300, DRAGONFLY),
    "alps": (230, DRAGONFLY),
    "dgx-a100": (300, FAT_TREE),
    "dgx-h100": (800, FAT_TREE),
    "dgx-h200": (500, FAT_TREE),
    "frontera-rtx": (2000, FAT_TREE),
}
CASES = [(m, p) for m, (_, pols) in PRESETS.items() for p in pols]
FIELDS = ("links", "path_len", "path_weight", "paths_per_route")


@cache
def machine(name: str, routing: str, nics: int | None = None) -> Topology:
    return build_machine(name, PRESETS[name][0], routing=routing, nics_per_node=nics)


def scalar(t: Topology, src: np.ndarray, dst: np.ndarray) -> RouteBatch:
    """The reference: scalar routes, flattened."""
    return RouteBatch.from_routes(
        [t.route(a, b) for a, b in zip(src.tolist(), dst.tolist(), strict=True)]
    )


def assert_same(got: RouteBatch, want: RouteBatch) -> None:
    for f in FIELDS:
        a, b = getattr(got, f), getattr(want, f)
        assert a.dtype == b.dtype, f
        assert np.array_equal(a, b), f  # exact, floats included


def mixed_pairs(t: Topology, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random pairs, a quarter each: same node, nearby (same switch / chassis), same
    dragonfly group or pod (within 1024 GPUs), anywhere."""
    rng = np.random.default_rng(seed)
    g, total = t.gpus_per_node, t.num_gpus
    src = rng.integers(0, total, n)
    kind = rng.integers(0, 4, n)
    reach = np.choose(kind, [g, 8 * g, 1024, total])
    dst = (src + rng.integers(1, np.maximum(reach, 2))) % total
    node = src // g  # same node: another local GPU
    dst = np.where(kind == 0, node * g + (src % g + rng.integers(1, max(g, 2), n)) % g, dst)
    keep = dst != src
    return src[keep], dst[keep]


@pytest.mark.parametrize(("name", "routing"), CASES)
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_random_pairs_match_scalar(name: str, routing: str, seed: int) -> None:
    t = machine(name, routing)
    src, dst = mixed_pairs(t, 600, seed)
    assert_same(t.routes_batch(src, dst), scalar(t, src, dst))


@pytest.mark.parametrize("name", ["frontier", "perlmutter", "dgx-h100"])
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_hypothesis_pair_lists_match_scalar(name: str, data: st.DataObject) -> None:
    t = machine(name, "adaptive" if name != "dgx-h100" else "ecmp")
    gpu = st.integers(0, t.num_gpus - 1)
    pairs = data.draw(st.lists(st.tuples(gpu, gpu).filter(lambda p: p[0] != p[1]), max_size=40))
    src = np.array([a for a, _ in pairs], dtype=np.int64)
    dst = np.array([b for _, b in pairs], dtype=np.int64)
    assert_same(t.routes_batch(src, dst), scalar(t, src, dst))


@pytest.mark.parametrize(
    ("name", "routing", "nics"),
    [
        ("frontier", "adaptive", 1),
        ("frontier", "valiant", 2),
        ("perlmutter", "ecmp", 3),
        ("alps", "adaptive", 2),
        ("dgx-h100", "ecmp", 3),
        ("dgx-h200", "minimal", 1),
    ],
)
def test_nics_per_node_overrides_match_scalar(name: str, routing: str, nics: int) -> None:
    t = machine(name, routing, nics)
    src, dst = mixed_pairs(t, 3000, 7)
    assert_same(t.routes_batch(src, dst), scalar(t, src, dst))


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_pair_of_a_small_machine(name: str) -> None:
    for routing in PRESETS[name][1]:
        t = build_machine(name, 3, routing=routing)
        pairs = np.array(list(itertools.permutations(range(t.num_gpus), 2)), dtype=np.int64)
        src, dst = pairs[:, 0], pairs[:, 1]
        assert_same(t.routes_batch(src, dst), scalar(t, src, dst))


@pytest.mark.parametrize("name", list(machine_presets()))
def test_every_catalogue_preset_with_its_default_routing(name: str) -> None:
    t = build_machine(name, 50)
    src, dst = mixed_pairs(t, 2000, 1)
    assert_same(t.routes_batch(src, dst), scalar(t, src, dst))


def test_batches_larger_than_a_chunk() -> None:
    t = machine("frontier", "adaptive")
    src, dst = mixed_pairs(t, 2 * CHUNK_PAIRS + 123, 3)
    assert src.shape[0] > CHUNK_PAIRS
    assert_same(t.routes_batch(src, dst), scalar(t, src, dst))


def test_chunk_buffers_grow_past_a_wrong_bound() -> None:
    """A router under-stating its bound still gets a correct (grown) result."""
    t = machine("frontier", "adaptive")
    src, dst = mixed_pairs(t, 1000, 9)
    whole = t.routes_batch(src, dst)

    def route(sl: slice) -> RouteBatch:
        return t.routes_batch(src[sl], dst[sl])

    assert_same(in_chunks(src.shape[0], route, (1, 1), chunk=128), whole)


def test_merged_valiant_draws_on_a_preset() -> None:
    """Pairs whose Valiant draws coincide (merged paths) are found and match."""
    t = machine("frontier", "adaptive")
    rng = np.random.default_rng(11)
    src = rng.integers(0, 1024, 4000)  # group 0 ...
    dst = rng.integers(1024, t.num_gpus, 4000)  # ... to groups 1 and 2
    merged = [i for i in range(4000) if len(t.route(int(src[i]), int(dst[i])).paths) < 8]
    assert merged, "no merged route in the sample: the case below would test nothing"
    sel = np.array(merged)
    assert_same(t.routes_batch(src[sel], dst[sel]), scalar(t, src[sel], dst[sel]))


# ---------------------------------------------------------------- fabric level
def batch_of(f: Fabric) -> FabricBatch:
    """The fabric's batch path finder (every built-in fabric has one), checking that its
    padded matrices stay within the promised `batch_shape`."""
    router = f.router
    assert isinstance(router, DragonflyPaths | FatTreePaths)

    def run(src: np.ndarray, dst: np.ndarray) -> PaddedPaths:
        out = router.paths_batch(src, dst)
        most_paths, most_links = router.batch_shape
        assert out.links.shape[1] <= most_paths and out.links.shape[2] <= most_links
        return out

    return run


def _fabric_reference(routes: list[FabricRoute]) -> RouteBatch:
    return RouteBatch.from_routes([Route(p, w) for p, w in routes])


def _all_endpoint_pairs(endpoints: int) -> tuple[np.ndarray, np.ndarray]:
    e = np.arange(endpoints, dtype=np.int64)
    a, b = np.meshgrid(e, e, indexing="ij")
    return a.ravel(), b.ravel()  # self-pairs included: the empty same-switch path


@pytest.mark.parametrize("routing", DRAGONFLY)
@pytest.mark.parametrize(
    ("groups", "switches", "h", "weight"),
    [
        (2, 4, 2, 0.5),  # < 3 groups: Valiant falls back to ecmp between groups
        (3, 3, 1, 0.5),  # one intermediate group and switch: every Valiant draw merges
        (3, 2, 3, 0.5),  # 2 switches: no intra-group Valiant; h > S merges cables
        (5, 4, 5, 0.0),  # adaptive weight 0: minimal paths dropped (zero weight)
        (5, 4, 2, 1.0),  # adaptive weight 1: Valiant paths dropped
        (6, 4, 2, 0.3),
    ],
)
def test_dragonfly_fabric_every_endpoint_pair(
    routing: str, groups: int, switches: int, h: int, weight: float
) -> None:
    spec = DragonflySpec(
        nodes_per_group=6,
        switches_per_group=switches,
        groups_total=groups,
        global_links_per_group_pair=h,
        link_bandwidth_Bps=25e9,
        routing=routing,
        adaptive_minimal_weight=weight,
        valiant_paths=3,
    )
    f = build_dragonfly(spec, nodes=6 * groups, nics_per_node=2, link_base=1000)
    src, dst = _all_endpoint_pairs(f.endpoint_switch.shape[0])
    want = _fabric_reference(
        [f.router.paths(a, b) for a, b in zip(src.tolist(), dst.tolist(), strict=True)]
    )
    got = compact(batch_of(f)(src, dst))
    assert_same(got, want)


def test_dragonfly_duplicate_valiant_draws_merge() -> None:
    """With one possible intermediate (3 groups, 1 cable), all Valiant draws coincide."""
    spec = DragonflySpec(
        nodes_per_group=4,
        switches_per_group=3,
        groups_total=3,
        global_links_per_group_pair=1,
        link_bandwidth_Bps=25e9,
        routing="valiant",
        valiant_paths=4,
    )
    f = build_dragonfly(spec, nodes=12, nics_per_node=1)
    src, dst = np.array([0, 0]), np.array([5, 2])  # inter-group, intra-group (other switch)
    for a, b in zip(src.tolist(), dst.tolist(), strict=True):
        paths, weights = f.router.paths(a, b)
        assert len(paths) == 1 and weights == (1.0,)  # 4 draws merged into one
    got = compact(batch_of(f)(src, dst))
    assert got.paths_per_route.tolist() == [1, 1] and got.path_weight.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("routing", FAT_TREE)
@pytest.mark.parametrize(
    "fabric",
    [
        dict(radix=8, rail_optimized=True, pod_gpus=32, core_oversubscription=2.0),
        dict(radix=8, rail_optimized=False, oversubscription=3.0, ecmp_paths=2),
        dict(radix=6, rail_optimized=False, port_split=2, ecmp_paths=8),
    ],
)
def test_fat_tree_fabric_every_endpoint_pair(routing: str, fabric: dict[str, object]) -> None:
    spec = FatTreeSpec(link_bandwidth_Bps=50e9, routing=routing, **fabric)  # type: ignore[arg-type]
    f = build_fat_tree(spec, nodes=24, nics_per_node=2, gpus_per_node=4, link_base=500)
    src, dst = _all_endpoint_pairs(f.endpoint_switch.shape[0])
    want = _fabric_reference(
        [f.router.paths(a, b) for a, b in zip(src.tolist(), dst.tolist(), strict=True)]
    )
    assert_same(compact(batch_of(f)(src, dst)), want)


@settings(max_examples=200, deadline=None)
@given(lo=st.integers(0, 2**63 - 1), hi=st.integers(0, 2**63 - 1), k=st.integers(0, 64))
def test_hashes_wrap_like_python(lo: int, hi: int, k: int) -> None:
    a, b = np.array([lo], dtype=np.uint64), np.array([hi], dtype=np.uint64)
    key = _pair_key_array(a, b)
    assert int(key[0]) == _pair_key(lo, hi)
    assert int(_draw_array(key, k)[0]) == _draw(_pair_key(lo, hi), k)
    assert int(mix64_array(a, b)[0]) == mix64(lo, hi)
    assert int(mix64_array(key, np.array([k]))[0]) == mix64(_pair_key(lo, hi), k)


def test_merge_keeps_first_copy_and_sums_in_order() -> None:
    links = np.array([[[1, -1, 2], [3, 4, -1], [1, 2, -1], [5, -1, -1], [3, 4, -1]]])
    w = [0.1, 0.2, 0.3, 0.0, 0.7]
    got = compact(merge_duplicates(PaddedPaths(links, np.array([w]), np.ones((1, 5), bool))))
    paths, weights = merge_paths([(1, 2), (3, 4), (1, 2), (5,), (3, 4)], w)
    keep = [i for i, x in enumerate(weights) if x > 0]
    want = _fabric_reference([(tuple(paths[i] for i in keep), tuple(weights[i] for i in keep))])
    assert_same(got, want)


# ------------------------------------------------------- edges and fallbacks
def test_empty_batches() -> None:
    t = machine("frontier", "adaptive")
    for src, dst in [(np.zeros(0, np.int64), np.zeros(0, np.int64)), ([], [])]:
        got = t.routes_batch(src, dst)  # type: ignore[arg-type]
        assert len(got) == 0
        assert_same(got, RouteBatch.empty())


@pytest.mark.parametrize(
    ("src", "dst"),
    [([0, 5], [1, 5]), ([0, -1], [1, 2]), ([0, 3], [1, 10**9]), ([10**9, 3], [3, 3])],
)
def test_bad_gpu_indices_raise_like_scalar(src: list[int], dst: list[int]) -> None:
    t = machine("frontier", "adaptive")
    with pytest.raises(TopologyError) as batch_err:
        t.routes_batch(np.array(src), np.array(dst))
    with pytest.raises(TopologyError) as scalar_err:
        for a, b in zip(src, dst, strict=True):
            t.route(a, b)
    assert str(batch_err.value) == str(scalar_err.value)


def test_bad_array_shapes_and_types_raise() -> None:
    t = machine("frontier", "adaptive")
    with pytest.raises(TopologyError, match="equal length"):
        t.routes_batch(np.array([0, 1]), np.array([2]))
    with pytest.raises(TopologyError, match="integers"):
        t.routes_batch(np.array([0.0]), np.array([1.0]))


def test_routers_without_batch_method_fall_back() -> None:
    raw = {
        "devices": [{"name": f"g{i}", "kind": "gpu", "node": i // 2} for i in range(4)]
        + [{"name": "sw", "kind": "switch"}],
        "links": [
            {"src": f"g{i}", "dst": "sw", "kind": "pcie", "bandwidth_GBps": 10 + i}
            for i in range(4)
        ]
        + [{"src": "g0", "dst": "g1", "kind": "nvlink", "bandwidth_GBps": 100}],
    }
    for t in (
        build_full_mesh(6, 50e9, 1e-6),
        build_switched(5, 50e9, 1e-6),
        parse_custom_topology(raw),
    ):
        pairs = np.array(list(itertools.permutations(range(t.num_gpus), 2)), dtype=np.int64)
        assert_same(t.routes_batch(pairs[:, 0], pairs[:, 1]), scalar(t, pairs[:, 0], pairs[:, 1]))


class _ScalarOnlyFabric:
    """A fabric router with `paths` but no `paths_batch`."""

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def paths(self, src_endpoint: int, dst_endpoint: int) -> FabricRoute:
        return self.inner.paths(src_endpoint, dst_endpoint)  # type: ignore[attr-defined]


def test_machine_router_without_fabric_batch_falls_back() -> None:
    t = machine("frontier", "adaptive")
    r = t.router
    assert isinstance(r, MachineRouter)
    plain = MachineRouter(
        build_node("frontier", nics=4), _ScalarOnlyFabric(r.fabric), nodes=r.nodes,
        nic_link_base=r.nic_link_base,
    )  # fmt: skip
    u = dataclasses.replace(t, router=plain, _route_cache={})
    src, dst = mixed_pairs(t, 500, 5)
    assert_same(u.routes_batch(src, dst), scalar(t, src, dst))
