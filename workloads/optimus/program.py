"""The per-rank program of Optimus' 2D tensor parallelism (SUMMA on a q x q mesh).

GPU (i, j) of the mesh holds block (i, j) of every activation (batch rows / q x features
/ q: the batch is split over mesh rows, the features over mesh columns) and block (i, j)
of every weight (input features / q x output features / q). For Y = X·A (tokens M per
microbatch and mesh, k input and n output features), per SUMMA step t = 0..q-1:

| pass | operation | group | elements |
|---|---|---|---|
| forward | broadcast X(i,t) along row i from column t | row | M/q · k/q |
| forward | broadcast A(t,j) along column j from row t | col | k/q · n/q |
| forward | Y(i,j) += X(i,t)·A(t,j) | - | GEMM (M/q, n/q, k/q) |
| dX | broadcast A(t,j) along column j | col | k/q · n/q |
| dX | partial dY(i,j)·A(t,j)ᵀ, reduce along row i to column t | row | M/q · k/q |
| dA | broadcast X(i,t) along row i | row | M/q · k/q |
| dA | partial X(i,t)ᵀ·dY(i,j), reduce along column j to row t | col | k/q · n/q |

That is 6q broadcasts/reduces per linear layer and, per transformer layer and GPU,
3·(7·M·h + 12·h²)/q elements (baselines.md). LayerNorm statistics (mean and variance,
fp32) are all-reduced along the row in forward and backward; the cross-entropy's max and
sum along the row. The embedding is vocabulary-parallel down each column: partial
lookups of all M tokens reduce-scattered over the column (all-gathered in backward).
Biases, LayerNorm parameters and the position embedding are column slices replicated
down a column, their gradients all-reduced over it. Data parallelism adds Megatron-style gradient buckets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workloads.builder import ProgramBuilder, microbatch_copies
from workloads.graph import Program
from workloads.hybrid.buckets import GradBuckets
from workloads.models import TransformerSpec
from workloads.ops import CollectiveKind as K
from workloads.transformer import BlockEmitter, BlockShape, optimizer_step


@dataclass(frozen=True)
class OptimusSetup:
    """Resolved Optimus configuration."""

    q: int
    data: int
    microbatch_sequences: int  # per mesh (split over the q rows)
    microbatches: int
    checkpointing: bool = True
    prefetch_broadcasts: bool = False
    optimizer: str = "adam"
    flash_attention: bool = True
    compress_microbatches: bool = True
    bucket_elems: int = 40_000_000

    @property
    def world(self) -> int:
        return self.q * self.q * self.data


@dataclass(frozen=True)
class SummaLinear:
    """A k x n weight on the q x q mesh."""

    name: str
    k: int
    n: int
    q: int

    @property
    def k_block(self) -> int:
        return math.ceil(self.k / self.q)

    @property
    def n_block(self) -> int:
        return math.ceil(self.n / self.q)

    @property
    def weight_elems(self) -> int:
        return self.k_block * self.n_block


def summa_linears(spec: TransformerSpec, q: int) -> tuple[SummaLinear, ...]:
    """The block's four linear layers on the mesh, in module order."""
    return tuple(SummaLinear(name, k, n, q) for name, k, n in spec.linear_shapes())


def summa_logits(spec: TransformerSpec, q: int) -> SummaLinear:
    """The (tied) output projection h -> vocab on the mesh."""
    return SummaLinear("logits", spec.hidden, spec.vocab, q)


def optimus_shape(
    spec: TransformerSpec, q: int, tokens: int, flash_attention: bool = True
) -> BlockShape:
    """Per-GPU kernel sizes: every activation is a (tokens/q) x (features/q) block."""
    return BlockShape(
        res_tokens=tokens // q,
        res_width=spec.hidden // q,
        attn_tokens=tokens // q,
        heads=spec.heads // q,
        head_dim=spec.head_dim,
        qkv_width=spec.qkv_out // q,
        act_tokens=tokens // q,
        act_width=spec.mlp_up_out // q,
        seq_len=spec.seq_len,
        gated=spec.gated_mlp,
        flash_attention=flash_attention,
    )


