"""The per-rank program of one AxoNN training iteration (every rank runs the same one).

Per microbatch (one repeated segment): embedding, the blocks' forward, final LayerNorm,
logits and loss; then the backward from the logits down to the embedding, each block
recomputing its forward first when activations are checkpointed. After the last
microbatch: per-tensor data-parallel all-reduces of the weight shards (unbucketed, as in
the code), the LayerNorm and bias gradients over data then depth, the replicated
position embedding over the world, and the optimizer step.

Overlap flags exactly as AxoNN defines them (reference/axonn-4d.md §Overlap):
- OAR: the backward all-reduce of dI runs asynchronously behind the dW GEMM and is waited
  right after it;
- ORS: the Z reduce-scatter of dW is asynchronous and waited once, after the backward of
  the whole microbatch;
- OAG: the Z all-gather of the next layer's weights (module order) is issued when the
  current layer starts and waited when the next layer starts; the order restarts for
  each block's recompute. The backward re-gather (step 4) is not prefetched.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.axonn.layers import LinearLayout, block_layouts, logits_layout
from workloads.axonn.params import Grid
from workloads.builder import ProgramBuilder, microbatch_copies
from workloads.graph import Program
from workloads.models import TransformerSpec
from workloads.ops import CollectiveKind as K
from workloads.transformer import BlockEmitter, BlockShape, optimizer_step


@dataclass(frozen=True)
class AxonnSetup:
    """Everything the program generator needs besides the model."""

    grid: Grid
    microbatch_sequences: int
    microbatches: int
    oar: bool = True
    ors: bool = True
    oag: bool = True
    cache_weights: bool = False
    expert_mode: bool = True
    checkpointing: bool = True
    transpose_alternate: bool = True
    optimizer: str = "adam"
    flash_attention: bool = True
    compress_microbatches: bool = True


class _Writer(BlockEmitter[LinearLayout]):
    """Emits the ops of one rank; holds the per-microbatch state (prefetch, handles)."""

    def __init__(self, spec: TransformerSpec, setup: AxonnSetup):
        blocks = block_layouts(spec, setup.grid, setup.transpose_alternate)
        logits = logits_layout(spec, setup.grid)
        self.M = setup.microbatch_sequences * spec.seq_len
        self.h_res = spec.hidden // (setup.grid.x if setup.transpose_alternate else setup.grid.y)
        qkv, up = blocks[0], blocks[2]
        shape = BlockShape(
            res_tokens=self.M,
            res_width=self.h_res,
            attn_tokens=self.M,
            heads=spec.heads // qkv.g_n,
            head_dim=spec.head_dim,
            qkv_width=qkv.n_local,
            act_tokens=self.M,
            act_width=up.n_local,
            seq_len=spec.seq_len,
            gated=spec.gated_mlp,
            flash_attention=setup.flash_attention,
        )
        super().__init__(
            spec,
            ProgramBuilder("axonn"),
            shape,
            blocks,
            logits,
            checkpointing=setup.checkpointing,
        )
        self.s = setup
        self.lg = logits
        self.rs_handles: list[int] = []
        self.prefetched: dict[str, int] = {}

    # ------------------------------------------------------------ primitives
    def gather(self, lay: LinearLayout, tag: str, blocking: bool = True) -> int:
        return self.b.collective(
            f"{tag}.ag_z", K.ALL_GATHER, "z", lay.gathered_elems * self.db, blocking=blocking
        )

    def non_expert_convert(self, lay: LinearLayout, tag: str, forward: bool) -> None:
        """Non-expert mode: all-to-alls on X and Y turning data-parallel inputs into 4D ones."""
        elems = self.M * lay.k_local
        for g in ("x", "y"):
            self.b.collective(
                f"{tag}.a2a_{g}.{'fwd' if forward else 'bwd'}", K.ALL_TO_ALL, g, elems * self.db
            )

    # --------------------------------------------------------------- forward
    def linear_forward(
        self, lay: LinearLayout, tag: str, next_layer: tuple[LinearLayout, str] | None
    ) -> None:
        s = self.s
        if not s.expert_mode:
            self.non_expert_convert(lay, tag, True)
        if s.oag:
            handle = self.prefetched.pop(tag, None)
            if handle is None:
                handle = self.gather(lay, tag, blocking=False)
            self.b.wait(handle)
            if next_layer is not None:
                nxt, nxt_tag = next_layer
                self.prefetched[nxt_tag] = self.gather(nxt, nxt_tag, blocking=False)
        else:
            self.gather(lay, tag)
        self.b.gemm(f"{tag}.fwd", self.M, lay.n_local, lay.k_local, self.db)
        self.b.collective(
            f"{tag}.ar_{lay.group_k}.fwd", K.ALL_REDUCE, lay.group_k, self.M * lay.n_local * self.db
        )

    # -------------------------------------------------------------- backward
    def linear_backward(self, lay: LinearLayout, tag: str, reduce_scatter: bool = True) -> None:
        s = self.s
        if not s.cache_weights:
            self.gather(lay, f"{tag}.bwd")
        self.b.gemm(f"{tag}.dI", self.M, lay.k_local, lay.n_local, self.db)
        h = self.b.collective(
            f"{tag}.ar_{lay.group_n}.bwd",
            K.ALL_REDUCE,
            lay.group_n,
            self.M * lay.k_local * self.db,
            blocking=not s.oar,
        )
        self.b.gemm(f"{tag}.dW", lay.k_local, lay.n_local, self.M, self.db)
        if s.oar:
            self.b.wait(h)
        if not s.expert_mode:
            self.non_expert_convert(lay, tag, False)
        if reduce_scatter:
            self.reduce_scatter(lay, tag)

    def reduce_scatter(self, lay: LinearLayout, tag: str) -> None:
        h = self.b.collective(
            f"{tag}.rs_z",
            K.REDUCE_SCATTER,
            "z",
            lay.gathered_elems * self.db,
            blocking=not self.s.ors,
        )
        if self.s.ors:
            self.rs_handles.append(h)

    # ------------------------------------------------------------ microbatch
    def microbatch(self) -> None:
        sp, M, lg = self.spec, self.M, self.lg
        b = self.b
        b.phase = "fwd"
        # embedding lookup on the tied (vocab-split) weight: gather over Z, partial sums over Y
        self.gather(lg, "embedding")
        self.elementwise("embedding.fwd", M * self.h_res, 2)
        b.collective("embedding.ar_y", K.ALL_REDUCE, lg.group_n, M * self.h_res * self.db)
        self.prefetched.clear()
        for layer in range(sp.layers):
            self.block_forward(layer, recompute=False)
        self.layernorm_forward("final_ln.fwd")
        self.linear_forward(lg, "logits", None)
        self.elementwise("loss.fwd", M * lg.n_local, 3, 6)
        b.collective("loss.ar_y", K.ALL_REDUCE, lg.group_n, 2 * M * 4)
        b.phase = "bwd"
        self.elementwise("loss.bwd", M * lg.n_local, 3, 4)
        self.linear_backward(lg, "logits", reduce_scatter=False)
        self.layernorm_backward("final_ln.bwd")
        for layer in reversed(range(sp.layers)):
            self.block_backward(layer)
        self.elementwise("embedding.bwd", M * self.h_res, 3)
        self.reduce_scatter(lg, "logits")  # the tied weight's gradient, after both uses
        self.b.wait_all(self.rs_handles, "wait:rs_z")

    # ----------------------------------------------------------- after batch
    def gradient_sync_and_step(self) -> None:
        sp, b, db = self.spec, self.b, self.db
        b.phase = "grad-sync"
        for layer in reversed(range(sp.layers)):
            for lay in reversed(self.blocks):
                b.collective(
                    f"L{layer}.{lay.name}.ar_data", K.ALL_REDUCE, "data", lay.shard_elems * db
                )
        b.collective("logits.ar_data", K.ALL_REDUCE, "data", self.lg.shard_elems * db)
        small = [
            ("ln1.w", self.h_res),
            ("ln1.b", self.h_res),
            ("ln2.w", self.h_res),
            ("ln2.b", self.h_res),
        ]
        small += [(f"{lay.name}.bias", lay.n_local) for lay in self.blocks]
        for layer in reversed(range(sp.layers)):
            for name, elems in small:
                b.collective(f"L{layer}.{name}.ar_data", K.ALL_REDUCE, "data", elems * db)
                b.collective(f"L{layer}.{name}.ar_z", K.ALL_REDUCE, "z", elems * db)
        b.collective("final_ln.ar_data", K.ALL_REDUCE, "data", 2 * self.h_res * db)
        b.collective("final_ln.ar_z", K.ALL_REDUCE, "z", 2 * self.h_res * db)
        b.collective("pos_embedding.ar_world", K.ALL_REDUCE, "world", sp.seq_len * sp.hidden * db)
        b.phase = "optimizer"
        from workloads.axonn.memory import shard_params

        params = shard_params(sp, self.s.grid, self.s.transpose_alternate)
        optimizer_step(b, params, self.s.optimizer)


def build_axonn_program(spec: TransformerSpec, setup: AxonnSetup) -> Program:
    """The Program of one iteration (all microbatches + gradient sync + optimizer)."""
    w = _Writer(spec, setup)
    for copies in microbatch_copies(setup.microbatches, setup.compress_microbatches):
        w.b.begin_segment("microbatch", copies)
        w.microbatch()
        w.b.end_segment()
    w.gradient_sync_and_step()
    return w.b.build()
