"""DeepSpeed as configured: the optimizer wrapper the engine picks, ZeRO 0-2's reductions,
ZeRO-3's coordinator plan, the PipelineEngine's schedule, and their memory."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from pydantic import ValidationError

from tests.strategy_helpers import SPEC, collectives, hybrid, run
from workloads.errors import WorkloadError
from workloads.hybrid.deepspeed_params import DeepSpeedParallel
from workloads.hybrid.deepspeed_pipe import train_schedule
from workloads.hybrid.framework_memory import deepspeed_states
from workloads.hybrid.resolve_frameworks import optimizer_path
from workloads.hybrid.schedule import one_f_one_b
from workloads.hybrid.setup import stage_param_counts
from workloads.hybrid.zero3_plan import Param, Use, plan_zero3
from workloads.hybrid.zero3_runtime import ALLGATHER_STREAM, zero3_model, zero3_plan
from workloads.ops import CollectiveKind as K
from workloads.ops import WaitOp


def _ds(gpus: int = 4, sequences: int | None = None, **kw):  # type: ignore[no-untyped-def]
    return hybrid(DeepSpeedParallel(**kw), gpus, sequences=sequences, pp=kw.get("pp") or 1)


@pytest.mark.parametrize(
    ("stage", "dtype", "accum", "path", "accum_bytes"),
    [
        (0, "bf16", None, "bf16_optimizer", 4),  # bf16 without ZeRO accumulates in fp32
        (1, "bf16", None, "zero", 2),  # with ZeRO: the model dtype
        (1, "bf16", "fp32", "bf16_optimizer", 4),  # BLOOM's and the path
        (2, "bf16", "fp32", "zero", 4),
        (0, "fp16", None, "fp16_optimizer", 2),
        (3, "bf16", None, "zero", 2),
    ],
)
def test_the_engines_optimizer_wrapper(stage, dtype, accum, path, accum_bytes) -> None:  # type: ignore[no-untyped-def]
    params = DeepSpeedParallel(zero_stage=stage, grad_accum_dtype=accum)
    assert optimizer_path(params, dtype) == (path, accum_bytes)


def test_bf16_without_zero_needs_fp32_accumulation() -> None:
    with pytest.raises(WorkloadError, match="grad_accum_dtype fp32"):
        optimizer_path(DeepSpeedParallel(zero_stage=0, grad_accum_dtype="bf16"), "bf16")


def test_bf16_optimizer_reduces_once_after_the_backward_then_gathers() -> None:
    setup, g = _ds(zero_stage=0, sequences=12)  # 3 microbatches per rank
    total = stage_param_counts(SPEC, setup, 0)["total"]
    c = collectives(g.programs[0])
    ar = [op for op in c if op.kind is K.ALL_REDUCE and op.group == "dp"]
    assert [(op.bytes, op.phase) for op in ar] == [(2 * total, "grad-sync")] or [
        op.bytes for op in ar
    ] == [2 * total]  # the fp32 buffer cast to bf16 (communication_data_type)
    ag = [op for op in c if op.kind is K.ALL_GATHER]
    assert [op.bytes for op in ag] == [2 * total]  # update_lp_params
    acc = [op for op in g.programs[0].ops if op.name.endswith("bf16opt.update_hp_grads")]
    assert len(acc) == 3  # every microbatch (the middle one standing for itself here)
    fp32, _ = _ds(zero_stage=0, communication_data_type="fp32")
    assert deepspeed_states(SPEC, fp32, fp32.deepspeed, 0).gradients == pytest.approx(
        (2 + 4) * total
    )  # bf16 gradients and the whole model's fp32 buffer


def test_zero_1_and_2_all_reduce_their_buckets() -> None:
    """DeepSpeed's stage 1/2 'reduce-scatter' is an all-reduce of each bucket."""
    setup, one = _ds(zero_stage=1, sequences=8, reduce_bucket_size=30_000)
    total = stage_param_counts(SPEC, setup, 0)["total"]
    ar = [op for op in collectives(one.programs[0]) if op.kind is K.ALL_REDUCE]
    assert sum(op.bytes for op in ar) == pytest.approx(2 * total)
    assert all(op.bytes <= 2 * 30_000 or op.bytes == 2 * max(setup_units(setup)) for op in ar)
    _, two = _ds(zero_stage=2, sequences=8, reduce_bucket_size=30_000)
    ar2 = [op for op in collectives(two.programs[0]) if op.kind is K.ALL_REDUCE]
    assert sum(op.bytes for op in ar2) == pytest.approx(2 * 2 * total)  # both microbatches


