"""Tensor-parallel communication overlap (Megatron-Core --tp-comm-overlap through
Transformer Engine's userbuffers): what each GEMM becomes, what the SM margin costs,
and that it hides the sequence-parallel collectives."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.cost.kernels import KernelModel
from simulator.cost.sm_share import sms_for_gemm
from simulator.errors import CostModelError
from tests.cli_helpers import one_line_error
from tests.strategy_helpers import hybrid
from workloads.hybrid.params import MegatronParallel
from workloads.hybrid.tp_overlap import UB_COMM_STREAM, UB_P2P_STREAM
from workloads.models import TransformerSpec
from workloads.ops import CollectiveKind, CollectiveOp, ComputeKind, ComputeOp

SPEC = TransformerSpec(name="o", layers=2, hidden=64, heads=8, seq_len=64, vocab=128)


def _ops(overlap: bool, tp: int = 4, spec: TransformerSpec = SPEC) -> dict[str, object]:
    params = MegatronParallel(tp=tp, sequence_parallel=True, tp_comm_overlap=overlap)
    _, g = hybrid(params, tp, tp=tp, spec=spec)
    return {op.name: op for op in g.programs[0].ops}


def test_sm_share_closed_form() -> None:
    assert sms_for_gemm(132, 0) == (132, 1.0)
    assert sms_for_gemm(132, 16) == (116, 116 / 132)
    with pytest.raises(CostModelError):
        sms_for_gemm(132, 132)


def test_a_large_gemm_on_fewer_sms_runs_their_share() -> None:
    """A 16384^3 GEMM launched with TE's 16-SM margin: 132/116 as long (its waves fill
    the 116 SMs as they filled 132)."""
    km = KernelModel("h100")
    s = 16384

    def t(margin: int) -> float:
        op = ComputeOp("g", ComputeKind.GEMM, 2.0 * s**3, 6.0 * s * s, shape=(s, s, s),
                       sm_margin=margin)  # fmt: skip
        return km.kernel_time_s(op)

    assert t(16) / t(0) == pytest.approx(132 / 116, rel=0.02)


def test_each_gemm_gets_te_s_method() -> None:
    """ring_exchange for QKV/MLP-up forward and attention-out/MLP-down dgrad (tp GEMM
    chunks, tp-1 exchanges on the copy-engine stream, no SM margin); pipeline for the
    row-parallel forward (4 chunks with 16 SMs left, 4 reduce-scatters); bulk for the
    column-parallel backward (both GEMMs with the margin)."""
    ops, tp, m = _ops(True), 4, 64
    ring = [ops[f"L0.qkv.fwd{i}"] for i in range(tp)]
    assert all(isinstance(op, ComputeOp) and op.shape == (m // tp, 48, 64) for op in ring)
    assert all(op.sm_margin == 0 for op in ring)  # type: ignore[attr-defined]
    ex = [ops[f"L0.qkv.fwd.ub_ag{i}"] for i in range(tp - 1)]
    assert all(isinstance(op, CollectiveOp) and op.stream == UB_P2P_STREAM for op in ex)
    assert all(op.kind is CollectiveKind.RING_EXCHANGE for op in ex)  # type: ignore[attr-defined]
    pipe = [ops[f"L0.attn_out.fwd{i}"] for i in range(4)]
    assert all(op.sm_margin == 16 for op in pipe)  # type: ignore[attr-defined]
    rs = [ops[f"L0.attn_out.ub_rs{i}.fwd"] for i in range(4)]
    assert all(isinstance(op, CollectiveOp) and op.stream == UB_COMM_STREAM for op in rs)
    assert ops["L0.qkv.dI"].sm_margin == 16 and ops["L0.qkv.dW"].sm_margin == 16  # type: ignore[attr-defined]
    assert [f"L0.mlp_down.dI{i}" in ops for i in range(tp)] == [True] * tp
    assert "L0.qkv.ag_tp.fwd" not in ops and "L0.attn_out.rs_tp.fwd" not in ops
    assert "logits.ag_tp.fwd" in ops  # Megatron's own output layer keeps NCCL


def test_overlap_moves_the_same_work() -> None:
    """The chunks add up to the unsplit GEMMs' FLOPs, and the ring moves what the
    all-gather moved: (tp-1) chunks of the tp-th of its buffer."""
    plain, over, tp = _ops(False), _ops(True), 4

    def flops(d: dict[str, object], prefix: str) -> float:
        return sum(op.flops for n, op in d.items() if isinstance(op, ComputeOp)
                   and op.kind is ComputeKind.GEMM and n.startswith(prefix))  # fmt: skip

    for prefix in ("L0.qkv", "L0.attn_out", "L0.mlp_up", "L0.mlp_down"):
        assert flops(over, prefix) == pytest.approx(flops(plain, prefix))
    ag = plain["L0.qkv.ag_tp.fwd"].bytes  # type: ignore[attr-defined]
    ring = sum(over[f"L0.qkv.fwd.ub_ag{i}"].bytes for i in range(tp - 1))  # type: ignore[attr-defined]
    assert ring == pytest.approx(ag * (tp - 1) / tp)
    rs = plain["L0.attn_out.rs_tp.fwd"].bytes  # type: ignore[attr-defined]
    assert sum(over[f"L0.attn_out.ub_rs{i}.fwd"].bytes for i in range(4)) == rs  # type: ignore[attr-defined]


def test_userbuffers_are_issued_like_kernels() -> None:
    """TE launches userbuffers transfers from C++ (no c10d work objects)."""
    km = KernelModel("h100")
    ub = CollectiveOp("x", CollectiveKind.REDUCE_SCATTER, "tp", 1.0, "x", UB_COMM_STREAM)
    nccl = CollectiveOp("y", CollectiveKind.REDUCE_SCATTER, "tp", 1.0, "y", "comm:tp")
    gemm = ComputeOp("g", ComputeKind.GEMM, 1.0, 1.0)
    assert km.issue_s(ub) == km.issue_s(gemm) < km.issue_s(nccl)


def test_overlap_needs_sequence_parallelism(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_error(
        ["simulate", "--machine", "dgx-h100", "--gpus", "8", "--model", "gpt-tiny",
         "--strategy", "megatron", "--batch-tokens", "4096", "--set", "parallel.tp=4",
         "--set", "parallel.tp_comm_overlap=true"],
        capsys,
    )  # fmt: skip
    assert "parallel.tp_comm_overlap" in line and "sequence_parallel" in line


def test_overlap_hides_the_tensor_parallel_collectives() -> None:
    """GPT-20B blocks on one DGX H100, TP 8 with sequence parallelism: the overlap hides
    most of the TP collectives and costs GEMM time (the 16 SMs left to the
    reduce-scatters, smaller chunks)."""
    from simulator.api import simulate
    from simulator.config import validate_config

    def run(overlap: bool) -> object:
        cfg = {
            "cluster": {"machine": "dgx-h100", "gpus": 8},
            "model": {"name": "gpt-20b", "layers": 2},
            "parallel": {"strategy": "megatron", "tp": 8, "sequence_parallel": True,
                         "tp_comm_overlap": overlap},
            "training": {"batch_tokens": 4 * 2048, "microbatch_sequences": 2},
        }  # fmt: skip
        return simulate(validate_config(cfg)).report

    plain, over = run(False), run(True)
    exposed = [r.comm_time_by_group_s["x"] for r in (plain, over)]  # type: ignore[attr-defined]
    gemm = [r.compute_by_kind_s["gemm"] for r in (plain, over)]  # type: ignore[attr-defined]
    assert exposed[1] < 0.5 * exposed[0]
    assert gemm[1] > gemm[0]
    assert over.iteration_time_s < plain.iteration_time_s  # type: ignore[attr-defined]


def test_overlap_with_fp8_gathers_fp8() -> None:
    """TE's all-gather buffers are FP8 under FP8 (fp8_buf), the reduce-scatters bf16."""
    fp8 = _ops(True, spec=replace(SPEC, dtype="fp8"))
    bf16 = _ops(True)
    a, b = fp8["L0.qkv.fwd.ub_ag0"], bf16["L0.qkv.fwd.ub_ag0"]
    assert a.bytes == b.bytes / 2  # type: ignore[attr-defined]
    assert fp8["L0.attn_out.ub_rs0.fwd"].bytes == bf16["L0.attn_out.ub_rs0.fwd"].bytes  # type: ignore[attr-defined]


