"""The block's non-GEMM kernels come from a real torch trace, and the skeleton emits them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from validation.references.block_kernels import inventory
from workloads.builder import ProgramBuilder
from workloads.models import model_preset
from workloads.ops import ComputeKind, ComputeOp
from workloads.transformer import (
    OPTIMIZER_KERNELS,
    BlockEmitter,
    BlockShape,
    block_kernels,
    optimizer_step,
)

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "traces" / "torch4d_block" / "rank0.trace.json.gz"
COMMITTED = ROOT / "workloads" / "data" / "block_kernels.yaml"


def test_committed_inventory_is_what_the_trace_gives() -> None:
    assert inventory(FIXTURE) == yaml.safe_load(COMMITTED.read_text())


def test_inventory_counts_the_eager_block() -> None:
    rows = block_kernels()
    fwd = [(r.range, r.slot, r.role) for r in rows if r.phase == "fwd"]
    assert fwd == [
        ("attention", 0, "norm"), ("attention", 1, "bias"), ("attention", 1, "attention"),
        ("attention", 2, "bias"), ("attention", 2, "residual"), ("mlp", 0, "norm"),
        ("mlp", 1, "bias"), ("mlp", 1, "activation"), ("mlp", 2, "bias"), ("mlp", 2, "residual"),
    ]  # fmt: skip
    bwd = [r.role for r in rows if r.phase == "bwd"]
    assert bwd.count("bias") == 4  # one gradient sum per linear layer's bias
    assert bwd.count("norm") == 2 and bwd.count("attention") == 1
    # the GeLU reads and writes the MLP activation; the residual adds two streams into one
    gelu = next(r for r in rows if r.role == "activation" and r.phase == "fwd")
    assert (gelu.read, gelu.write) == (("T*4h",), ("T*4h",))


class _Emitter(BlockEmitter[None]):
    def linear_forward(self, lay: None, tag: str, next_layer: tuple[None, str] | None) -> None:
        self.b.gemm(f"{tag}.fwd", 8, 8, 8)

    def linear_backward(self, lay: None, tag: str) -> None:
        self.b.gemm(f"{tag}.dI", 8, 8, 8)
        self.b.gemm(f"{tag}.dW", 8, 8, 8)


def _ops(checkpointing: bool) -> list[ComputeOp]:
    spec = model_preset("gpt-tiny")
    shape = BlockShape(
        res_tokens=64, res_width=spec.hidden, attn_tokens=64, heads=spec.heads,
        head_dim=spec.head_dim, qkv_width=spec.qkv_out, act_tokens=64,
        act_width=spec.ffn, seq_len=32, gated=False,
    )  # fmt: skip
    b = ProgramBuilder("t")
    e = _Emitter(spec, b, shape, [None] * 4, None, checkpointing=checkpointing)
    b.phase = "fwd"
    e.block_forward(0, recompute=False)
    b.phase = "bwd"
    e.block_backward(0)
    return [op for op in b.build().ops if isinstance(op, ComputeOp)]


def test_skeleton_emits_every_inventory_kernel_once_per_pass() -> None:
    ops = _ops(checkpointing=False)
    memory = [o for o in ops if o.kind is ComputeKind.ELEMENTWISE]
    attention = [o for o in ops if o.kind is ComputeKind.ATTENTION]
    rows = [r for r in block_kernels() if r.role != "attention"]
    assert len(memory) == len(rows) and len(attention) == 2
    # bytes follow the tensors: the forward GeLU moves 2 x tokens x ffn bf16 elements
    gelu = next(o for o in memory if o.name == "L0.gelu.fwd")
    assert gelu.bytes == 2 * 64 * model_preset("gpt-tiny").ffn * 2
    # checkpointing recomputes the forward kernels once more
    assert len(_ops(checkpointing=True)) == len(ops) + sum(1 for o in ops if o.phase == "fwd")


def test_adam_with_master_weights_is_the_megatron_step() -> None:
    b = ProgramBuilder("t")
    b.phase = "opt"
    optimizer_step(b, 1e6, "adam")
    ops = [op for op in b.build().ops if isinstance(op, ComputeOp)]
    assert [o.name for o in ops] == [f"optimizer.{k}" for k, _, _ in OPTIMIZER_KERNELS]
    assert sum(o.bytes for o in ops) == pytest.approx(50e6)  # 4 + 8 + 28 + 6 + 4 B per param
    assert all(o.kind is ComputeKind.OPTIMIZER for o in ops)
    plain = ProgramBuilder("u")
    optimizer_step(plain, 1e6, "adam", master_weights=False)
    (op,) = [o for o in plain.build().ops if isinstance(o, ComputeOp)]
    assert op.bytes == pytest.approx(36e6)  # torch4d's eager Adam on its own parameters
