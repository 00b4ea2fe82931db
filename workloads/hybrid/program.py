"""The per-stage program of a TP x PP x DP hybrid (Megatron-LM, ZeRO-3/FSDP, ZeRO++...).

Every rank of a pipeline stage runs the same program: the stage's passes in schedule
order (workloads/hybrid/schedule.py), then the gradient synchronisation and the
optimizer step.

Tensor parallelism (Megatron-LM): column-parallel QKV and MLP-up, row-parallel
attention-out and MLP-down. Without sequence parallelism a row-parallel forward ends in an
all-reduce of its output and a column-parallel backward all-reduces dI asynchronously
behind the dW GEMM; with it, column-parallel layers all-gather their sequence-split input
(again in backward, behind the dI GEMM) and reduce-scatter dI, and row-parallel layers
reduce-scatter their output and all-gather the output gradient. The embedding and the
cross-entropy are vocabulary-parallel.

Context parallelism (cp > 1): every GPU runs s/cp tokens of each sequence through the
linears, norms and MLP unchanged; attention exchanges keys and values on the 'cp' group
(workloads/hybrid/context.py).

Pipeline: activations and their gradients travel by send/recv on the 'pp' group, one
stream per direction; a stage waits for a receive right before it needs the tensor and
does not wait for its sends.

Data axis: Megatron buckets (workloads/hybrid/buckets.py) or ZeRO/FSDP gathers and
reductions (workloads/hybrid/sharding.py), per block unit ('block') or per linear
weight ('linear', with AxoNN-style prefetch of the next weight in module order).
"""

from __future__ import annotations

from typing import Literal

from workloads.fp8 import LinearPrecision
from workloads.hybrid.buckets import GradBuckets
from workloads.hybrid.context import ContextParallelAttention
from workloads.hybrid.deepspeed_grads import DeepSpeedGrads
from workloads.hybrid.fsdp_runtime import FsdpHooks
from workloads.hybrid.schedule import Pass
from workloads.hybrid.setup import (
    Chunk,
    HybridSetup,
    TpLinear,
    block_linears,
    block_params,
    block_shape,
    logits_linear,
    stage_chunks,
    stage_param_counts,
)
from workloads.hybrid.sharding import Gather, Sharder
from workloads.hybrid.streams import StreamBuilder
from workloads.hybrid.tp_overlap import TpOverlap
from workloads.hybrid.zero3_runtime import Zero3Runtime
from workloads.loss import emit_loss, loss_steps
from workloads.models import TransformerSpec
from workloads.ops import CollectiveKind as K
from workloads.ops import ComputeKind as C
from workloads.transformer import LINEAR_NAMES, BlockEmitter