def optimus_block_params(spec: TransformerSpec, q: int) -> int:
    """Parameters of one block per GPU: weight blocks, bias and LayerNorm column slices."""
    lin = summa_linears(spec, q)
    return sum(s.weight_elems + s.n_block for s in lin) + 4 * spec.hidden // q


def optimus_params(spec: TransformerSpec, q: int) -> int:
    """Parameters per GPU (tied embedding as one SUMMA weight, position embedding and
    final LayerNorm as column slices)."""
    embedding = summa_logits(spec, q).weight_elems + spec.seq_len * spec.hidden // q
    return spec.layers * optimus_block_params(spec, q) + embedding + 2 * spec.hidden // q


class _Writer(BlockEmitter[SummaLinear]):
    """Emits one Optimus rank's program (every rank runs the same one)."""

    def __init__(self, spec: TransformerSpec, setup: OptimusSetup):
        q = setup.q
        self.M = setup.microbatch_sequences * spec.seq_len
        self.mq = self.M // q
        super().__init__(
            spec,
            ProgramBuilder("optimus"),
            optimus_shape(spec, q, self.M, setup.flash_attention),
            summa_linears(spec, q),
            summa_logits(spec, q),
            checkpointing=setup.checkpointing,
        )
        self.s = setup
        self.q = q
        self.lg = summa_logits(spec, q)
        self.pending: list[int] = []
        self.last_mb = False
        self.buckets = self._buckets() if setup.data > 1 else None

    def _buckets(self) -> GradBuckets:
        per_block = optimus_block_params(self.spec, self.q)
        units = [(f"L{i}", per_block) for i in reversed(range(self.spec.layers))]
        units.append(
            ("embedding", optimus_params(self.spec, self.q) - self.spec.layers * per_block)
        )
        return GradBuckets(
            self.b,
            tag="dp",
            units=units,
            bucket_elems=self.s.bucket_elems,
            distopt=False,
            grad_bytes=self.db,
            param_bytes=self.db,
            overlap_grad=True,
            overlap_param=False,
        )

    # -------------------------------------------------------------- SUMMA
    def _bcast(self, name: str, group: str, elems: float, root: int, blocking: bool) -> int:
        return self.b.collective(
            name, K.BROADCAST, group, elems * self.db, blocking=blocking, root=root
        )

    def _fwd_step_bcasts(self, lay: SummaLinear, tag: str, t: int, blocking: bool) -> list[int]:
        x = self._bcast(f"{tag}.bcast_row.s{t}", "row", self.mq * lay.k_block, t, blocking)
        a = self._bcast(f"{tag}.bcast_col.s{t}", "col", lay.weight_elems, t, blocking)
        return [x, a]

    def linear_forward(
        self, lay: SummaLinear, tag: str, next_layer: tuple[SummaLinear, str] | None
    ) -> None:
        pre = self.s.prefetch_broadcasts
        handles = self._fwd_step_bcasts(lay, tag, 0, blocking=not pre)
        for t in range(self.q):
            if pre:
                self.b.wait_all(handles, "wait:bcast")
                if t + 1 < self.q:
                    handles = self._fwd_step_bcasts(lay, tag, t + 1, blocking=False)
            elif t > 0:
                self._fwd_step_bcasts(lay, tag, t, blocking=True)
            self.b.gemm(f"{tag}.fwd", self.mq, lay.n_block, lay.k_block, self.db)

    def linear_backward(self, lay: SummaLinear, tag: str) -> None:
        mq, db = self.mq, self.db
        reduces: list[int] = []
        for t in range(self.q):  # dX = dY · Aᵀ
            self._bcast(f"{tag}.bcast_col.dI.s{t}", "col", lay.weight_elems, t, True)
            self.b.gemm(f"{tag}.dI", mq, lay.k_block, lay.n_block, db)
            reduces.append(
                self.b.collective(
                    f"{tag}.reduce_row.dI.s{t}",
                    K.REDUCE,
                    "row",
                    mq * lay.k_block * db,
                    blocking=False,
                    root=t,
                )
            )
        for t in range(self.q):  # dA = Xᵀ · dY
            self._bcast(f"{tag}.bcast_row.dW.s{t}", "row", mq * lay.k_block, t, True)
            self.b.gemm(f"{tag}.dW", lay.k_block, lay.n_block, mq, db)
            reduces.append(
                self.b.collective(
                    f"{tag}.reduce_col.dW.s{t}",
                    K.REDUCE,
                    "col",
                    lay.weight_elems * db,
                    blocking=False,
                    root=t,
                )
            )
        self.b.wait_all(reduces, "wait:reduce")

    def layernorm_forward(self, name: str) -> None:
        super().layernorm_forward(name)
        self.b.collective(f"{name}.stats_ar_row", K.ALL_REDUCE, "row", 2 * self.mq * 4)

    def layernorm_backward(self, name: str) -> None:
        super().layernorm_backward(name)
        self.b.collective(f"{name}.stats_ar_row", K.ALL_REDUCE, "row", 2 * self.mq * 4)

    # ----------------------------------------------------------- microbatch
    def block_backward(self, layer: int) -> None:
        super().block_backward(layer)
        small = sum(lay.n_block for lay in self.blocks) + 4 * self.spec.hidden // self.q
        if self.last_mb:
            self.pending.append(
                self.b.collective(
                    f"L{layer}.small_ar_col", K.ALL_REDUCE, "col", small * self.db, blocking=False
                )
            )
            if self.buckets is not None:
                self.buckets.ready(f"L{layer}")

    def microbatch(self) -> None:
        """Forward and backward of one microbatch (embedding, blocks, head, loss)."""
        sp, b, db, q = self.spec, self.b, self.db, self.q
        h_col = sp.hidden // q
        b.phase = "fwd"
        self.elementwise("embedding.fwd", self.M * h_col, 2)
        b.collective("embedding.rs_col", K.REDUCE_SCATTER, "col", self.M * h_col * db)
        for layer in range(sp.layers):
            self.block_forward(layer, recompute=False)
        self.layernorm_forward("final_ln.fwd")
        self.linear_forward(self.lg, "logits", None)
        self.elementwise("loss.fwd", self.mq * self.lg.n_block, 3, 6)
        b.collective("loss.ar_row", K.ALL_REDUCE, "row", 2 * self.mq * 4)
        b.phase = "bwd"
        self.elementwise("loss.bwd", self.mq * self.lg.n_block, 3, 4)
        self.linear_backward(self.lg, "logits")
        self.layernorm_backward("final_ln.bwd")
        for layer in reversed(range(sp.layers)):
            self.block_backward(layer)
        b.collective("embedding.ag_col", K.ALL_GATHER, "col", self.M * h_col * db)
        self.elementwise("embedding.bwd", self.M * h_col, 3)
        if self.last_mb:
            # position embedding and final LayerNorm: column slices replicated down a column
            small = (sp.seq_len + 2) * h_col
            self.pending.append(
                b.collective("pos_ln.ar_col", K.ALL_REDUCE, "col", small * db, blocking=False)
            )
            if self.buckets is not None:
                self.buckets.ready("embedding")

    def finish(self) -> None:
        """Gradient synchronisation and the optimizer step after the last microbatch."""
        b = self.b
        b.phase = "grad-sync"
        b.wait_all(self.pending, "wait:small_ar")
        if self.buckets is not None:
            self.buckets.finish()
        b.phase = "optimizer"
        optimizer_step(b, optimus_params(self.spec, self.q), self.s.optimizer)


def build_optimus_program(spec: TransformerSpec, setup: OptimusSetup) -> Program:
    """The program of one iteration (every rank runs it)."""
    w = _Writer(spec, setup)
    copies = microbatch_copies(setup.microbatches, setup.compress_microbatches)
    for i, n in enumerate(copies):
        w.last_mb = i == len(copies) - 1
        w.b.begin_segment("microbatch", n)
        w.microbatch()
        w.b.end_segment()
    w.finish()
    return w.b.build()