def test_ring_exchange_reduce_scatter() -> None:
    """TE's split_overlap_rs_p2p (NVIDIA's tuned H100 configs): tp GEMM chunks, tp-1
    sends of one chunk each (the last chunk is the rank's own), a sum of the partials;
    without set_sm_margin the bulk GEMMs keep every SM."""
    params = MegatronParallel(tp=4, sequence_parallel=True, tp_comm_overlap=True,
                              tp_comm_overlap_rs="ring_exchange",
                              tp_comm_overlap_sm_margin=False)  # fmt: skip
    _, g = hybrid(params, 4, tp=4, spec=SPEC)
    ops = {op.name: op for op in g.programs[0].ops}
    sends = [ops[f"L0.attn_out.ub_rs{i}.fwd"] for i in range(3)]
    assert all(op.kind is CollectiveKind.RING_EXCHANGE for op in sends)  # type: ignore[attr-defined]
    plain = _ops(False)["L0.attn_out.rs_tp.fwd"].bytes  # type: ignore[attr-defined]
    assert sum(op.bytes for op in sends) == pytest.approx(plain * 3 / 4)  # type: ignore[attr-defined]
    assert "L0.attn_out.ub_rs.reduce" in ops and "L0.attn_out.fwd3" in ops
    assert ops["L0.qkv.dI"].sm_margin == 0  # type: ignore[attr-defined]