def setup_units(setup):  # type: ignore[no-untyped-def]
    counts = stage_param_counts(SPEC, setup, 0)
    from workloads.hybrid.setup import block_params

    return [counts["head"], block_params(SPEC, 1), counts["embedding"]]


def _toy(threshold: int = 0) -> tuple[dict[str, tuple[Param, ...]], list[Use]]:
    mods = {f"m{i}": (Param(f"w{i}", 10.0, threshold >= 10),) for i in range(4)}
    fwd = [Use(f"m{i}", False) for i in range(4)]
    # a checkpointed step: recompute then backward per module, in reverse
    bwd: list[Use] = []
    for i in reversed(range(4)):
        bwd += [Use(f"m{i}", True), Use(f"m{i}", True)]
    return mods, fwd + bwd


def test_reuse_distance_keeps_a_recomputed_module_for_its_backward() -> None:
    mods, trace = _toy()
    kept = plan_zero3(mods, trace, prefetch_bucket=0, max_live=1e9, max_reuse_distance=1e9)
    gathers = sum(1 for s in kept.steps if s.fetch)
    assert gathers == 4  # every module stays gathered (the whole model is within reach)
    fresh = plan_zero3(mods, trace, prefetch_bucket=0, max_live=1e9, max_reuse_distance=0)
    assert sum(1 for s in fresh.steps if s.fetch) == 4 + 8  # forward, recompute, backward
    assert fresh.peak_available == 10.0 and kept.peak_available == 40.0


def test_prefetch_bucket_and_persistence() -> None:
    mods, trace = _toy()
    plan = plan_zero3(mods, trace, prefetch_bucket=15, max_live=1e9, max_reuse_distance=0)
    # at m0: w1 and w2 (until >= 15 elements); at m1: w3, then the queue's next entries
    # are in flight or available and are popped without a fetch, down to w0's backward use
    # (released after m0 with no reuse distance), which is prefetched that early
    assert [[p.name for p in s.prefetch] for s in plan.steps[:3]] == [
        ["w1", "w2"],
        ["w3", "w0"],
        [],
    ]
    assert plan.steps[0].fetch == mods["m0"]
    persistent, _ = _toy(threshold=10)
    none = plan_zero3(persistent, trace, prefetch_bucket=15, max_live=1e9, max_reuse_distance=0)
    assert not any(s.fetch or s.prefetch for s in none.steps)


def test_zero3_gathers_without_compute_dependencies_and_reduce_scatters_buckets() -> None:
    setup, g = _ds(zero_stage=3, stage3_param_persistence_threshold=100, reduce_bucket_size=10**9)
    ops = g.programs[0].ops
    ags = [
        i for i, op in enumerate(ops) if op.name.endswith(".ag_shard") and "persist" not in op.name
    ]
    # the allgather stream waits on nothing: a gather depends at most on the allgather
    # stream's own copy of a coalesced call's shards, which depends on nothing
    assert ags and all(
        ops[d].stream == ALLGATHER_STREAM and not ops[d].deps for i in ags for d in ops[i].deps
    )
    rs = [op for op in collectives(g.programs[0]) if op.kind is K.REDUCE_SCATTER]
    total = stage_param_counts(SPEC, setup, 0)["total"]
    assert len(rs) == 1 and rs[0].bytes == pytest.approx(2 * total)  # one bucket of all
    persist = [op for op in collectives(g.programs[0]) if "persist" in op.name]
    m = zero3_model(SPEC, setup, 100)
    n_persist = len(
        {p.name for ps in (*m.modules.values(), *m.norms.values()) for p in ps if p.persistent}
    )
    assert len(persist) == n_persist  # _post_step: one all-gather per persistent parameter
    plan = zero3_plan(SPEC, setup, setup.deepspeed)
    st = deepspeed_states(SPEC, setup, setup.deepspeed, 0)
    assert st.gathered_weights == 2 * plan.peak_available


