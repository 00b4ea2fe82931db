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
included), with selective recompute only the attention kernel is. A parallel block
(GPT-J, GPT-NeoX, Falcon: x + attn(ln1(x)) + mlp(ln2(x))) issues the same kernels in
the same order, without the MLP's norm when its branches share one; the strategy
decides what its independence buys (Megatron-style TP: one reduction for both
branches, workloads/hybrid/program.py). ALiBi adds its bias inside the attention
kernel (no kernel of its own), rotary positions add the rope kernels.

The non-GEMM kernels are the ones a real torch block launches: `data/block_kernels.yaml`
lists them in launch order, counted from a Kineto trace of our torch implementation of
one block (validation/references/block_kernels.py; eager PyTorch: the LayerNorm, bias adds,
attention, GeLU, residual adds forward; the bias-gradient sums, GeLU backward, LayerNorm
backwards, gradient accumulation and the copies that bring q, k, v gradients back to the
QKV layout backward), each with the tensors it reads and writes in the block's sizes.
The emitter places them between the linear layers where the trace had them and prices
them by their bytes (memory-bound).

Subclasses implement `linear_forward` / `linear_backward` (the layout type `L` is theirs)
and may override the LayerNorm hooks (Optimus adds a row all-reduce of statistics) and
`forward_successor` (which layer's weights a prefetch should fetch next).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Generic, TypeVar

import yaml

from workloads.builder import ProgramBuilder
from workloads.models import TransformerSpec
from workloads.ops import ComputeKind as C

CAUSAL_ATTENTION_FRACTION = 0.5  # causal flash attention skips the masked half
ATTENTION_BACKWARD_FACTOR = 2.5  # flash-attention backward FLOPs / forward FLOPs
LINEAR_NAMES = ("qkv", "attn_out", "mlp_up", "mlp_down")  # module order in a block
ADAM_BYTES_PER_PARAM = 36.0  # optimizer step: bytes read + written per parameter (Adam)
SGD_BYTES_PER_PARAM = 14.0
RANGE_LINEARS = {"attention": ("qkv", "attn_out"), "mlp": ("mlp_up", "mlp_down")}
RANGE_NORMS = {"attention": "ln1", "mlp": "ln2"}
ROLE_FLOPS = {"norm": (8.0, 12.0), "activation": (8.0, 12.0)}
"""FLOPs per element read (forward, backward) of a kernel role; 1 for the others. Only the
vector roofline sees them: every such kernel is memory-bound on the GPUs modelled."""


@dataclass(frozen=True)
class KernelRow:
    """One non-GEMM kernel of a block (a row of data/block_kernels.yaml).

    `slot` is where it runs in its range (attention or MLP): 0 before the range's first
    linear layer, 1 after it, 2 after the second (backward: the mirror). `read` and
    `write` name the tensors it moves in the block's sizes (T*h, T*3h, T*4h, h, 3h, 4h, T,
    T*heads; ':f32' for fp32 tensors).
    """

    phase: str
    range: str
    slot: int
    op: str
    role: str
    read: tuple[str, ...]
    write: tuple[str, ...]


@cache
def block_kernels() -> tuple[KernelRow, ...]:
    """The block's non-GEMM kernels in launch order (data/block_kernels.yaml)."""
    text = resources.files("workloads").joinpath("data/block_kernels.yaml").read_text()
    return tuple(
        KernelRow(
            str(r["phase"]), str(r["range"]), int(r["slot"]), str(r["op"]), str(r["role"]),
            tuple(str(x) for x in r["read"]), tuple(str(x) for x in r["write"]),
        )
        # libyaml's parser where PyYAML has it, as topologies.yaml_loader.PACKAGED_LOADER
        for r in yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["rows"]
    )  # fmt: skip


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

    def elems(self, symbol: str, attention: bool = False) -> int:
        """Elements on this GPU of one of block_kernels.yaml's tensor sizes; `attention`:
        the tensor sits between QKV and attention-out (heads x head_dim wide)."""
        hd = self.heads * self.head_dim
        table = {
            "T*h": self.attn_tokens * hd if attention else self.res_elems,
            "T*3h": self.attn_tokens * self.qkv_width,
            "T*4h": self.act_elems,
            "h": hd if attention else self.res_width,
            "3h": self.qkv_width,
            "4h": self.act_width,
            "T": self.res_tokens,
            "T*heads": self.attn_tokens * self.heads,
        }
        return table[symbol]


OPTIMIZER_KERNELS: tuple[tuple[str, float, float], ...] = (
    ("grad_norm", 4.0, 2.0),
    ("clip_grad", 8.0, 1.0),
    ("adam", 28.0, 12.0),
    ("param_copy", 6.0, 0.0),
    ("zero_grad", 4.0, 0.0),
)
"""The step of Adam with fp32 master weights, as Megatron-LM (and Megatron-AxoNN, which
the AxoNN paper's runs used: --bf16 --clip-grad 1.0) runs it, per parameter: (kernel,
bytes, FLOPs). Sources, megatron/optimizer/ (Float16OptimizerWithFloat16Params,
clip_grads.py): bf16 training keeps fp32 main gradients (accumulate_allreduce_grads_in_fp32
is forced on for bf16), so the step reads them directly; clip_grad_norm_fp32 computes the
norm with apex multi_tensor_l2norm (read 4 B) and, when the norm exceeds max_norm,
rescales with multi_tensor_scale (read and write 4 B); apex FusedAdam's multi_tensor_adam
reads the fp32 parameter, gradient and both moments and writes the parameter and moments
(7 x 4 B); _copy_main_params_to_model_params writes the bf16 model copy (read 4, write
2 B); the next step zeroes the fp32 gradient buffer (write 4 B). Memory-bound on every GPU
modelled (Adam's ~12 FLOPs per 28 B)."""


def optimizer_step(
    b: ProgramBuilder, params: float, optimizer: str, *, master_weights: bool = True
) -> int:
    """The optimizer step over `params` parameters (memory-bound kernels, fp32 state).

    `master_weights` (default, bf16/fp16 training as the strategies model it): Adam's
    OPTIMIZER_KERNELS (gradient norm and clipping, the update, the bf16 copy, zeroing the
    gradients) or SGD's update alone. Without master weights (the parameters are the
    optimizer's, as in validation/torch4d's runs): one kernel moving ADAM_BYTES_PER_PARAM
    (or SGD's) per parameter. Returns the last kernel's index.
    """
    if not master_weights or optimizer != "adam":
        per_param = ADAM_BYTES_PER_PARAM if optimizer == "adam" else SGD_BYTES_PER_PARAM
        return b.compute(
            "optimizer.step", C.OPTIMIZER, 12.0 * params, per_param * params, dtype_bytes=4
        )
    last = -1
    for name, nbytes, flops in OPTIMIZER_KERNELS:
        last = b.compute(
            f"optimizer.{name}", C.OPTIMIZER, flops * params, nbytes * params, dtype_bytes=4
        )
    return last


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

    def kernel(self, name: str, row: KernelRow, attention: bool = False) -> None:
        """One memory-bound kernel of the inventory: its tensors' bytes on this GPU."""
        sh, db = self.shape, self.db
        gated_out = 0.5 if row.role == "activation" and row.phase == "fwd" and sh.gated else 1.0

        def size(names: tuple[str, ...], scale: float = 1.0) -> tuple[float, float]:
            elems = nbytes = 0.0
            for t in names:
                symbol, _, dtype = t.partition(":")
                n = sh.elems(symbol, attention) * scale
                elems += n
                nbytes += n * (4 if dtype == "f32" else db)
            return elems, nbytes

        read_elems, read_bytes = size(row.read)
        _, write_bytes = size(row.write, gated_out)
        per = ROLE_FLOPS.get(row.role, (1.0, 1.0))[0 if row.phase == "fwd" else 1]
        self.b.compute(name, C.ELEMENTWISE, per * read_elems, read_bytes + write_bytes)

    def _norm_row(self, phase: str) -> KernelRow:
        return next(r for r in block_kernels() if r.role == "norm" and r.phase == phase)

    def layernorm_forward(self, name: str) -> None:
        """A LayerNorm on the residual stream, as the block inventory's norm kernel (Optimus
        adds its statistics all-reduce)."""
        self.kernel(name, self._norm_row("fwd"))

    def layernorm_backward(self, name: str) -> None:
        self.kernel(name, self._norm_row("bwd"))

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

    def _kernel_name(self, layer: int, row: KernelRow, k: int) -> str:
        anchor = RANGE_NORMS[row.range] if row.slot == 0 else RANGE_LINEARS[row.range][row.slot - 1]
        if row.role == "residual":
            return f"L{layer}.residual{1 if row.range == 'attention' else 2}.{row.phase}"
        if row.role == "activation":
            return f"{self.activation_name(layer)}.{row.phase}"
        return f"L{layer}.{anchor}.{row.role}{'' if k == 0 else k}.{row.phase}"

    def _range_has_bias(self, rng: str) -> bool:
        """Whether the range's linears add biases (GPT-J: the MLP's only)."""
        return self.spec.linear_has_bias(RANGE_LINEARS[rng][0])

    def emit_slot(self, layer: int, phase: str, rng: str, slot: int) -> None:
        """The inventory's kernels of one slot, in launch order (hooks for norms and the
        attention kernel, which strategies may extend)."""
        seen: dict[str, int] = {}
        for row in block_kernels():
            if (row.phase, row.range, row.slot) != (phase, rng, slot):
                continue
            if row.role == "bias" and not self._range_has_bias(rng):
                continue  # Llama-style linears have no biases to add or reduce
            if row.role == "norm" and rng == "mlp" and self.spec.shared_norm:
                continue  # a parallel block's branches share the attention's norm
            name = self._kernel_name(layer, row, 0)
            k = seen[name] = seen.get(name, -1) + 1
            if row.role == "norm":
                norm = f"L{layer}.{RANGE_NORMS[rng]}.{phase}"
                (self.layernorm_forward if phase == "fwd" else self.layernorm_backward)(norm)
            elif row.role == "attention":
                if phase == "fwd":
                    self.attention_forward(layer)
                else:
                    self.attention_backward(layer)
            else:
                attention = rng == "attention" and slot == 1
                self.kernel(self._kernel_name(layer, row, k), row, attention)

    def block_forward(self, layer: int, recompute: bool) -> None:
        """One block's forward; `recompute` marks the checkpointed re-run in backward
        (prefetch then stays inside the block)."""
        qkv, out, up, down = self.blocks
        tags = [f"L{layer}.{name}" for name in LINEAR_NAMES]
        order = list(zip(self.blocks, tags, strict=True))
        nexts: list[tuple[L, str] | None] = [*order[1:], None]
        if not recompute:
            nexts[-1] = self.forward_successor(layer)
        self.emit_slot(layer, "fwd", "attention", 0)
        self.linear_forward(qkv, tags[0], nexts[0])
        self.rotary(layer, backward=False)  # on q and k, before the attention slot
        self.emit_slot(layer, "fwd", "attention", 1)
        self.linear_forward(out, tags[1], nexts[1])
        self.emit_slot(layer, "fwd", "attention", 2)
        self.emit_slot(layer, "fwd", "mlp", 0)
        self.linear_forward(up, tags[2], nexts[2])
        self.emit_slot(layer, "fwd", "mlp", 1)
        self.linear_forward(down, tags[3], nexts[3])
        self.emit_slot(layer, "fwd", "mlp", 2)

    def block_backward(self, layer: int) -> None:
        """One block's backward, recomputing its forward first under checkpointing."""
        qkv, out, up, down = self.blocks
        if self.checkpointing:
            self.b.phase = "recompute"
            self.block_forward(layer, recompute=True)
            self.b.phase = "bwd"
        self.emit_slot(layer, "bwd", "mlp", 2)
        self.linear_backward(down, f"L{layer}.mlp_down")
        self.emit_slot(layer, "bwd", "mlp", 1)
        self.linear_backward(up, f"L{layer}.mlp_up")
        self.emit_slot(layer, "bwd", "mlp", 0)
        self.emit_slot(layer, "bwd", "attention", 2)
        self.linear_backward(out, f"L{layer}.attn_out")
        if self.selective_recompute and not self.checkpointing:
            self.b.phase = "recompute"
            self.attention_forward(layer)
            self.b.phase = "bwd"
        self.emit_slot(layer, "bwd", "attention", 1)
        self.rotary(layer, backward=True)
        self.linear_backward(qkv, f"L{layer}.qkv")
        self.emit_slot(layer, "bwd", "attention", 0)
