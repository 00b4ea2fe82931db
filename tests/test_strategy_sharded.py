"""ZeRO-3 / FSDP / HSDP: gathers and reductions (ZeRO++ runs DeepSpeed's runtime:
tests/test_zeropp_runtime.py)."""

from __future__ import annotations

from collections import Counter

from tests.strategy_helpers import SPEC, collectives, hybrid
from workloads.hybrid.params import (
    FsdpPpParallel,
    ShardedParallel,
)
from workloads.hybrid.setup import block_linears, block_params
from workloads.ops import CollectiveKind as K

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


def test_fsdp_pp_keeps_weights_for_the_iteration() -> None:
    setup, g = hybrid(FsdpPpParallel(pp=2), 8, pp=2, sequences=16, mbs=1)
    assert setup.microbatches == 4
    for program in g.programs:
        ops = collectives(program, "L")
        gathers = Counter(op.name for op in ops if op.kind is K.ALL_GATHER)
        assert gathers and set(gathers.values()) == {1}
        assert sum(op.kind is K.REDUCE_SCATTER for op in ops) == len(gathers)