class StageEmitter(BlockEmitter[TpLinear]):
    """Emits one pipeline stage's program."""

    def __init__(self, spec: TransformerSpec, setup: HybridSetup, stage: int):
        self.setup = setup
        self.stage = stage
        self.t = setup.tp
        self.M = setup.microbatch_sequences * spec.seq_len // setup.cp  # tokens on this GPU
        sp = setup.sequence_parallel and setup.tp > 1
        self.sp = sp
        super().__init__(
            spec,
            StreamBuilder(f"{setup.strategy}-stage{stage}"),
            block_shape(spec, setup.tp, sp, self.M, setup.flash_attention),
            block_linears(spec, setup.tp),
            logits_linear(spec, setup.tp),
            checkpointing=setup.recompute == "full",
            selective_recompute=setup.recompute == "selective",
        )
        self.lg = logits_linear(spec, setup.tp)
        self.sb: StreamBuilder = self.b  # type: ignore[assignment]
        self.chunks = stage_chunks(spec, setup, stage)
        self.counts = stage_param_counts(spec, setup, stage)
        self.sharder = Sharder(self.sb, setup, self.db) if setup.sharded else None
        self.linear_mode = setup.sharded and setup.sharding.granularity == "linear"
        self.fsdp = self._make_fsdp() if setup.fsdp is not None else None
        self.block_mode = (
            setup.sharded and setup.sharding.granularity == "block" and self.fsdp is None
        )
        self.prefetched: dict[str, Gather] = {}
        self.resident: set[str] = set()
        megatron_dp = setup.data_mode in ("ddp", "distopt") and setup.grad_ranks > 1
        self.buckets = self._make_buckets() if megatron_dp else {}
        self.ds_grads = self._make_ds_grads() if setup.data_mode == "deepspeed" else {}
        ds = setup.deepspeed
        self.zero3 = (
            Zero3Runtime(self.sb, self.sharder, spec, setup, ds, self.db)
            if ds is not None and ds.stage == 3 and self.sharder is not None
            else None
        )
        # DeepSpeed's PipelineEngine moves tensors from its schedule's steps, blocking
        # (workloads/hybrid/deepspeed_pipe.py), not from the passes
        self.external_p2p = ds is not None and ds.pipeline
        self.chunk = self.chunks[0]
        self.last_mb = False
        self.last_index = setup.microbatches - 1  # of the microbatches actually emitted
        self.tied_here = any(c.first for c in self.chunks) and any(c.last for c in self.chunks)
        # the output layer's gradient is the word embedding's (reduced with it)
        self.shared_output = self.tied_here and spec.tied_embeddings
        self.cp_attention = (
            ContextParallelAttention(self.sb, self.shape, setup, self.db) if setup.cp > 1 else None
        )
        self.prec = LinearPrecision(spec, self.b, self.db)
        self.overlap = (
            TpOverlap(self.sb, self.prec, setup.tp_overlap, setup.tp, self.M, self.db)
            if setup.tp_overlap is not None and sp
            else None
        )

    # -------------------------------------------------------------- helpers
    def tp_collective(self, name: str, kind: K, nbytes: float, blocking: bool = True) -> int | None:
        """A collective on the tensor-parallel group (none when tp = 1, as Megatron)."""
        if self.t == 1:
            return None
        return self.b.collective(name, kind, "tp", nbytes, blocking=blocking)

    def _deferred_reduction(self, lay: TpLinear) -> bool:
        """A parallel block sums its two branches' partial outputs and reduces them once,
        after MLP-down (GPT-NeoX's gpt_j_residual: reduce, or reduce-scatter with
        sequence parallelism); backward, the one gathered gradient feeds both."""
        return self.spec.parallel_block and lay.name == "attn_out"

    def _root_unit(self, chunk: Chunk) -> str:
        return "root" if self.tied_here else ("embed" if chunk.first else "head")

    def _unit_elems(self, unit: str) -> float:
        if unit == "root":
            return self.counts["embedding"] + self.counts["head"]
        if unit == "embed":
            return self.counts["embedding"]
        if unit == "head":
            return self.counts["head"]
        return block_params(self.spec, self.t)

    def _make_buckets(self) -> dict[int, GradBuckets]:
        s = self.setup
        out = {}
        for c in self.chunks:
            units = [("head", self.counts["head"])] if c.last else []
            units += [
                (f"L{i}", block_params(self.spec, self.t)) for i in reversed(range(c.start, c.stop))
            ]
            if c.first:
                units.append(("embedding", self.counts["embedding"]))
            out[c.index] = GradBuckets(
                self.b,
                tag=f"chunk{c.index}",
                units=[(n, e) for n, e in units if e > 0],
                bucket_elems=s.bucket_elems,
                distopt=s.data_mode == "distopt",
                grad_bytes=s.grad_reduce_bytes,
                param_bytes=self.db,
                overlap_grad=s.overlap_grad_reduce,
                overlap_param=s.overlap_param_gather,
            )
        return out

    def _backward_units(self, c: Chunk) -> list[tuple[str, float]]:
        """(unit, parameters) of a chunk in the order its gradients become ready."""
        units = [("head", float(self.counts["head"]))] if c.last else []
        units += [
            (f"L{i}", float(block_params(self.spec, self.t)))
            for i in reversed(range(c.start, c.stop))
        ]
        if c.first:
            units.append(("embedding", float(self.counts["embedding"])))
        return [(n, e) for n, e in units if e > 0]

    def _make_ds_grads(self) -> dict[int, DeepSpeedGrads]:
        ds = self.setup.deepspeed
        assert ds is not None
        return {
            c.index: DeepSpeedGrads(
                self.sb,
                ds,
                self._backward_units(c),
                self.db,
                self.setup.grad_ranks,
                f"chunk{c.index}",
            )
            for c in self.chunks
        }

    def _grad_ready(self, unit: str) -> None:
        if self.last_mb and self.buckets:
            self.buckets[self.chunk.index].ready(unit)
        if self.ds_grads:
            self.ds_grads[self.chunk.index].ready(unit, self.last_mb)

    def _params_needed(self, unit: str) -> None:
        if self.buckets:
            self.buckets[self.chunk.index].wait_params(unit)

    def _make_fsdp(self) -> FsdpHooks:
        """PyTorch FSDP's units: the root (what no wrapped unit holds) and one per block,
        or one for the whole model."""
        rt = self.setup.fsdp
        assert rt is not None
        whole = self.setup.sharding.granularity == "model"
        order = ["model"] if whole else ["root"] + [f"L{i}" for i in range(self.spec.layers)]

        def elems(unit: str) -> float:
            if unit == "model":
                return float(self.counts["total"])
            if unit == "root":
                return float(self.counts["embedding"] + self.counts["head"])
            return float(block_params(self.spec, self.t))

        return FsdpHooks(self.sb, self.setup, rt, self.db, order, elems)

    def _fsdp_root(self) -> str:
        return "model" if self.setup.sharding.granularity == "model" else "root"

    def _fsdp_blocks(self) -> bool:
        return self.fsdp is not None and self.setup.sharding.granularity == "block"

    # ------------------------------------------------------- sharded gathers
    def _acquire(self, unit: str, backward: bool, nxt: str | None) -> None:
        """Block-granularity: make `unit` gathered, prefetching `nxt`."""
        assert self.sharder is not None
        sh = self.setup.sharding
        if unit not in self.resident:
            g = self.prefetched.pop(unit, None)
            if g is None:
                g = self.sharder.gather(unit, self._unit_elems(unit), backward, blocking=False)
            self.sharder.finish(g)
            if not sh.reshard_after_forward or unit in ("root", "embed", "head"):
                self.resident.add(unit)
        prefetch = sh.backward_prefetch if backward else sh.forward_prefetch
        if prefetch and nxt is not None and nxt not in self.resident and nxt not in self.prefetched:
            self.prefetched[nxt] = self.sharder.gather(
                nxt, self._unit_elems(nxt), backward, blocking=False
            )

    def _linear_gather(self, lay: TpLinear, tag: str, nxt: tuple[TpLinear, str] | None) -> None:
        """Linear-granularity forward gather with AxoNN/DeepSpeed-style prefetch."""
        assert self.sharder is not None
        backward = self.b.phase == "recompute"
        if self.zero3 is not None:
            self.zero3.use(tag, backward)
            return
        if self.setup.sharding.forward_prefetch:
            g = self.prefetched.pop(tag, None)
            if g is None:
                g = self.sharder.gather(tag, lay.weight_elems, backward, blocking=False)
            self.sharder.finish(g)
            if nxt is not None:
                nl, ntag = nxt
                self.prefetched[ntag] = self.sharder.gather(
                    ntag, nl.weight_elems, backward, blocking=False
                )
        else:
            self.sharder.gather(tag, lay.weight_elems, backward, blocking=True)

    def _linear_backward_gather(self, lay: TpLinear, tag: str) -> None:
        """Linear-granularity backward gather; with backward prefetch the next linear of
        the block in backward order is fetched while this one computes."""
        assert self.sharder is not None
        if self.zero3 is not None:
            self.zero3.use(tag, True)
            return
        g = self.prefetched.pop(f"{tag}.bwd", None)
        if g is None:
            g = self.sharder.gather(f"{tag}.bwd", lay.weight_elems, True, blocking=False)
        self.sharder.finish(g)
        layer, _, name = tag.partition(".")
        if self.setup.sharding.backward_prefetch and name in LINEAR_NAMES[1:]:
            i = LINEAR_NAMES.index(name) - 1
            ntag = f"{layer}.{LINEAR_NAMES[i]}.bwd"
            self.prefetched[ntag] = self.sharder.gather(
                ntag, self.blocks[i].weight_elems, True, blocking=False
            )

    # ------------------------------------------------------------ linears
    def _overlapped(self, lay: TpLinear) -> TpOverlap | None:
        """Userbuffers overlap for this linear (TE's block layers; not a parallel
        block's attention-out, whose reduction MLP-down's carries)."""
        if self.overlap is None or not self.overlap.handles(lay):
            return None
        return None if self._deferred_reduction(lay) else self.overlap

    def linear_forward(
        self, lay: TpLinear, tag: str, next_layer: tuple[TpLinear, str] | None
    ) -> None:
        if self.linear_mode:
            self._linear_gather(lay, tag, next_layer)
        M, db = self.M, self.db
        recompute = self.b.phase == "recompute"
        sp_group = "tp" if self.sp and lay.column else None
        elems = M * lay.k_local // (self.t if sp_group else 1)  # a norm output's local rows
        self.prec.forward_casts(lay.name, tag, elems, lay.weight_elems, recompute, sp_group)
        ub = self._overlapped(lay)
        if ub is not None:
            ub.forward(lay, tag)
            return
        if lay.column and self.sp:
            gb = self.prec.gather_bytes(lay.name)
            self.tp_collective(f"{tag}.ag_tp.fwd", K.ALL_GATHER, M * lay.k * gb)
        self.prec.gemm(f"{tag}.fwd", lay.name, M, lay.n_local, lay.k_local)
        if not lay.column and not self._deferred_reduction(lay):
            kind = K.REDUCE_SCATTER if self.sp else K.ALL_REDUCE
            self.tp_collective(f"{tag}.{'rs' if self.sp else 'ar'}_tp.fwd", kind, M * lay.n * db)

    def _grad_gather(self, lay: TpLinear, tag: str) -> None:
        """Row-parallel under sequence parallelism: all-gather the output gradient
        (quantised first under FP8, transposed after for the wgrad GEMM)."""
        M, p = self.M, self.prec
        p.grad_cast(lay.name, tag, (M // self.t) * lay.n, gathered=True)
        nbytes = M * lay.n * p.gather_bytes(lay.name)
        self.tp_collective(f"{tag}.ag_tp.bwd", K.ALL_GATHER, nbytes)
        p.gathered_transpose(lay.name, f"{tag}.grad", M * lay.n)

    def linear_backward(self, lay: TpLinear, tag: str) -> None:
        M, db, p = self.M, self.db, self.prec
        if self.linear_mode:
            self._linear_backward_gather(lay, tag)
        ub = self._overlapped(lay)
        if ub is not None:
            (ub.column_backward if lay.column else ub.row_backward)(lay, tag)
            return
        if not lay.column and self.sp and not self._deferred_reduction(lay):
            self._grad_gather(lay, tag)
        else:
            p.grad_cast(lay.name, tag, M * lay.n_local, gathered=False)
        h_in = None
        if lay.column and self.sp:
            nbytes = M * lay.k * p.gather_bytes(lay.name)
            h_in = self.tp_collective(f"{tag}.ag_tp.input", K.ALL_GATHER, nbytes, blocking=False)
        p.gemm(f"{tag}.dI", lay.name, M, lay.k_local, lay.n_local)
        h = None
        if lay.column:
            kind = K.REDUCE_SCATTER if self.sp else K.ALL_REDUCE
            name = f"{tag}.{'rs' if self.sp else 'ar'}_tp.bwd"
            h = self.tp_collective(name, kind, M * lay.k * db, blocking=False)
        if h_in is not None:
            self.b.wait(h_in)
            p.gathered_transpose(lay.name, f"{tag}.input", M * lay.k)
        p.gemm(f"{tag}.dW", lay.name, lay.k_local, lay.n_local, M)
        if h is not None:
            self.b.wait(h)
        if self.linear_mode and not (tag == "logits" and self.shared_output):
            assert self.sharder is not None
            if self.zero3 is not None:
                self.zero3.grad_ready(tag, max(lay.k_local, lay.n_local))
            else:
                self.sharder.reduce(
                    tag, lay.weight_elems, self.last_mb, max(lay.k_local, lay.n_local)
                )

    # -------------------------------------------------------------- blocks
    def attention_forward(self, layer: int) -> None:
        if self.cp_attention is not None:
            self.cp_attention.forward(layer)
        else:
            super().attention_forward(layer)

    def attention_backward(self, layer: int) -> None:
        if self.cp_attention is not None:
            self.cp_attention.backward(layer)
        else:
            super().attention_backward(layer)

    def block_forward(self, layer: int, recompute: bool) -> None:
        fsdp_unit = not recompute and self._fsdp_blocks()
        if not recompute:
            self._params_needed(f"L{layer}")
            if self.block_mode:
                nxt = f"L{layer + 1}" if layer + 1 < self.chunk.stop else None
                self._acquire(f"L{layer}", False, nxt)
            if fsdp_unit:
                assert self.fsdp is not None
                self.fsdp.pre_forward(f"L{layer}")
        super().block_forward(layer, recompute)
        if fsdp_unit:
            assert self.fsdp is not None
            self.fsdp.post_forward(f"L{layer}")

    def block_backward(self, layer: int) -> None:
        if self.setup.distribute_saved_activations and self.checkpointing:
            # Megatron's CheckpointFunction: gather the split saved input before recompute
            self.b.phase = "recompute"
            self.tp_collective(
                f"L{layer}.saved_input.ag_tp", K.ALL_GATHER, self.M * self.spec.hidden * self.db
            )
            self.b.phase = "bwd"
        if self.block_mode:
            nxt = f"L{layer - 1}" if layer - 1 >= self.chunk.start else None
            self._acquire(f"L{layer}", True, nxt)
        if self._fsdp_blocks():
            assert self.fsdp is not None
            self.fsdp.pre_backward(f"L{layer}")
        super().block_backward(layer)
        if self.block_mode:
            assert self.sharder is not None
            self.sharder.reduce(f"L{layer}", block_params(self.spec, self.t), self.last_mb)
        if self._fsdp_blocks():
            assert self.fsdp is not None
            self.fsdp.post_backward(f"L{layer}")
        if self.zero3 is not None:
            self.zero3.norms_ready(f"L{layer}")
        self._grad_ready(f"L{layer}")

    # ------------------------------------------------------ embedding, head
    def embedding_forward(self) -> None:
        """Vocabulary-parallel embedding lookup (all-reduce, or reduce-scatter with SP)."""
        M, h, db = self.M, self.spec.hidden, self.db
        self._params_needed("embedding")
        if self.zero3 is not None:
            self.zero3.use("embedding", False)
        elif self.linear_mode:
            assert self.sharder is not None
            self.sharder.gather("embedding", self.lg.weight_elems, False, blocking=True)
        if self.block_mode:
            self._acquire(self._root_unit(self.chunk), False, f"L{self.chunk.start}")
        if self.fsdp is not None:
            self.fsdp.pre_forward(self._fsdp_root())
        self.elementwise("embedding.fwd", M * h, 2)
        if self.sp:
            self.tp_collective("embedding.rs_tp", K.REDUCE_SCATTER, M * h * db)
        else:
            self.tp_collective("embedding.ar_tp", K.ALL_REDUCE, M * h * db)
        if self.spec.embedding_norm:  # BLOOM's word_embeddings_layernorm
            self.layernorm_forward("embedding_ln.fwd")
        if self.linear_mode:
            self.prefetched.clear()

    def embedding_backward(self) -> None:
        M, h, db = self.M, self.spec.hidden, self.db
        if self.zero3 is not None:
            self.zero3.use("embedding", True)
        if self.spec.embedding_norm:
            self.layernorm_backward("embedding_ln.bwd")
        if self.sp:
            self.tp_collective("embedding.ag_tp.bwd", K.ALL_GATHER, M * h * db)
        self.elementwise("embedding.bwd", M * h, 3)
        if self.zero3 is not None:
            self.zero3.grad_ready("embedding", max(self.lg.k_local, self.lg.n_local))
        elif self.sharder is not None and self.linear_mode:
            # tied: the output layer's gradient joins the embedding's, reduced once here
            unit = "logits" if self.shared_output else "embedding"
            self.sharder.reduce(
                unit, self.lg.weight_elems, self.last_mb, max(self.lg.k_local, self.lg.n_local)
            )
        if self.sharder is not None and self.block_mode:
            unit = self._root_unit(self.chunk)
            self.sharder.reduce(unit, self._unit_elems(unit), self.last_mb)
        if self.fsdp is not None:
            self.fsdp.post_backward(self._fsdp_root())
        self._grad_ready("embedding")

    def head_forward(self) -> None:
        """Final LayerNorm, logits and vocabulary-parallel cross-entropy."""
        M = self.M
        if self.block_mode and not self.tied_here:
            self._acquire("head", False, None)
        self._params_needed("head")
        self.layernorm_forward("final_ln.fwd")
        self.linear_forward(self.lg, "logits", None)
        if self.spec.output_bias:  # GPT-J's lm_head bias: read and write the logits
            self.elementwise("logits.bias.fwd", M * self.lg.n_local, 2)
        self._loss("fwd")

    def _loss(self, phase: Literal["fwd", "bwd"]) -> None:
        """The loss kernels of the framework's cross entropy over this GPU's logits
        (workloads/loss.py), with the TP all-reduces of per-token values between them
        (Megatron's max, predicted logit and sum of exponentials; one all-reduce of two
        per-token values for the others, a vocabulary split they do not do natively)."""
        impl = self.setup.cross_entropy
        M = self.M

        def compute(name: str, flops: float, nbytes: float) -> None:
            self.b.compute(name, C.ELEMENTWISE, flops, nbytes)

        def reduce(name: str) -> None:
            self.tp_collective(name, K.ALL_REDUCE, M * 4)

        emit_loss(compute, impl, phase, M * self.lg.n_local, self.db, reduce)
        if phase == "fwd" and not any(loss_steps(impl, "fwd").reduce_after.values()):
            self.tp_collective("loss.ar_tp", K.ALL_REDUCE, 2 * M * 4)

    def train_metrics(self) -> None:
        """Composer's training metrics on this microbatch's logits, after its backward.

        Composer 0.14-0.17 `Trainer._train_microbatch` calls `_eval_train_metrics` after
        `loss.backward()` on every microbatch (no flag turns it off in those versions);
        it runs each metric's `update` on the kept logits under autocast, and llm-foundry's
        ComposerMPTCausalLM declares LanguageCrossEntropy and LanguagePerplexity, whose
        update is `torch.nn.CrossEntropyLoss(reduction='sum')(logits, target)`
        (composer/metrics/nlp.py): autocast runs cross_entropy in fp32, so each is the
        eager loss's forward (the cast to fp32 and log_softmax, workloads/loss.py)."""
        elems = self.M * self.lg.n_local
        for i in range(self.setup.train_metrics):

            def compute(name: str, flops: float, nbytes: float, i: int = i) -> None:
                self.b.compute(f"train_metric{i}.{name}", C.ELEMENTWISE, flops, nbytes)

            emit_loss(compute, "eager", "fwd", elems, self.db)

    def head_backward(self) -> None:
        self._loss("bwd")
        if self.spec.output_bias:  # its gradient: a sum over the tokens
            self.elementwise("logits.bias.bwd", self.M * self.lg.n_local, 1)
        self.linear_backward(self.lg, "logits")
        self.layernorm_backward("final_ln.bwd")
        if self.zero3 is not None:
            self.zero3.norms_ready("final")
        if self.sharder is not None and self.block_mode and not self.tied_here:
            self.sharder.reduce("head", self._unit_elems("head"), self.last_mb)
        self._grad_ready("head")

    # -------------------------------------------------------------- passes
    def blocking_p2p(self, what: str) -> None:
        """One of DeepSpeed's blocking transfers: 'send_act', 'recv_act', 'send_grad',
        'recv_grad' (p2p.send / p2p.recv: the compute stream waits for it)."""
        p, s = self.setup.pp, self.stage
        op, kind = what.split("_")
        peer = (s + 1) % p if (op, kind) in (("send", "act"), ("recv", "grad")) else (s - 1) % p
        stream = f"p2p:{kind}_{'out' if op == 'send' else 'in'}"
        issue = self.sb.send_on if op == "send" else self.sb.recv_on
        self.b.wait(issue(f"{op}.{kind}", "pp", peer, self._p2p_bytes(), kind, stream))

    def _p2p_bytes(self) -> float:
        return self.M * self.spec.hidden * self.db / (self.t if self.sp else 1)

    def _enter(self, ps: Pass) -> None:
        self.chunk = self.chunks[ps.chunk]
        self.layer_stop = self.chunk.stop
        self.has_head = self.chunk.last
        self.last_mb = ps.mb == self.last_index

    def forward_pass(self, ps: Pass) -> None:
        """One chunk's forward on one microbatch: receive (or embed), blocks, send (or
        the head and loss)."""
        self._enter(ps)
        c, p = self.chunk, self.setup.pp
        self.b.phase = "fwd"
        if c.first:
            self.embedding_forward()
        elif not self.external_p2p:
            h = self.sb.recv_on(
                "recv.act", "pp", (self.stage - 1) % p, self._p2p_bytes(), "act", "p2p:act_in"
            )
            self.b.wait(h)
        for layer in range(c.start, c.stop):
            self.block_forward(layer, recompute=False)
        self.prec.amax_reduction("fwd", c.stop - c.start, "amax")  # fp8_autocast exit
        if c.last:
            self.head_forward()
        elif not self.external_p2p:
            self.sb.send_on(
                "send.act", "pp", (self.stage + 1) % p, self._p2p_bytes(), "act", "p2p:act_out"
            )
        if self.fsdp is not None:
            self.fsdp.post_forward(self._fsdp_root())
        if self.sharder is not None:
            self.sharder.secondary_filled = True

    def backward_pass(self, ps: Pass) -> None:
        """One chunk's backward on one microbatch, mirror of `forward_pass`."""
        self._enter(ps)
        c, p = self.chunk, self.setup.pp
        self.b.phase = "bwd"
        if self.fsdp is not None:
            self.fsdp.pre_backward(self._fsdp_root())
        if c.last:
            self.head_backward()
        elif not self.external_p2p:
            h = self.sb.recv_on(
                "recv.grad", "pp", (self.stage + 1) % p, self._p2p_bytes(), "grad", "p2p:grad_in"
            )
            self.b.wait(h)
        for layer in reversed(range(c.start, c.stop)):
            self.block_backward(layer)
        # the first FP8 module's backward reduces the backward amaxes
        self.prec.amax_reduction("bwd", c.stop - c.start, "amax")
        if c.first:
            self.embedding_backward()
        elif not self.external_p2p:
            self.sb.send_on(
                "send.grad", "pp", (self.stage - 1) % p, self._p2p_bytes(), "grad", "p2p:grad_out"
            )
        if self.sharder is not None and p == 1:
            self.resident.clear()
            self.sharder.wait_pending()
        if self.fsdp is not None:
            self.fsdp.final_callback()
        if c.last:
            self.train_metrics()
        if self.zero3 is not None:
            self.zero3.backward_done()
        if self.ds_grads:
            self.ds_grads[c.index].backward_done(self.last_mb)
