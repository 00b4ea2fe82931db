"""The per-rank program of one AxoNN training iteration (every rank runs the same one).

Which collectives a rank issues comes from schedule.py (`AxonnCalls`), the description
the analytical model reads too; this module decides when each is issued and waited.

Per microbatch (one repeated segment): embedding, the blocks' forward, final LayerNorm,
logits and loss; then the backward from the logits down to the embedding, each block
recomputing its forward first when activations are checkpointed. After the last
microbatch: the implementation's gradient synchronisation (implementation.py) and the
optimizer step.

Overlap flags exactly as AxoNN defines them (reference/axonn-4d.md §Overlap):
- OAR: the backward all-reduce of dI runs asynchronously behind the dW GEMM and is waited
  right after it;
- ORS: the Z reduce-scatter of dW is asynchronous and waited once, after the backward of
  the whole microbatch;
- OAG: the Z all-gather of the next linear's weights (module order) is issued when the
  current one starts and waited when the next one starts. In a block's recompute the
  order restarts inside the block and its first gather is issued on entry (axonn's
  `overlap_all_gathers_for_checkpointed_forward`). axonn-0.2 prefetches in the forward
  too, across blocks; the SC'24 code runs the forward outside `optimize_communication`,
  so its forward gathers are blocking.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from workloads.axonn.implementation import PRESETS, WeightPolicy
from workloads.axonn.layers import LinearLayout, block_layouts, logits_layout
from workloads.axonn.params import Grid
from workloads.axonn.schedule import AxonnCalls, Call
from workloads.body_templates import BodyTemplate, copy_body, record_body
from workloads.builder import ProgramBuilder, microbatch_copies
from workloads.graph import Program
from workloads.loss import emit_loss
from workloads.models import TransformerSpec
from workloads.ops import CollectiveKind as K
from workloads.ops import ComputeKind as C
from workloads.transformer import LINEAR_NAMES, BlockEmitter, BlockShape, optimizer_step


@dataclass(frozen=True)
class AxonnSetup:
    """Everything the program generator needs besides the model."""

    grid: Grid
    microbatch_sequences: int
    microbatches: int
    oar: bool = True
    ors: bool = True
    oag: bool = True
    implementation: str = "sc24"
    policy: WeightPolicy = field(default_factory=lambda: WeightPolicy("keep", 0))
    expert_mode: bool = True
    checkpointing: bool = True
    transpose_alternate: bool = True
    optimizer: str = "adam"
    flash_attention: bool = True
    compress_microbatches: bool = True
    cross_entropy: str = "eager"  # the loss kernels (workloads/loss.py)

    def calls(self, spec: TransformerSpec) -> AxonnCalls:
        """The collective description of this setup (schedule.py)."""
        return AxonnCalls(
            spec,
            self.grid,
            PRESETS[self.implementation],
            self.policy,
            self.microbatch_sequences * spec.seq_len,
            self.checkpointing,
            self.transpose_alternate,
        )


class _Writer(BlockEmitter[LinearLayout]):
    """Emits the ops of one rank; holds the per-microbatch state (prefetch, handles)."""

    def __init__(self, spec: TransformerSpec, setup: AxonnSetup):
        blocks = block_layouts(spec, setup.grid, setup.transpose_alternate)
        logits = logits_layout(spec, setup.grid)
        self.calls = setup.calls(spec)
        self.preset = self.calls.preset
        self.M = setup.microbatch_sequences * spec.seq_len
        self.h_res = self.calls.h_res
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
            rope=spec.position == "rope",
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
        self.layer = -1  # block being emitted (-1: the head)
        self.recompute = False
        self.first_microbatch = True

    # ------------------------------------------------------------ primitives
    def issue(self, call: Call, tag: str, blocking: bool = True, suffix: str = "") -> int:
        """Issue one described collective under the op name `tag.name[suffix]`."""
        name = f"{tag}.{call.name}{suffix}" if tag else call.name
        return self.b.collective(name, call.kind, call.group, call.nbytes, blocking=blocking)

    def pass_name(self) -> str:
        return "recompute" if self.recompute else "fwd"

    def _loss(self, phase: Literal["fwd", "bwd"], elems: float) -> None:
        """The code's cross-entropy kernels over this GPU's logits (workloads/loss.py);
        AxoNN's own loss reductions are issued by the caller."""

        def compute(name: str, flops: float, nbytes: float) -> None:
            self.b.compute(name, C.ELEMENTWISE, flops, nbytes)

        emit_loss(compute, self.s.cross_entropy, phase, elems, self.db)

    def cached(self, layer: int | None = None) -> bool:
        """Does block `layer` (default: the one being emitted; -1 the head) cache?"""
        layer = self.layer if layer is None else layer
        return layer >= 0 and self.s.policy.cached(layer)

    def prefetching(self) -> bool:
        """OAG is active in the current pass: the recompute where the implementation
        prefetches checkpointed blocks (Megatron-AxoNN's checkpoint calls axonn's
        `overlap_all_gathers_for_checkpointed_forward`), the forward where it wraps the
        forward in `optimize_communication`."""
        if self.recompute:
            return self.s.oag and self.preset.recompute_prefetch
        return self.s.oag and self.preset.forward_prefetch

    def autocast(self, lay: LinearLayout, tag: str) -> None:
        """fp32 weights under torch.autocast (litgpt): the matmul casts the (gathered)
        weight to the model's dtype first, a memory-bound kernel per use."""
        wb = self.calls.wb
        if wb != self.db:
            elems = lay.gathered_elems
            self.b.compute(f"{tag}.cast", C.ELEMENTWISE, 0.0, elems * (wb + self.db))

    def non_expert_convert(self, lay: LinearLayout, tag: str, forward: bool) -> None:
        """Non-expert mode: all-to-alls on X and Y turning data-parallel inputs into 4D ones."""
        elems = self.M * lay.k_local
        for g in ("x", "y"):
            self.b.collective(
                f"{tag}.a2a_{g}.{'fwd' if forward else 'bwd'}", K.ALL_TO_ALL, g, elems * self.db
            )

    # --------------------------------------------------------------- forward
    def block_forward(self, layer: int, recompute: bool) -> None:
        self.layer, self.recompute = layer, recompute
        if recompute and self.prefetching():
            # the checkpointed block's prefetch iterator starts on entry
            qkv = self.blocks[0]
            tag = f"L{layer}.{LINEAR_NAMES[0]}"
            gather = self.calls.linear(qkv, "recompute", self.cached(), self.first_microbatch)
            if gather.gather is not None:
                self.prefetched[tag] = self.issue(gather.gather, tag, blocking=False)
        super().block_forward(layer, recompute)
        self.recompute = False  # the block's backward follows (layer stays set)

    def linear_forward(
        self, lay: LinearLayout, tag: str, next_layer: tuple[LinearLayout, str] | None
    ) -> None:
        s = self.s
        if not s.expert_mode:
            self.non_expert_convert(lay, tag, True)
        calls = self.calls.linear(lay, self.pass_name(), self.cached(), self.first_microbatch)
        if self.prefetching():
            handle = self.prefetched.pop(tag, None)
            if handle is None and calls.gather is not None:
                handle = self.issue(calls.gather, tag, blocking=False)
            if handle is not None:
                self.b.wait(handle)
            if next_layer is not None:
                self._prefetch(*next_layer)
        elif calls.gather is not None:
            self.issue(calls.gather, tag)
        self.autocast(lay, f"{tag}.fwd")
        self.b.gemm(f"{tag}.fwd", self.M, lay.n_local, lay.k_local, self.db)
        self.issue(calls.reduce, tag, suffix=".fwd")

    def _prefetch(self, lay: LinearLayout, tag: str) -> None:
        """Issue the next linear's gather early (nothing when its weight is at hand);
        `tag` is 'L<layer>.<linear>' or 'logits'."""
        layer = int(tag[1 : tag.index(".")]) if tag.startswith("L") else -1
        nxt = self.calls.linear(lay, self.pass_name(), self.cached(layer), self.first_microbatch)
        if nxt.gather is not None:
            self.prefetched[tag] = self.issue(nxt.gather, tag, blocking=False)

    # -------------------------------------------------------------- backward
    def linear_backward(self, lay: LinearLayout, tag: str, reduce_scatter: bool = True) -> None:
        s = self.s
        calls = self.calls.linear(lay, "bwd", self.cached(), self.first_microbatch)
        if calls.gather is not None:
            self.issue(calls.gather, f"{tag}.bwd")
        self.autocast(lay, f"{tag}.bwd")
        self.b.gemm(f"{tag}.dI", self.M, lay.k_local, lay.n_local, self.db)
        h = self.issue(calls.reduce, tag, blocking=not s.oar, suffix=".bwd")
        self.b.gemm(f"{tag}.dW", lay.k_local, lay.n_local, self.M, self.db)
        if s.oar:
            self.b.wait(h)
        if not s.expert_mode:
            self.non_expert_convert(lay, tag, False)
        if reduce_scatter and calls.scatter is not None:
            self.reduce_scatter(calls.scatter, tag)

    def reduce_scatter(self, call: Call, tag: str) -> None:
        h = self.issue(call, tag, blocking=not self.s.ors)
        if self.s.ors:
            self.rs_handles.append(h)

    def block_backward(self, layer: int) -> None:
        self.layer = layer
        super().block_backward(layer)
        self.layer = -1

    # ------------------------------------------------------------ microbatch
    def state_key(self) -> tuple[object, ...] | None:
        """Everything of the writer's state that changes what a microbatch emits, or None
        when some of it names ops (open prefetches or reduce-scatter handles, never
        left open between microbatches today) and no copy may be made."""
        if not USE_TEMPLATES or self.prefetched or self.rs_handles:
            return None
        b = self.b
        return (self.first_microbatch, self.layer, self.recompute, b.phase, b._last_compute is None)

    def microbatch(self) -> None:
        if self.preset.embedding == "vocab-parallel-xy":
            self._microbatch_megatron_head()
        elif self.preset.embedding == "replicated":
            self._microbatch_replicated_head()
        else:
            self._microbatch_4d_head()
        self.b.wait_all(self.rs_handles, "wait:rs_z")
        self.first_microbatch = False

    def _blocks_forward(self) -> None:
        self.prefetched.clear()
        for layer in range(self.spec.layers):
            self.block_forward(layer, recompute=False)
        self.layer = -1

    def _blocks_backward(self) -> None:
        for layer in reversed(range(self.spec.layers)):
            self.block_backward(layer)

    def _microbatch_4d_head(self) -> None:
        """axonn-0.2: the tied embedding/logits weight is a 4D linear (vocab over Y)."""
        M, lg, b, c = self.M, self.lg, self.b, self.calls
        b.phase = "fwd"
        self.layer = -1
        gather = c.tied_gather()
        if gather is not None:
            self.issue(gather, "embedding")
        self.elementwise("embedding.fwd", M * self.h_res, 2)
        self.issue(c.embedding_reduce_4d(), "embedding")
        self._blocks_forward()
        self.layernorm_forward("final_ln.fwd")
        self.linear_forward(lg, "logits", None)
        self._loss("fwd", M * lg.n_local)
        self.issue(c.loss_reduce_4d(), "")
        b.phase = "bwd"
        self._loss("bwd", M * lg.n_local)
        self.linear_backward(lg, "logits", reduce_scatter=False)
        self.layernorm_backward("final_ln.bwd")
        self._blocks_backward()
        self.elementwise("embedding.bwd", M * self.h_res, 3)
        bwd = c.linear(lg, "bwd", False, self.first_microbatch)
        if bwd.scatter is not None:  # the tied weight's gradient, after both uses
            self.reduce_scatter(bwd.scatter, "logits")

    def _microbatch_replicated_head(self) -> None:
        """litgpt: a local lookup in the replicated token embedding; the untied output
        head is a 4D linear."""
        M, lg, b, c = self.M, self.lg, self.b, self.calls
        b.phase = "fwd"
        self.layer = -1
        self.elementwise("embedding.fwd", M * self.h_res, 2)
        self._blocks_forward()
        self.layernorm_forward("final_ln.fwd")
        self.linear_forward(lg, "logits", None)
        self._loss("fwd", M * lg.n_local)
        self.issue(c.loss_reduce_4d(), "")
        b.phase = "bwd"
        self._loss("bwd", M * lg.n_local)
        self.linear_backward(lg, "logits")
        self.layernorm_backward("final_ln.bwd")
        self._blocks_backward()
        self.elementwise("embedding.bwd", M * self.h_res, 3)

    def _microbatch_megatron_head(self) -> None:
        """sc24: Megatron's vocab-parallel embedding and output layer over X·Y."""
        sp, M, b, c = self.spec, self.M, self.b, self.calls
        vocab = c.xy_vocab
        b.phase = "fwd"
        self.layer = -1
        self.elementwise("embedding.fwd", M * sp.hidden, 2)
        for call in c.embedding_forward():
            self.issue(call, "embedding.fwd")
        self._blocks_forward()
        self.layernorm_forward("final_ln.fwd")
        self.issue(c.transformer_gather(), "transformer_out.fwd")
        b.gemm("logits.fwd", M, vocab, sp.hidden, self.db)
        self._loss("fwd", M * vocab)
        for call in c.loss_statistics():
            self.issue(call, "loss")
        b.phase = "bwd"
        self._loss("bwd", M * vocab)
        b.gemm("logits.dI", M, sp.hidden, vocab, self.db)
        h = self.issue(c.logits_backward(), "logits.bwd", blocking=False)
        b.gemm("logits.dW", vocab, sp.hidden, M, self.db)
        b.wait(h)  # Megatron's async grad all-reduce, waited after the dW GEMM
        self.layernorm_backward("final_ln.bwd")
        self._blocks_backward()
        self.issue(c.transformer_gather(), "transformer_in.bwd")
        self.elementwise("embedding.bwd", M * sp.hidden, 3)

    # ----------------------------------------------------------- after batch
    def gradient_sync_and_step(self) -> None:
        b = self.b
        b.phase = "grad-sync"
        for call in self.calls.gradient_sync():
            self.issue(call, "")
        b.phase = "optimizer"
        optimizer_step(b, self.calls.params_per_gpu(), self.s.optimizer)


