"""The transformer block as every strategy issues it: one skeleton, strategy hooks.

Why shared: the strategies of the seed papers differ in how a linear layer is split and
communicated (AxoNN's 4D layers, Megatron's column/row split, ZeRO's gathered weights,
Optimus' SUMMA steps) but not in what else a block runs. Emitting the LayerNorms,
attention, activation and residual kernels from one place keeps their sizes, names and
recompute semantics identical across strategies, which is what lets special cases be
compared exactly (AxoNN with Z only against ZeRO-3, AxoNN with Y only against Megatron
tensor parallelism).

A block is, in module order: LayerNorm, QKV, attention, attention-out, residual,
LayerNorm, MLP up, GeLU/SwiGLU, MLP down, residual. Backward runs the mirror; with full
activation checkpointing the block's forward is recomputed first (communication
included), with selective recompute only the attention kernel is.

Subclasses implement `linear_forward` / `linear_backward` (the layout type `L` is theirs)
and may override the LayerNorm hooks (Optimus adds a row all-reduce of statistics) and
`forward_successor` (which layer's weights a prefetch should fetch next).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from workloads.builder import ProgramBuilder
from workloads.models import TransformerSpec
from workloads.ops import ComputeKind as C

CAUSAL_ATTENTION_FRACTION = 0.5  # causal flash attention skips the masked half
ATTENTION_BACKWARD_FACTOR = 2.5  # flash-attention backward FLOPs / forward FLOPs
LINEAR_NAMES = ("qkv", "attn_out", "mlp_up", "mlp_down")  # module order in a block
ADAM_BYTES_PER_PARAM = 36.0  # optimizer step: bytes read + written per parameter (Adam)
SGD_BYTES_PER_PARAM = 14.0

L = TypeVar("L")


@dataclass(frozen=True)
class BlockShape:
    """Per-GPU sizes of a block's non-GEMM kernels.

    res_*: the residual stream (LayerNorms, residual adds, embedding); attn_*: the
    attention kernel (heads on this GPU, q/k/v features per GPU); act_*: the MLP
    activation (input features of the activation per GPU).
    """

    res_tokens: int
    res_width: int
    attn_tokens: int
    heads: int
    head_dim: int
    qkv_width: int
    act_tokens: int
    act_width: int
    seq_len: int
    gated: bool
    flash_attention: bool = True
    rope: bool = False  # rotary position embedding applied to q and k (Llama)

    @property
    def res_elems(self) -> int:
        return self.res_tokens * self.res_width

    @property
    def act_elems(self) -> int:
        return self.act_tokens * self.act_width

    def attention_forward_flops(self) -> float:
        return (
            4.0
            * self.attn_tokens
            * self.seq_len
            * self.heads
            * self.head_dim
            * CAUSAL_ATTENTION_FRACTION
        )

    @property
    def attention_shape(self) -> tuple[int, int, int, int]:
        return (self.attn_tokens, self.seq_len, self.heads, self.head_dim)

    @property
    def score_elems(self) -> int:
        """Elements of the s x s attention scores of all local heads (unfused attention)."""
        return self.attn_tokens * self.seq_len * self.heads


def optimizer_step(b: ProgramBuilder, params: float, optimizer: str) -> int:
    """The optimizer kernel over `params` parameters (memory-bound, fp32 state)."""
    per_param = ADAM_BYTES_PER_PARAM if optimizer == "adam" else SGD_BYTES_PER_PARAM
    return b.compute(
        "optimizer.step", C.OPTIMIZER, 12.0 * params, per_param * params, dtype_bytes=4
    )


class BlockEmitter(Generic[L]):
    """Emits transformer blocks onto a ProgramBuilder; strategies fill in the linears.

    `blocks` are the four linear layouts in module order; `logits` the output projection
    (None on pipeline stages without the head). `layer_stop` is the end (exclusive) of the
    layers this emitter's rank runs in the current chunk; `has_head` whether the head
    follows them (both steer the cross-block prefetch successor).
    """

    def __init__(
        self,
        spec: TransformerSpec,
        builder: ProgramBuilder,
        shape: BlockShape,
        blocks: Sequence[L],
        logits: L | None,
        *,
        checkpointing: bool,
        selective_recompute: bool = False,
    ):
        self.spec = spec
        self.b = builder
        self.shape = shape
        self.blocks = tuple(blocks)
        self.logits = logits
        self.checkpointing = checkpointing
        self.selective_recompute = selective_recompute
        self.db = spec.dtype_bytes
        self.layer_stop = spec.layers
        self.has_head = logits is not None

    # ------------------------------------------------------------ primitives
    def elementwise(
        self, name: str, elems: float, passes: float, flops_per_elem: float = 1.0
    ) -> None:
        """A memory-bound kernel reading/writing `passes` tensors of `elems` elements."""
        self.b.compute(name, C.ELEMENTWISE, flops_per_elem * elems, passes * elems * self.db)

    # ----------------------------------------------------------------- hooks
    def linear_forward(self, lay: L, tag: str, next_layer: tuple[L, str] | None) -> None:
        """Forward of one linear layer (communication + GEMM)."""
        raise NotImplementedError

    def linear_backward(self, lay: L, tag: str) -> None:
        """Backward of one linear layer (dI and dW GEMMs + communication)."""
        raise NotImplementedError

    def layernorm_forward(self, name: str) -> None:
        """A LayerNorm on the residual stream (Optimus adds its statistics all-reduce)."""
        self.elementwise(name, self.shape.res_elems, 2, 8)

    def layernorm_backward(self, name: str) -> None:
        self.elementwise(name, self.shape.res_elems, 4, 12)

    def forward_successor(self, layer: int) -> tuple[L, str] | None:
        """The linear whose weights follow block `layer`'s last one in module order."""
        if layer + 1 < self.layer_stop:
            return (self.blocks[0], f"L{layer + 1}.{LINEAR_NAMES[0]}")
        if self.has_head and self.logits is not None:
            return (self.logits, "logits")
        return None

    # ---------------------------------------------------------------- blocks
    def attention_forward(self, layer: int) -> None:
        """The attention of a block: one causal flash-attention kernel, or Megatron's unfused
        path (QK^T batched GEMM, fused scale-mask-softmax, dropout, PV batched GEMM; the
        full s x s scores, no causal skipping)."""
        sh = self.shape
        if not sh.flash_attention:
            self._unfused_attention(layer, backward=False)
            return
        attn_bytes = self.db * sh.attn_tokens * (sh.qkv_width + sh.heads * sh.head_dim)
        self.b.compute(
            f"L{layer}.attn.fwd",
            C.ATTENTION,
            sh.attention_forward_flops(),
            attn_bytes,
            sh.attention_shape,
        )

    def _unfused_attention(self, layer: int, backward: bool) -> None:
        sh = self.shape
        seqs = max(sh.attn_tokens // sh.seq_len, 1)
        batch = seqs * sh.heads
        s, d, e = sh.seq_len, sh.head_dim, sh.score_elems
        b = self.b
        if not backward:
            b.gemm(f"L{layer}.attn.qk", s, s, d, self.db, batch)
            self.elementwise(f"L{layer}.attn.softmax.fwd", e, 2, 5)
            self.elementwise(f"L{layer}.attn.dropout.fwd", e, 2.5, 2)
            b.gemm(f"L{layer}.attn.pv", s, d, s, self.db, batch)
            return
        b.gemm(f"L{layer}.attn.dv", s, d, s, self.db, batch)
        b.gemm(f"L{layer}.attn.dp", s, s, d, self.db, batch)
        self.elementwise(f"L{layer}.attn.dropout.bwd", e, 2.5, 2)
        self.elementwise(f"L{layer}.attn.softmax.bwd", e, 3, 5)
        b.gemm(f"L{layer}.attn.dq", s, d, s, self.db, batch)
        b.gemm(f"L{layer}.attn.dk", s, d, s, self.db, batch)

    def attention_backward(self, layer: int) -> None:
        """Flash-attention backward (it recomputes the scores itself), or the unfused path."""
        sh = self.shape
        if not sh.flash_attention:
            self._unfused_attention(layer, backward=True)
            return
        self.b.compute(
            f"L{layer}.attn.bwd",
            C.ATTENTION,
            ATTENTION_BACKWARD_FACTOR * sh.attention_forward_flops(),
            2 * self.db * sh.attn_tokens * sh.qkv_width,
            sh.attention_shape,
        )

    def rotary(self, layer: int, backward: bool) -> None:
        """Rotary embedding of q and k (Megatron-Core applies it outside the core
        attention, so selective recompute does not repeat it): one memory-bound kernel
        reading and writing q and k, a multiply-add pair per element."""
        sh = self.shape
        if not sh.rope:
            return
        q = sh.heads * sh.head_dim
        elems = sh.attn_tokens * (q + (sh.qkv_width - q) / 2)
        self.elementwise(f"L{layer}.rope.{'bwd' if backward else 'fwd'}", elems, 2, 3)

    def activation_name(self, layer: int) -> str:
        return f"L{layer}.{'swiglu' if self.shape.gated else 'gelu'}"

    def block_forward(self, layer: int, recompute: bool) -> None:
        """One block's forward; `recompute` marks the checkpointed re-run in backward
        (prefetch then stays inside the block)."""
        sh = self.shape
        qkv, out, up, down = self.blocks
        tags = [f"L{layer}.{name}" for name in LINEAR_NAMES]
        order = list(zip(self.blocks, tags, strict=True))
        nexts: list[tuple[L, str] | None] = [*order[1:], None]
        if not recompute:
            nexts[-1] = self.forward_successor(layer)
        self.layernorm_forward(f"L{layer}.ln1.fwd")
        self.linear_forward(qkv, tags[0], nexts[0])
        self.rotary(layer, backward=False)
        self.attention_forward(layer)
        self.linear_forward(out, tags[1], nexts[1])
        self.elementwise(f"L{layer}.residual1.fwd", sh.res_elems, 3)
        self.layernorm_forward(f"L{layer}.ln2.fwd")
        self.linear_forward(up, tags[2], nexts[2])
        self.elementwise(
            f"{self.activation_name(layer)}.fwd", sh.act_elems, 1.5 if sh.gated else 2, 8
        )
        self.linear_forward(down, tags[3], nexts[3])
        self.elementwise(f"L{layer}.residual2.fwd", sh.res_elems, 3)

    def block_backward(self, layer: int) -> None:
        """One block's backward, recomputing its forward first under checkpointing."""
        sh = self.shape
        qkv, out, up, down = self.blocks
        if self.checkpointing:
            self.b.phase = "recompute"
            self.block_forward(layer, recompute=True)
            self.b.phase = "bwd"
        self.elementwise(f"L{layer}.residual2.bwd", sh.res_elems, 2)
        self.linear_backward(down, f"L{layer}.mlp_down")
        self.elementwise(f"{self.activation_name(layer)}.bwd", sh.act_elems, 3, 12)
        self.linear_backward(up, f"L{layer}.mlp_up")
        self.layernorm_backward(f"L{layer}.ln2.bwd")
        self.elementwise(f"L{layer}.residual1.bwd", sh.res_elems, 2)
        self.linear_backward(out, f"L{layer}.attn_out")
        if self.selective_recompute and not self.checkpointing:
            self.b.phase = "recompute"
            self.attention_forward(layer)
            self.b.phase = "bwd"
        self.attention_backward(layer)
        self.rotary(layer, backward=True)
        self.linear_backward(qkv, f"L{layer}.qkv")
        self.layernorm_backward(f"L{layer}.ln1.bwd")
