"""ZeRO-3 / FSDP / HSDP / ZeRO++: gathers, reductions, partition levels and the measured
cross-node volumes of baselines.md (ZeRO-3 about 3M, ZeRO++ about 0.75M)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import pytest

from tests.strategy_helpers import SPEC, collectives, cross_node_bytes_per_node, hybrid, run
from workloads.hybrid.params import (
    FsdpPpParallel,
    ShardedParallel,
    ZeroppHierParallel,
    ZeroppParallel,
)
from workloads.hybrid.setup import block_linears, block_params
from workloads.ops import CollectiveKind as K
from workloads.ops import ComputeKind, ComputeOp

DB = SPEC.dtype_bytes


def _by_name(graph, prefix: str) -> Counter:  # type: ignore[no-untyped-def]
    """Weight collectives of one layer (the replicated biases' all-reduces and the
    quantisation scales left out)."""
    return Counter(
        (op.kind.value, op.group, op.bytes)
        for op in collectives(graph.programs[0], prefix)
        if ".bias" not in op.name and not op.name.endswith(".scales")
    )


def test_zero3_gathers_each_linear_three_times_with_recompute() -> None:
    _, g = hybrid(ShardedParallel(strategy="zero3"), 4, mbs=1)
    w = {lay.name: lay.weight_elems for lay in block_linears(SPEC, 1)}
    c = _by_name(g, "L0.mlp_up")
    assert c == Counter(
        {
            ("all-gather", "shard", w["mlp_up"] * DB): 3,  # forward, recompute, backward
            ("reduce-scatter", "shard", w["mlp_up"] * DB): 1,
        }
    )
    # biases and LayerNorms stay replicated: all-reduced over the data-parallel group
    small = _by_name(g, "L0.ln1.w")
    assert small == Counter({("all-reduce", "dp", SPEC.hidden * DB): 1})


def test_fsdp_block_units_gather_twice_and_reduce_scatter_once() -> None:
    _, g = hybrid(ShardedParallel(strategy="fsdp"), 4)
    unit = block_params(SPEC, 1) * DB
    c = Counter(
        (op.kind.value, op.group, op.bytes)
        for op in collectives(g.programs[0])
        if op.name.startswith("L1.")
    )
    assert c == Counter({("all-gather", "shard", unit): 2, ("reduce-scatter", "shard", unit): 1})


def test_hsdp_all_reduces_the_shard_over_replicas_every_microbatch() -> None:
    """FSDP's HYBRID_SHARD: its post-backward hook reduce-scatters inside the shard group
    and all-reduces the shard over the replicas, every backward (_reduce_grad)."""
    setup, g = hybrid(ShardedParallel(strategy="hsdp", shard=4), 8, sequences=16, mbs=1)
    assert (setup.shard, setup.replicate, setup.microbatches) == (4, 2, 2)
    ars = [op for op in collectives(g.programs[0], "L1.") if op.group == "replicate"]
    assert [(op.kind, op.bytes) for op in ars] == [
        (K.ALL_REDUCE, block_params(SPEC, 1) * DB / 4)
    ] * 2
    rs = [op for op in collectives(g.programs[0], "L1.") if op.kind is K.REDUCE_SCATTER]
    assert len(rs) == 2  # every microbatch


def test_zeropp_quantised_collectives_and_kernels() -> None:
    """DeepSpeed quantises every all-gather under qwZ, the hpZ (secondary) ones too
    (partition_parameters.py all_gather_coalesced(quantize=True) on ds_secondary_tensor)."""
    _, g = hybrid(ZeroppParallel(), 16, mbs=1, gpus_per_node=8)
    lay = next(lay for lay in block_linears(SPEC, 1) if lay.name == "qkv")
    e = lay.weight_elems
    c = _by_name(g, "L0.qkv")
    assert c[("all-gather", "shard", e * 1.0)] == 1  # qwZ: int8 forward gather, global
    assert c[("all-gather", "znode", e * 1.0)] == 2  # hpZ: recompute + backward in the node
    assert c[("all-to-all", "znode", e * 0.5)] == 1  # qgZ: int4 inside the node
    assert c[("all-to-all", "zinter", e * 0.5 / 8)] == 1  # then across nodes
    # the fp32 scales follow each quantised collective (DeepSpeed's quant_handle and
    # scale all-to-alls): one per ~8,000 weights (qwZ), max(rows, cols, world) (qgZ)
    scales = [op for op in collectives(g.programs[0], "L0.qkv") if op.name.endswith(".scales")]
    qwz_scale = 4.0 * math.ceil(e / 8000)
    groups = max(lay.k_local, lay.n_local, 16)
    assert Counter((op.kind.value, op.group, op.bytes) for op in scales) == {
        ("all-gather", "shard", qwz_scale): 1,
        ("all-gather", "znode", qwz_scale): 2,
        ("all-to-all", "znode", 4.0 * groups): 1,
        ("all-to-all", "zinter", 4.0 * (groups // 8)): 1,
    }
    quant = [
        op
        for op in g.programs[0].ops
        if isinstance(op, ComputeOp) and op.kind is ComputeKind.QUANTIZE and "L0.qkv" in op.name
    ]
    assert len(quant) == 3 * 2 + 4  # qwZ (quant, dequant) x 3 gathers; qgZ 2 x (quant, dequant)


def test_zeropp_later_forwards_read_the_secondary_partition() -> None:
    """Only the first forward of an iteration gathers from the global primary shards; it
    fills the hpZ partition, which the later microbatches' forwards read (DeepSpeed's
    use_secondary_tensor once ds_secondary_tensor is set)."""
    _, g = hybrid(ZeroppParallel(), 16, sequences=16 * 3, mbs=1, gpus_per_node=8)
    fwd = [
        op.group
        for op in collectives(g.programs[0], "L0.qkv")
        if op.kind is K.ALL_GATHER and op.phase == "fwd" and not op.name.endswith(".scales")
    ]
    assert fwd == ["shard", "znode", "znode"]  # microbatches 1, 2 (standing for the middle), 3


def test_zeropp_hier_default_is_the_pair_hierarchy_and_never_zeropp() -> None:
    from simulator.search.candidates import hybrid_variants
    from workloads.hybrid.configure import sharding_of
    from workloads.run import ClusterShape

    _, g = hybrid(ZeroppHierParallel(), 16, mbs=1, gpus_per_node=8)
    groups = Counter(
        op.group
        for op in collectives(g.programs[0], "L0.qkv")
        if ".bias" not in op.name and not op.name.endswith(".scales")
    )
    assert groups == {"shard": 1, "zpair": 3, "znode_x": 1, "zinter": 1}
    variants = hybrid_variants("zeropp-hier", ClusterShape(16, 8, 64e9))
    assert variants[0] == ZeroppHierParallel()
    assert sharding_of(ZeroppParallel()) not in {sharding_of(v) for v in variants}
    assert len(variants) == 26


def test_zeropp_hier_pair_levels() -> None:
    params = ZeroppHierParallel(
        forward_partition="pair", backward_partition="pair", gradient_partition="pair"
    )
    _, g = hybrid(params, 16, mbs=1, gpus_per_node=8)
    groups = {op.group for op in collectives(g.programs[0], "L0.qkv") if ".bias" not in op.name}
    assert groups == {"zpair", "znode_x", "zinter"}
    refresh = collectives(g.programs[0], "refresh")
    assert [op.group for op in refresh] == ["zpair_x"]


def test_fsdp_pp_keeps_weights_for_the_iteration() -> None:
    setup, g = hybrid(FsdpPpParallel(pp=2), 8, pp=2, sequences=16, mbs=1)
    assert setup.microbatches == 4
    for program in g.programs:
        ops = collectives(program, "L")
        gathers = Counter(op.name for op in ops if op.kind is K.ALL_GATHER)
        assert gathers and set(gathers.values()) == {1}
        assert sum(op.kind is K.REDUCE_SCATTER for op in ops) == len(gathers)


def _cross_node(params, spec) -> float:  # type: ignore[no-untyped-def]
    _, g = hybrid(params, 8, mbs=1, checkpointing=False, spec=spec, gpus_per_node=4)
    res, topo = run(g, gpus_per_node=4)
    return cross_node_bytes_per_node(res, topo)


def test_cross_node_volume_zero3_about_3m_zeropp_about_075m() -> None:
    """Measured from the engine's link bytes on 2 nodes x 4 GPUs: per node, ZeRO-3 moves
    3M(N-1)/N across nodes (ring gathers and reduce-scatter), ZeRO++ 0.5M(N-1)/N (int8
    forward gathers) + 0.25M(n-1)/n (int4 inter-node all-to-all); hpZ keeps the backward
    gathers inside the node. M = bytes of the sharded weights; biases, LayerNorms and
    the embedding's extra gather add a little."""
    spec = replace(SPEC, hidden=256, vocab=64, layers=4)
    m_bytes = DB * (spec.layers * sum(x.weight_elems for x in block_linears(spec, 1)) + 64 * 256)
    n_gpus, nodes = 8, 2
    zero3 = _cross_node(ShardedParallel(strategy="zero3"), spec) / m_bytes
    zeropp = _cross_node(ZeroppParallel(), spec) / m_bytes
    assert zero3 == pytest.approx(3 * (n_gpus - 1) / n_gpus, rel=0.03)
    expected = 0.5 * (n_gpus - 1) / n_gpus + 0.25 * (nodes - 1) / nodes
    assert zeropp == pytest.approx(expected, rel=0.07)
    assert zero3 / zeropp > 4