USE_TEMPLATES = True  # off: every microbatch emitted (what the tests compare copies with)


def build_axonn_program(spec: TransformerSpec, setup: AxonnSetup) -> Program:
    """The Program of one iteration (all microbatches + gradient sync + optimizer).

    A microbatch body emitted from the same writer state as an earlier one is a copy of
    it (workloads/body_templates.py): with compressed microbatches the last body copies
    the middle one."""
    w = _Writer(spec, setup)
    b = w.b
    # per writer state: where a body emitted from it lies (start, stop, the compute
    # stream's last op before it, the builder state after it), made a template on reuse
    seen: dict[tuple[object, ...], tuple[int, int, int | None, tuple[int | None, str]]] = {}
    templates: dict[tuple[object, ...], BodyTemplate | None] = {}
    for i, copies in enumerate(microbatch_copies(setup.microbatches, setup.compress_microbatches)):
        # cached blocks gather only in the first microbatch, so it is not like the rest
        first_differs = i == 0 and setup.policy.cached_blocks > 0
        b.begin_segment("microbatch.first" if first_differs else "microbatch", copies)
        key = w.state_key()
        if key is not None and key in seen and key not in templates:
            start, stop, before, after = seen[key]
            templates[key] = record_body(b, start, before, stop, after)
        got = templates.get(key) if key is not None else None
        if got is not None:
            copy_body(b, got)
            w.first_microbatch = False  # what microbatch() leaves (the key had it False)
        else:
            start, before = len(b.ops), b._last_compute
            w.microbatch()
            if key is not None and key not in seen:
                seen[key] = (start, len(b.ops), before, (b._last_compute, b.phase))
        b.end_segment()
    w.gradient_sync_and_step()
    return w.b.build()
