"""Megatron-LM: tensor-parallel collectives, pipeline schedules and bubble, data-parallel
buckets, recompute modes, and full vs symmetric engine modes on pipelines."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from simulator.outputs.analysis import with_skipped_periods
from simulator.outputs.report import rank_warps
from tests.strategy_helpers import SPEC, BlockOnlyKernels, collectives, hybrid, run
from workloads.hybrid.params import FsdpPpParallel, MegatronParallel
from workloads.hybrid.schedule import in_flight, interleaved, one_f_one_b
from workloads.hybrid.setup import stage_param_counts
from workloads.ops import CollectiveKind as K
from workloads.ops import ComputeOp, RecvOp, SendOp

DB = SPEC.dtype_bytes
M = SPEC.seq_len  # tokens of a one-sequence microbatch
H = SPEC.hidden


def _layer0(graph, stage: int = 0) -> Counter:
    ops = collectives(graph.programs[stage], "L0.")
    return Counter((op.kind.value, op.group, op.bytes, op.phase) for op in ops)


def test_tensor_parallel_four_all_reduces_of_bsh_per_layer() -> None:
    _, g = hybrid(MegatronParallel(tp=4, recompute="none"), 4, tp=4)
    assert _layer0(g) == Counter(
        {
            ("all-reduce", "tp", M * H * DB, "fwd"): 2,  # attention-out and MLP-down outputs
            ("all-reduce", "tp", M * H * DB, "bwd"): 2,  # QKV and MLP-up input gradients
        }
    )
    # full recompute repeats the two forward all-reduces
    _, g = hybrid(MegatronParallel(tp=4, recompute="full"), 4, tp=4)
    assert _layer0(g)[("all-reduce", "tp", M * H * DB, "recompute")] == 2


def test_sequence_parallel_turns_all_reduces_into_gathers_and_scatters() -> None:
    _, g = hybrid(MegatronParallel(tp=4, recompute="none", sequence_parallel=True), 4, tp=4)
    c = _layer0(g)
    assert not any(k[0] == "all-reduce" for k in c)
    assert c[("all-gather", "tp", M * H * DB, "fwd")] == 2  # before QKV and MLP-up
    assert c[("reduce-scatter", "tp", M * H * DB, "fwd")] == 2  # after attn-out, MLP-down
    assert c[("all-gather", "tp", M * H * DB, "bwd")] == 4  # dO of row layers, inputs again
    assert c[("reduce-scatter", "tp", M * H * DB, "bwd")] == 2  # dI of column layers


@pytest.mark.parametrize("p,m", [(2, 1), (3, 5), (4, 8), (4, 2)])
def test_one_f_one_b_order(p: int, m: int) -> None:
    for s in range(p):
        order = one_f_one_b(p, m, s)
        warmup = min(p - s - 1, m)
        assert [x.kind for x in order[:warmup]] == ["F"] * warmup
        assert sorted((x.kind, x.mb) for x in order) == sorted(
            [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
        )
        assert in_flight(p, m, 1, s) == min(p - s, m)


def test_interleaved_order_covers_every_chunk_once() -> None:
    p, m, v = 4, 8, 2
    for s in range(p):
        order = interleaved(p, m, v, s)
        fwd = [(x.chunk, x.mb) for x in order if x.kind == "F"]
        bwd = [(x.chunk, x.mb) for x in order if x.kind == "B"]
        assert sorted(fwd) == sorted(bwd) == [(c, i) for c in range(v) for i in range(m)]
        assert len(order) - sum(x.steady for x in order) == 2 * min(
            (p - s - 1) * 2 + (v - 1) * p, m * v
        )


@pytest.mark.parametrize("p,v,m", [(2, 1, 4), (4, 1, 8), (4, 1, 1), (4, 2, 8), (2, 2, 4)])
def test_pipeline_bubble_without_communication(p: int, v: int, m: int) -> None:
    """Infinite bandwidth, zero latency, identical stages: idle = (p-1)/(v*m+p-1)."""
    spec = replace(SPEC, layers=8)
    params = MegatronParallel(tp=1, pp=p, virtual_stages=v)
    _, g = hybrid(params, p, pp=p, sequences=m, spec=spec)
    res, _ = run(
        g,
        mode="full",
        network="alpha-beta",
        bandwidth=1e30,
        latency=0.0,
        kernels=BlockOnlyKernels(),
    )
    # rank 0's records may stand for skipped periods of a compressed pipeline
    busy = with_skipped_periods(res.timeline.rank(0), rank_warps(res.timeline, 0)).compute_s
    idle = 1 - busy / res.iteration_time_s
    assert idle == pytest.approx((p - 1) / (v * m + p - 1), rel=1e-9)
    assert spec.layers % (p * v) == 0


def test_pipeline_point_to_point_activations() -> None:
    setup, g = hybrid(MegatronParallel(tp=2, pp=2), 8, tp=2, pp=2, sequences=4)
    first, last = g.programs
    size = M * H * DB
    sends0 = [op for op in first.ops if isinstance(op, SendOp)]
    recvs0 = [op for op in first.ops if isinstance(op, RecvOp)]
    assert {(op.tag, op.peer, op.bytes) for op in sends0} == {("act", 1, size)}
    assert {(op.tag, op.peer, op.bytes) for op in recvs0} == {("grad", 1, size)}
    assert len(sends0) == len(recvs0) == setup.microbatches
    assert not any(op.name == "embedding.fwd" for op in last.ops)
    assert [op.group for op in collectives(last, "embedding")] == ["embed"]  # tied weights
    assert g.rank_class.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


@pytest.mark.parametrize(
    "params,tp,pp",
    [
        (MegatronParallel(tp=2, pp=2), 2, 2),
        (
            MegatronParallel(
                tp=2, pp=2, virtual_stages=2, sequence_parallel=True, distributed_optimizer=True
            ),
            2,
            2,
        ),
        (FsdpPpParallel(pp=2), 1, 2),
    ],
)
def test_full_and_symmetric_modes_agree_on_pipelines(params, tp: int, pp: int) -> None:  # type: ignore[no-untyped-def]
    _, g = hybrid(params, 16, tp=tp, pp=pp, sequences=16, mbs=2)
    full, _ = run(g, mode="full", gpus_per_node=8)
    sym, _ = run(g, mode="symmetric", gpus_per_node=8)
    assert sym.iteration_time_s == full.iteration_time_s
    for r in (0, 15):
        assert sym.timeline.rank(r).end_s.max() == full.timeline.rank(r).end_s.max()


def test_ddp_all_reduces_every_gradient_once_in_buckets() -> None:
    setup, g = hybrid(
        MegatronParallel(tp=1, bucket_size=10_000), 4, sequences=8, mbs=1, checkpointing=False
    )
    params = stage_param_counts(SPEC, setup, 0)["total"]
    ars = [op for op in collectives(g.programs[0]) if op.group == "dp"]
    assert {op.kind for op in ars} == {K.ALL_REDUCE}
    assert len(ars) > 1  # several buckets
    assert sum(op.bytes for op in ars) == params * 4  # fp32 main gradients
    assert all(op.phase == "bwd" for op in ars)  # launched inside the last backward


def test_distributed_optimizer_reduce_scatters_and_gathers() -> None:
    setup, g = hybrid(
        MegatronParallel(tp=1, distributed_optimizer=True, overlap_param_gather=False), 4
    )
    params = stage_param_counts(SPEC, setup, 0)["total"]
    ops = [op for op in collectives(g.programs[0]) if op.group == "dp"]
    assert sum(op.bytes for op in ops if op.kind is K.REDUCE_SCATTER) == params * 4
    assert sum(op.bytes for op in ops if op.kind is K.ALL_GATHER) == params * DB
    assert all(op.phase == "optimizer" for op in ops if op.kind is K.ALL_GATHER)


@pytest.mark.parametrize("mode,extra_attention", [("none", 0), ("selective", 1), ("full", 1)])
def test_recompute_modes(mode: str, extra_attention: int) -> None:
    _, g = hybrid(MegatronParallel(tp=2, recompute=mode), 2, tp=2)  # type: ignore[arg-type]
    ops = [op for op in g.programs[0].ops if isinstance(op, ComputeOp)]
    attn_fwd = [op for op in ops if op.name == "L0.attn.fwd"]
    assert len(attn_fwd) == 1 + extra_attention
    gemms = [op for op in ops if op.name == "L0.qkv.fwd"]
    assert len(gemms) == (2 if mode == "full" else 1)