def test_zeropp_options_compose_with_the_coordinator() -> None:
    _, g = hybrid(
        DeepSpeedParallel(
            zero_stage=3,
            zero_quantized_weights=True,
            zero_hpz_partition_size=8,
            stage3_param_persistence_threshold=100,
            stage3_max_reuse_distance=0,
        ),
        16,
        gpus_per_node=8,
    )
    gathers = [
        op
        for op in collectives(g.programs[0])
        if ".z3g" in op.name and op.kind is K.ALL_GATHER and not op.name.endswith(".scales")
    ]
    groups = Counter(op.group for op in gathers)
    # the first forward reads the primary shards (global), every later gather the hpZ
    # partition inside the node
    assert groups["shard"] >= 1 and groups["znode"] > groups["shard"]
    scales = [
        op for op in collectives(g.programs[0]) if ".z3g" in op.name and op.name.endswith(".scales")
    ]
    assert len(scales) == len(gathers)  # qwZ: int8 data then its fp32 scales
    with pytest.raises(WorkloadError, match="zero_hpz_partition_size=4"):
        hybrid(DeepSpeedParallel(zero_stage=3, zero_hpz_partition_size=4), 16, gpus_per_node=8)


def test_options_are_checked_as_deepspeed_checks_them() -> None:
    with pytest.raises(ValidationError, match="PipelineEngine"):
        DeepSpeedParallel(zero_stage=2, pp=2)
    with pytest.raises(ValidationError, match="need zero_stage 3"):
        DeepSpeedParallel(zero_stage=1, zero_quantized_weights=True)
    assert DeepSpeedParallel(zero_stage=3).overlap and not DeepSpeedParallel(zero_stage=1).overlap


@pytest.mark.parametrize("p", [2, 3, 5])
@pytest.mark.parametrize("m", [1, 2, 4, 7])
def test_train_schedule_runs_1f1b_order_in_lock_step(p: int, m: int) -> None:
    """TrainSchedule's order of passes is Megatron's 1F1B; a send at step t meets its
    receive at the neighbour's step t."""
    steps = {s: train_schedule(p, m, s) for s in range(p)}
    for s in range(p):
        order = [(st.kind, st.mb) for st in steps[s] if st.kind]
        assert order == [(ps.kind, ps.mb) for ps in one_f_one_b(p, m, s)]
    for s in range(p - 1):
        for t, (a, b) in enumerate(zip(steps[s], steps[s + 1], strict=True)):
            assert a.send_act == b.recv_act, (s, t)
            assert b.send_grad == a.recv_grad, (s, t)


def test_pipeline_engine_blocks_on_every_transfer_and_finishes() -> None:
    _, g = _ds(8, sequences=8, zero_stage=1, pp=2)
    for prog in g.programs:
        ops = prog.ops
        sends = [i for i, op in enumerate(ops) if op.name in ("send.act", "send.grad")]
        assert sends and all(
            isinstance(ops[i + 1], WaitOp) and ops[i + 1].target == i for i in sends
        )
    res, _ = run(g)
    assert res.iteration_time_s > 0


def test_zero_stage_memory() -> None:
    one, _ = _ds(zero_stage=1)
    two, _ = _ds(zero_stage=2)
    three, _ = _ds(zero_stage=3)
    total = stage_param_counts(SPEC, one, 0)["total"]
    m1 = deepspeed_states(SPEC, one, one.deepspeed, 0)
    m2 = deepspeed_states(SPEC, two, two.deepspeed, 0)
    m3 = deepspeed_states(SPEC, three, replace(three.deepspeed, persistence_threshold_elems=0), 0)
    assert m1.optimizer == pytest.approx(12 * total / 4)  # fp32 master + Adam, partitioned
    assert m1.gradients - m2.gradients == pytest.approx(2 * total * (1 - 1 / 4))
    assert m3.weights == pytest.approx(2 * total / 4)
