"""The per-rank program of Optimus' 2D tensor parallelism (SUMMA on a q x q mesh).

GPU (i, j) of the mesh holds block (i, j) of every activation (batch rows / q x features
/ q: the batch is split over mesh rows, the features over mesh columns) and block (i, j)
of every weight (input features / q x output features / q). The collectives are the ones
the released code issues (xuqifan897/Optimus, summa/mpu/layers.py SUMMA_AB / SUMMA_ABT /
SUMMA_ATB, commit 79c67d8), all blocking (`torch.distributed.broadcast` / `reduce`
without async_op: the compute stream waits for each). For Y = X·A (tokens M per
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
3·(7·M·h + 12·h²)/q elements (baselines.md). Around them, as the released code does it:
- biases (SUMMAbias) live on mesh row 0: broadcast down the column in every forward,
  their gradients reduced to row 0 in backward (the released QKV has no bias);
- LayerNorm (LayerNorm_summa): the mean and the mean square are two all-reduces along
  the row in forward, two more in backward; gamma and beta are broadcast down the column
  like biases and their gradients reduced;
- the word embedding is vocabulary-parallel down each column: in q steps the (V/q x
  h/q) block of mesh row t is broadcast down the column and looked up, and in backward
  broadcast again and its gradient reduced to row t; the position embedding (row 0) is
  broadcast and reduced likewise;
- the cross-entropy all-reduces the logits' max, the target logit and the exponential
  sum along the row (SUMMA_CrossEntropy).
Every broadcast block is first copied into a workspace (`workspace.add`), partial
products are cleared before use and copied out by their owner: memory-bound copies the
released code runs beside the GEMMs. Activation checkpointing re-runs each block's
forward, broadcasts included, in backward.
Data parallelism adds Megatron-style gradient buckets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workloads.builder import ProgramBuilder, microbatch_copies
from workloads.graph import Program
from workloads.hybrid.buckets import GradBuckets
from workloads.models import TransformerSpec
from workloads.ops import CollectiveKind as K
from workloads.ops import ComputeKind as C
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
    mesh_layout: str = "rows"

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


BIASED = ("attn_out", "mlp_up", "mlp_down")
"""Linears with a bias in the released code (its QKV projection has none)."""


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

    def _stage(self, name: str, elems: float) -> None:
        """`workspace.add(x)`: the released code copies every tensor it broadcasts into a
        preallocated workspace first (read + write)."""
        self.b.compute(name, C.MEMCPY, 0.0, 2.0 * elems * self.db)

    def _zeros(self, name: str, elems: float) -> None:
        """`workspace.zeros(shape)` / `torch.zeros`: a buffer cleared before use (write)."""
        self.b.compute(name, C.MEMCPY, 0.0, elems * self.db)

    def _fwd_step_bcasts(self, lay: SummaLinear, tag: str, t: int, blocking: bool) -> list[int]:
        self._stage(f"{tag}.stage_x.s{t}", self.mq * lay.k_block)
        self._stage(f"{tag}.stage_a.s{t}", lay.weight_elems)
        x = self._bcast(f"{tag}.bcast_row.s{t}", "row", self.mq * lay.k_block, t, blocking)
        a = self._bcast(f"{tag}.bcast_col.s{t}", "col", lay.weight_elems, t, blocking)
        return [x, a]

    def linear_forward(
        self, lay: SummaLinear, tag: str, next_layer: tuple[SummaLinear, str] | None
    ) -> None:
        pre = self.s.prefetch_broadcasts
        self._zeros(f"{tag}.out_zeros", self.mq * lay.n_block)
        handles = self._fwd_step_bcasts(lay, tag, 0, blocking=not pre)
        for t in range(self.q):
            if pre:
                self.b.wait_all(handles, "wait:bcast")
                if t + 1 < self.q:
                    handles = self._fwd_step_bcasts(lay, tag, t + 1, blocking=False)
            elif t > 0:
                self._fwd_step_bcasts(lay, tag, t, blocking=True)
            self.b.gemm(f"{tag}.fwd", self.mq, lay.n_block, lay.k_block, self.db)
        if lay.name in BIASED:
            self._bcast(f"{tag}.bias.bcast_col", "col", lay.n_block, 0, True)

    def _reduce(self, name: str, group: str, elems: float, root: int) -> None:
        """A blocking reduce (the released code's synchronous torch.distributed.reduce)."""
        self.b.collective(name, K.REDUCE, group, elems * self.db, blocking=True, root=root)

    def linear_backward(self, lay: SummaLinear, tag: str) -> None:
        mq, db = self.mq, self.db
        if lay.name in BIASED:
            self._reduce(f"{tag}.bias.reduce_col", "col", lay.n_block, 0)
        # each step stages the broadcast block, clears the partial product, multiplies and
        # reduces it to its owner, which copies it out (once per call on every rank)
        self._zeros(f"{tag}.dI.out_zeros", mq * lay.k_block)
        for t in range(self.q):  # dX = dY · Aᵀ (SUMMA_ABT)
            self._stage(f"{tag}.stage_a.dI.s{t}", lay.weight_elems)
            self._zeros(f"{tag}.partial_zeros.dI.s{t}", mq * lay.k_block)
            self._bcast(f"{tag}.bcast_col.dI.s{t}", "col", lay.weight_elems, t, True)
            self.b.gemm(f"{tag}.dI", mq, lay.k_block, lay.n_block, db)
            self._reduce(f"{tag}.reduce_row.dI.s{t}", "row", mq * lay.k_block, t)
        self._stage(f"{tag}.dI.out_copy", mq * lay.k_block)
        self._zeros(f"{tag}.dW.out_zeros", lay.weight_elems)
        for t in range(self.q):  # dA = Xᵀ · dY (SUMMA_ATB)
            self._stage(f"{tag}.stage_x.dW.s{t}", mq * lay.k_block)
            self._zeros(f"{tag}.partial_zeros.dW.s{t}", lay.weight_elems)
            self._bcast(f"{tag}.bcast_row.dW.s{t}", "row", mq * lay.k_block, t, True)
            self.b.gemm(f"{tag}.dW", lay.k_block, lay.n_block, mq, db)
            self._reduce(f"{tag}.reduce_col.dW.s{t}", "col", lay.weight_elems, t)
        self._stage(f"{tag}.dW.out_copy", lay.weight_elems)

    def layernorm_forward(self, name: str) -> None:
        for stat in ("mean", "meansq"):
            self.b.collective(f"{name}.{stat}.ar_row", K.ALL_REDUCE, "row", self.mq * self.db)
        super().layernorm_forward(name)
        for p in ("beta", "gamma"):
            self._bcast(f"{name}.affine.{p}.bcast_col", "col", self.spec.hidden // self.q, 0, True)

    def layernorm_backward(self, name: str) -> None:
        for p in ("gamma", "beta"):
            self._reduce(f"{name}.affine.{p}.reduce_col", "col", self.spec.hidden // self.q, 0)
        super().layernorm_backward(name)
        for stat in ("sum", "xsum"):
            self.b.collective(f"{name}.{stat}.ar_row", K.ALL_REDUCE, "row", self.mq * self.db)

    # ----------------------------------------------------------- microbatch
    def block_backward(self, layer: int) -> None:
        super().block_backward(layer)
        if self.last_mb and self.buckets is not None:
            self.buckets.ready(f"L{layer}")

    def embedding_forward(self) -> None:
        """Vocabulary blocks broadcast down the column and looked up, q steps; then the
        position embedding (row 0) broadcast and added."""
        sp, q = self.spec, self.q
        h_col = sp.hidden // q
        self._zeros("embedding.out_zeros", self.mq * h_col)
        for t in range(q):
            self._stage(f"embedding.stage.s{t}", self.lg.weight_elems)
            self._bcast(f"embedding.bcast_col.s{t}", "col", self.lg.weight_elems, t, True)
            self.elementwise(f"embedding.lookup.s{t}", self.mq * h_col, 2)
        self._stage("pos_embedding.stage", sp.seq_len * h_col)
        self._bcast("pos_embedding.bcast_col", "col", sp.seq_len * h_col, 0, True)
        self.elementwise("pos_embedding.add", self.mq * h_col, 3)

    def embedding_backward(self) -> None:
        """The position embedding's gradient reduced to row 0; each vocabulary block
        broadcast again, its gradient computed and reduced to its row (q steps)."""
        sp, q = self.spec, self.q
        h_col = sp.hidden // q
        self._reduce("pos_embedding.reduce_col", "col", sp.seq_len * h_col, 0)
        for t in range(q):
            self._stage(f"embedding.stage.bwd.s{t}", self.lg.weight_elems)
            self._bcast(f"embedding.bcast_col.bwd.s{t}", "col", self.lg.weight_elems, t, True)
            self.elementwise(f"embedding.bwd.s{t}", self.mq * h_col, 3)
            self._reduce(f"embedding.reduce_col.s{t}", "col", self.lg.weight_elems, t)

    def microbatch(self) -> None:
        """Forward and backward of one microbatch (embedding, blocks, head, loss)."""
        sp, b = self.spec, self.b
        b.phase = "fwd"
        self.embedding_forward()
        for layer in range(sp.layers):
            self.block_forward(layer, recompute=False)
        self.layernorm_forward("final_ln.fwd")
        self.linear_forward(self.lg, "logits", None)
        self.elementwise("loss.fwd", self.mq * self.lg.n_block, 3, 6)
        for what in ("max", "target", "expsum"):  # SUMMA_CrossEntropy
            b.collective(f"loss.{what}.ar_row", K.ALL_REDUCE, "row", self.mq * self.db)
        b.phase = "bwd"
        self.elementwise("loss.bwd", self.mq * self.lg.n_block, 3, 4)
        self.linear_backward(self.lg, "logits")
        self.layernorm_backward("final_ln.bwd")
        for layer in reversed(range(sp.layers)):
            self.block_backward(layer)
        self.embedding_backward()
        if self.last_mb and self.buckets is not None:
            self.buckets.ready("embedding")

    def finish(self) -> None:
        """Gradient synchronisation and the optimizer step after the last microbatch."""
        b = self.b
        b.phase = "grad-sync"
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
