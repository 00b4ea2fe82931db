"""PyTorch FSDP as configured: collectives, their dependencies and dtypes per option,
against what torch/distributed/fsdp's hooks issue (workloads/hybrid/fsdp_runtime.py)."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic import ValidationError

from tests.strategy_helpers import SPEC, collectives, hybrid, run
from workloads.hybrid.fsdp_runtime import predivide_factor
from workloads.hybrid.params import FsdpTpParallel, ShardedParallel
from workloads.hybrid.setup import block_params, stage_param_counts
from workloads.ops import CollectiveOp, WaitOp

UNIT = block_params(SPEC, 1)


def _fsdp(gpus: int = 4, sequences: int | None = None, **kw):  # type: ignore[no-untyped-def]
    return hybrid(ShardedParallel(strategy="fsdp", **kw), gpus, sequences=sequences)


def _count(g, prefix: str) -> Counter:  # type: ignore[no-untyped-def]
    return Counter((op.kind.value, op.group, op.bytes) for op in collectives(g.programs[0], prefix))


def test_full_shard_gathers_twice_and_reduce_dtype_sets_the_bytes() -> None:
    _, bf16 = _fsdp()
    assert _count(bf16, "L1.") == {
        ("all-gather", "shard", 2 * UNIT): 2,  # forward and backward (resharded after forward)
        ("reduce-scatter", "shard", 2 * UNIT): 1,
    }
    _, fp32 = _fsdp(reduce_dtype="fp32")
    assert _count(fp32, "L1.")[("reduce-scatter", "shard", 4 * UNIT)] == 1  # fp32 doubles it
    cast = [op for op in fp32.programs[0].ops if op.name == "L1.fsdp.grad_cast"]
    # dispatched in order with the compute stream's kernels (fsdp_runtime.py's docstring)
    assert len(cast) == 1 and cast[0].bytes == (2 + 4) * UNIT and cast[0].stream == "compute"


def test_shard_grad_op_gathers_once_and_no_shard_all_reduces() -> None:
    _, zero2 = _fsdp(sharding_strategy="SHARD_GRAD_OP")
    assert _count(zero2, "L1.")[("all-gather", "shard", 2 * UNIT)] == 1
    setup, ddp = _fsdp(sharding_strategy="NO_SHARD")
    assert setup.shard == 1
    assert _count(ddp, "L1.") == {("all-reduce", "replicate", 2 * UNIT): 1}


def test_the_root_is_gathered_once_and_reduced_last() -> None:
    setup, g = _fsdp()
    counts = stage_param_counts(SPEC, setup, 0)
    root = counts["embedding"] + counts["head"]
    assert _count(g, "root.") == {
        ("all-gather", "shard", 2 * root): 1,
        ("reduce-scatter", "shard", 2 * root): 1,
    }
    names = [op.name for op in collectives(g.programs[0])]
    assert names[-1] == "root.rs_shard"  # after every block's reduction


def test_gathers_do_not_wait_for_the_compute_stream() -> None:
    """The unshard stream syncs ProcessGroupNCCL's stream with itself, not with compute:
    a block's gather depends only on the rate limiter's free event (the compute op that
    ended unit k-2) and its pre-unshard cast."""
    _, g = _fsdp()
    ops = g.programs[0].ops
    l2 = next(i for i, op in enumerate(ops) if op.name == "L2.ag_shard")
    kinds = {type(ops[d]).__name__: ops[d] for d in ops[l2].deps}
    assert set(kinds) == {"ComputeOp"}
    free = [d for d in ops[l2].deps if ops[d].stream == "compute"]
    assert len(free) == 1 and ops[free[0]].name.startswith("L0.")  # the limiter's event
    _, unlimited = _fsdp(limit_all_gathers=False)
    ops = unlimited.programs[0].ops
    l2 = next(i for i, op in enumerate(ops) if op.name == "L2.ag_shard")
    assert all(ops[d].stream != "compute" for d in ops[l2].deps)


def _backward_position(g, unit: str, before: str) -> bool:  # type: ignore[no-untyped-def]
    """Whether `unit`'s backward gather is issued before `before`'s first dW GEMM."""
    ops = g.programs[0].ops
    ag = [i for i, op in enumerate(ops) if op.name == f"{unit}.ag_shard" and op.phase == "bwd"]
    gemm = next(i for i, op in enumerate(ops) if op.name == f"{before}.mlp_down.dW")
    return bool(ag) and ag[0] < gemm


def test_backward_prefetch_modes_issue_the_next_gather_before_or_after() -> None:
    _, pre = _fsdp(backward_prefetch="BACKWARD_PRE")
    _, post = _fsdp(backward_prefetch="BACKWARD_POST")
    _, none = _fsdp(backward_prefetch="NONE")
    assert _backward_position(pre, "L2", "L3")  # before L3's gradient computation
    assert not _backward_position(post, "L2", "L3")
    assert not _backward_position(none, "L2", "L3")
    ops = post.programs[0].ops
    # BACKWARD_POST: in L3's post-backward hook, after its reshard, before its reduce-scatter
    names = [op.name for op in ops if isinstance(op, CollectiveOp)]
    assert names.index("L2.ag_shard", names.index("L3.ag_shard") + 1) < names.index("L3.rs_shard")
    # NONE: only in L2's own pre-backward hook, after L3's reduce-scatter was issued
    names = [op.name for op in none.programs[0].ops if isinstance(op, CollectiveOp)]
    assert names.index("L3.rs_shard") < names.index("L2.ag_shard", names.index("L3.rs_shard"))


def test_forward_prefetch_issues_the_next_gather_in_the_pre_forward_hook() -> None:
    _, g = _fsdp(forward_prefetch=True)
    names = [op.name for op in g.programs[0].ops if isinstance(op, CollectiveOp)]
    assert names[:3] == ["root.ag_shard", "L0.ag_shard", "L1.ag_shard"]
    first_gemm = next(i for i, op in enumerate(g.programs[0].ops) if op.name == "L0.qkv.fwd")
    l1 = next(i for i, op in enumerate(g.programs[0].ops) if op.name == "L1.ag_shard")
    assert l1 < first_gemm


def test_fsdp2_copies_and_keeps_the_last_block() -> None:
    _, g = hybrid(FsdpTpParallel(tp=1), 4)
    ops = g.programs[0].ops
    assert _count(g, "L3.")[("all-gather", "shard", 2 * UNIT)] == 1  # not resharded after forward
    assert _count(g, "L2.")[("all-gather", "shard", 2 * UNIT)] == 2
    assert _count(g, "L2.")[("reduce-scatter", "shard", 4 * UNIT)] == 1  # torchtitan: fp32
    copy_out = [op for op in ops if op.name == "L2.fsdp.all_gather_copy_out"]
    assert len(copy_out) == 2 and all(op.stream == "compute" for op in copy_out)
    assert copy_out[0].bytes == 2 * 2 * UNIT
    # before a unit's reduction the compute stream waits for the previous one
    waits = [
        op for op in ops if isinstance(op, WaitOp) and op.name == "wait:fsdp.reduce_scatter_buffer"
    ]
    assert len(waits) == 4  # L2, L1, L0, root (L3's has none before it)
    assert not any(op.name.endswith("grad_predivide") for op in ops)  # NCCL divides


def test_predivide_factor_is_fsdps() -> None:
    """_get_gradient_predivide_factor: double f while world % f == 0 and world / f > f."""
    assert [predivide_factor(w) for w in (1, 2, 4, 8, 16, 64, 6, 12)] == [1, 2, 2, 4, 4, 8, 4, 4]


def test_fsdp_options_belong_to_fsdp() -> None:
    with pytest.raises(ValidationError, match="FSDP option"):
        ShardedParallel(strategy="zero3", reduce_dtype="fp32")
    with pytest.raises(ValidationError, match="not a hybrid"):
        ShardedParallel(strategy="hsdp", sharding_strategy="FULL_SHARD")
    assert ShardedParallel(strategy="fsdp", backward_prefetch=True).backward_prefetch is True


def test_rate_limiter_and_fp32_reduce_never_speed_a_comm_bound_run_up() -> None:
    """On a slow network the limiter delays gathers (never earlier) and an fp32
    reduce-scatter moves twice the bytes: neither can make the iteration faster."""
    times = {}
    for name, kw in {
        "base": {"limit_all_gathers": False},
        "limited": {},
        "fp32": {"limit_all_gathers": False, "reduce_dtype": "fp32"},
    }.items():
        _, g = _fsdp(8, **kw)
        times[name] = run(g, bandwidth=2e8)[0].iteration_time_s
    assert times["limited"] >= times["base"] - 1e-12
    assert times["fp32"] > times["base"]


def test_pre_reduction_kernels_take_the_compute_streams_time_in_dispatch_order() -> None:
    """The GPU dispatches blocks in submission order whatever the stream: FSDP1's cast to
    reduce_dtype and pre-divide run right after the unit's last backward kernel on the
    compute stream, the reduce-scatter waits for them, and the shard-sized kernels after
    the collective stay on the post-backward stream; FSDP2's copy-in likewise."""
    _, g = _fsdp(gpus=8, reduce_dtype="fp32")
    ops = g.programs[0].ops
    names = [op.name for op in ops]
    cast, pre = names.index("L1.fsdp.grad_cast"), names.index("L1.fsdp.grad_predivide")
    assert pre == cast + 1 and ops[cast].stream == ops[pre].stream == "compute"
    assert ops[pre].bytes == 2 * 4 * UNIT  # read and write the fp32 gradient
    rs = names.index("L1.rs_shard")
    assert pre in ops[rs].deps
    assert ops[names.index("L1.fsdp.grad_postdivide")].stream == "fsdp:post_backward"
    _, g2 = hybrid(FsdpTpParallel(tp=1), 4)
    copy_in = [op for op in g2.programs[0].ops if op.name == "L2.fsdp.reduce_scatter_copy_in"]
    assert len(copy_in) == 1 and copy_in[0].stream == "compute"
