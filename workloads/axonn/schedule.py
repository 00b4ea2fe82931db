"""The collectives of one AxoNN iteration: the one description the program and the
analytical model both read.

Why one description: the simulated program (program.py) and the analytical ranking
(simulator/search/analytical.py) used to count the Z collectives separately (four per layer and
microbatch in the program, three in the model), so the search ranked grids by a schedule
the engine did not run. Both now take every collective from `AxonnCalls`: the program
decides only *when* each call is issued and waited (overlap), the model only how long it
takes on a group's bandwidth. tests/test_axonn_schedule.py checks that the simulated
bytes per group equal `iteration_calls` for every implementation and weight lifetime.

Sizes are NCCL buffer sizes per GPU, as torch.distributed passes them: an all-gather's
output, a reduce-scatter's input, an all-reduce's buffer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

from workloads.axonn.implementation import ImplementationPreset, WeightPolicy
from workloads.axonn.layers import LinearLayout, block_layouts, logits_layout, padded_vocab
from workloads.axonn.params import Grid
from workloads.models import TransformerSpec
from workloads.ops import CollectiveKind as K

LOSS_STATS_BYTES = 4  # fp32 per token: the vocab-parallel cross entropy's statistics


@dataclass(frozen=True)
class Call:
    """One collective: op name suffix, kind, group kind and buffer bytes per GPU."""

    name: str
    kind: K
    group: str
    nbytes: float


@dataclass(frozen=True)
class LinearPass:
    """A linear layer's collectives in one pass: the Z all-gather before its GEMM (None
    when the weight is at hand), the all-reduce of its output or input gradient, and in
    backward the Z reduce-scatter of its weight gradient (None when Z = 1)."""

    gather: Call | None
    reduce: Call
    scatter: Call | None = None

    def calls(self) -> tuple[Call, ...]:
        return tuple(c for c in (self.gather, self.reduce, self.scatter) if c is not None)


@dataclass(frozen=True)
class AxonnCalls:
    """Every collective of one rank's iteration, by where it is issued."""

    spec: TransformerSpec
    grid: Grid
    preset: ImplementationPreset
    policy: WeightPolicy
    tokens: int  # per GPU per microbatch
    checkpointing: bool
    transpose_alternate: bool = True

    # ------------------------------------------------------------- layouts
    @property
    def db(self) -> int:
        return self.spec.dtype_bytes

    @property
    def wb(self) -> int:
        """Bytes per element of the stored and Z-gathered weights (fp32 parameters under
        autocast in litgpt, else the model's dtype)."""
        return self.preset.weight_dtype_bytes or self.spec.dtype_bytes

    @cached_property
    def blocks(self) -> list[LinearLayout]:
        return block_layouts(self.spec, self.grid, self.transpose_alternate)

    @cached_property
    def logits(self) -> LinearLayout:
        """axonn-0.2's tied output layer, a 4D linear (vocabulary over Y, sharded over Z)."""
        return logits_layout(self.spec, self.grid)

    @property
    def h_res(self) -> int:
        """Residual-stream width per GPU (the hidden split over X, or Y untransposed)."""
        return self.spec.hidden // (self.grid.x if self.transpose_alternate else self.grid.y)

    @property
    def xy_vocab(self) -> int:
        """sc24: vocabulary rows per GPU of the embedding split over the X·Y group."""
        xy = self.grid.x * self.grid.y
        return padded_vocab(self.spec.vocab, xy) // xy

    # ------------------------------------------------------------- linears
    def _gather(self, lay: LinearLayout) -> Call | None:
        if self.grid.z == 1:  # axonn's _gather returns its input on a group of one
            return None
        return Call("ag_z", K.ALL_GATHER, "z", lay.gathered_elems * self.wb)

    def _gathers_in(self, pass_: str, cached: bool, first_microbatch: bool) -> bool:
        """Does this pass gather the weight?"""
        if cached:  # gathered by the first microbatch's forward, kept for the iteration
            return pass_ == "fwd" and first_microbatch
        if pass_ in ("fwd", "recompute"):
            return True
        # backward: the weight saved by the pass before it, unless re-gathered
        return self.policy.lifetime == "regather"

    def linear(
        self, lay: LinearLayout, pass_: str, cached: bool, first_microbatch: bool = True
    ) -> LinearPass:
        """The collectives of `lay` in pass 'fwd', 'recompute' or 'bwd'."""
        gather = self._gather(lay) if self._gathers_in(pass_, cached, first_microbatch) else None
        if pass_ != "bwd":
            reduce = Call(
                f"ar_{lay.group_k}", K.ALL_REDUCE, lay.group_k, self.tokens * lay.n_local * self.db
            )
            return LinearPass(gather, reduce)
        reduce = Call(
            f"ar_{lay.group_n}", K.ALL_REDUCE, lay.group_n, self.tokens * lay.k_local * self.db
        )
        scatter = (
            None
            if self.grid.z == 1
            else Call("rs_z", K.REDUCE_SCATTER, "z", lay.gathered_elems * self.db)
        )
        return LinearPass(gather, reduce, scatter)

    def block(self, layer: int, first_microbatch: bool) -> Iterator[Call]:
        """A block's collectives in one microbatch (forward, recompute, backward)."""
        cached = self.policy.cached(layer)
        passes = ("fwd", "recompute", "bwd") if self.checkpointing else ("fwd", "bwd")
        for pass_ in passes:
            for lay in self.blocks:
                yield from self.linear(lay, pass_, cached, first_microbatch).calls()

    # ---------------------------------------------------------- head / tail
    def embedding_forward(self) -> tuple[Call, ...]:
        """sc24: the vocab-parallel lookup's all-reduce over X·Y (full hidden width)."""
        return (Call("ar_xy", K.ALL_REDUCE, "xy", self.tokens * self.spec.hidden * self.db),)

    def transformer_gather(self) -> Call:
        """sc24: the transformer's output gathered over X (forward) and its input's
        gradient gathered over X (backward of the input drop)."""
        return Call("ag_x", K.ALL_GATHER, "x", self.tokens * self.spec.hidden * self.db)

    def loss_statistics(self) -> tuple[Call, ...]:
        """sc24: vocab-parallel cross entropy (max, target logit, sum of exponentials,
        fp32 per token, over X·Y) and the loss / mask-count sums over Z (fp32 scalars)."""
        stat = self.tokens * LOSS_STATS_BYTES
        return (
            Call("ce_max.ar_xy", K.ALL_REDUCE, "xy", stat),
            Call("ce_target.ar_xy", K.ALL_REDUCE, "xy", stat),
            Call("ce_sum.ar_xy", K.ALL_REDUCE, "xy", stat),
            Call("mask.ar_z", K.ALL_REDUCE, "z", 4),
            Call("loss.ar_z", K.ALL_REDUCE, "z", 4),
        )

    def logits_backward(self) -> Call:
        """sc24: the output layer's input gradient all-reduced over X·Y."""
        return Call("ar_xy", K.ALL_REDUCE, "xy", self.tokens * self.spec.hidden * self.db)

    def tied_gather(self) -> Call | None:
        """axonn-0.2: the embedding's Z gather of the tied (4D) vocabulary weight."""
        return self._gather(self.logits)

    def embedding_reduce_4d(self) -> Call:
        """axonn-0.2: the embedding's partial sums over the vocabulary split (Y)."""
        lg = self.logits
        return Call(
            f"ar_{lg.group_n}", K.ALL_REDUCE, lg.group_n, self.tokens * self.h_res * self.db
        )

    def loss_reduce_4d(self) -> Call:
        """axonn-0.2: the loss statistics (two fp32 per token) over the vocabulary split."""
        lg = self.logits
        return Call(f"loss.ar_{lg.group_n}", K.ALL_REDUCE, lg.group_n, 2 * self.tokens * 4)

    def head(self, first_microbatch: bool) -> Iterator[Call]:
        """Embedding, output layer and loss collectives of one microbatch."""
        if self.preset.embedding == "replicated":
            # a local embedding lookup; the untied output head is a 4D linear
            lg = self.logits
            yield from self.linear(lg, "fwd", False, first_microbatch).calls()
            yield self.loss_reduce_4d()
            yield from self.linear(lg, "bwd", False, first_microbatch).calls()
            return
        if self.preset.embedding == "vocab-parallel-xy":
            yield from self.embedding_forward()
            yield self.transformer_gather()
            yield from self.loss_statistics()
            yield self.logits_backward()
            yield self.transformer_gather()
            return
        lg = self.logits
        gather = self.tied_gather()
        if gather is not None:
            yield gather
        yield self.embedding_reduce_4d()
        yield from self.linear(lg, "fwd", False, first_microbatch).calls()
        yield self.loss_reduce_4d()
        yield from self.linear(lg, "bwd", False, first_microbatch).calls()

    # ------------------------------------------------------- gradient sync
    def norm_params(self) -> list[tuple[str, float]]:
        """(suffix, elements per GPU) of one normalisation on the residual stream's slice:
        LayerNorm's weight and bias, RMSNorm's weight."""
        out = [("w", float(self.h_res))]
        if self.spec.norm == "layernorm":
            out.append(("b", float(self.h_res)))
        return out

    def small_params(self) -> list[tuple[str, float]]:
        """(name, elements) of the per-block parameters that are not Z-sharded weights:
        the two norms' and, where the architecture has them, the linear biases."""
        out = [(f"{ln}.{p}", e) for ln in ("ln1", "ln2") for p, e in self.norm_params()]
        if self.spec.bias:
            out += [(f"{lay.name}.bias", float(lay.n_local)) for lay in self.blocks]
        return out

    def vocab_elems(self) -> float:
        """litgpt: the replicated token embedding's elements (padded vocabulary x hidden)."""
        return float(padded_vocab(self.spec.vocab, 1) * self.spec.hidden)

    def final_norm_elems(self) -> float:
        return sum(e for _, e in self.norm_params())

    def head_params(self) -> float:
        """The word embedding and an untied output layer as the implementation stores
        them: split over X·Y and replicated (sc24), or 4D-sharded like a linear (0.2), or
        a replicated embedding and a 4D output linear (litgpt)."""
        if self.preset.embedding == "replicated":
            return self.vocab_elems() + self.logits.shard_elems
        per_matrix: float = (
            self.xy_vocab * self.spec.hidden
            if self.preset.embedding == "vocab-parallel-xy"
            else self.logits.shard_elems
        )
        return per_matrix * (1 if self.spec.tied_embeddings else 2)

    def params_per_gpu(self) -> float:
        """Parameters a GPU stores (Z-sharded weights plus what is replicated)."""
        sp = self.spec
        per_block = sum(lay.shard_elems for lay in self.blocks)
        small = sum(e for _, e in self.small_params())
        tail = self.final_norm_elems() + sp.position_params
        return sp.layers * (per_block + small) + tail + self.head_params()

    def _gradient_sync_plan(self) -> list[tuple[tuple[Call, ...], bool]]:
        """The gradient sync as runs of calls, each issued once or once per block
        (reversed: last block first, as the backward leaves them); per-block call names
        carry a '{layer}' placeholder."""
        sp = self.spec
        db = self.preset.grad_dtype_bytes
        final = self.final_norm_elems()
        small = self.small_params()
        if self.preset.grad_sync == "one-bucket":
            # sync_gradients over Z, one fp32 tensor at a time: every parameter that is
            # not a Z-sharded weight (model.parameters() order), then Megatron DDP's one
            # fp32 bucket over data
            head = self.xy_vocab * sp.hidden * db
            first = [Call("word_embedding.ar_z", K.ALL_REDUCE, "z", head)]
            if sp.position_params:
                first.append(Call("pos_embedding.ar_z", K.ALL_REDUCE, "z", sp.position_params * db))
            per_block = [Call(f"L{{layer}}.{n}.ar_z", K.ALL_REDUCE, "z", e * db) for n, e in small]
            last = [Call("final_norm.ar_z", K.ALL_REDUCE, "z", final * db)]
            if not sp.tied_embeddings:
                last.append(Call("output_layer.ar_z", K.ALL_REDUCE, "z", head))
            bucket = self.params_per_gpu() * db
            last.append(Call("grad_buffer.ar_data", K.ALL_REDUCE, "data", bucket))
            return [(tuple(first), False), (tuple(per_block), True), (tuple(last), False)]
        if self.preset.grad_sync == "z-then-data":
            return self._z_then_data_plan(db)
        shards = [
            Call(f"L{{layer}}.{lay.name}.ar_data", K.ALL_REDUCE, "data", lay.shard_elems * db)
            for lay in reversed(self.blocks)
        ]
        head_calls = [Call("logits.ar_data", K.ALL_REDUCE, "data", self.logits.shard_elems * db)]
        if not sp.tied_embeddings:
            head_calls.append(
                Call("embedding.ar_data", K.ALL_REDUCE, "data", self.logits.shard_elems * db)
            )
        pairs = [
            Call(f"L{{layer}}.{n}.ar_{g}", K.ALL_REDUCE, g, e * db)
            for n, e in small
            for g in ("data", "z")
        ]
        tail = [
            Call("final_norm.ar_data", K.ALL_REDUCE, "data", final * db),
            Call("final_norm.ar_z", K.ALL_REDUCE, "z", final * db),
        ]
        if sp.position_params:
            tail.append(
                Call("pos_embedding.ar_world", K.ALL_REDUCE, "world", sp.position_params * db)
            )
        return [
            (tuple(shards), True),
            (tuple(head_calls), False),
            (tuple(pairs), True),
            (tuple(tail), False),
        ]

    def _z_then_data_plan(self, db: int) -> list[tuple[tuple[Call, ...], bool]]:
        """litgpt: axonn's sync_gradients_depth_parallel (every parameter that is not a
        Z-sharded weight over Z: embedding, norms, biases), then sync_gradients_data_
        parallel (every parameter over data), one tensor at a time in model.parameters()
        order."""
        sp = self.spec
        small = self.small_params()
        final = self.final_norm_elems()
        vocab = self.vocab_elems()

        def head(g: str) -> list[Call]:
            out = [Call(f"word_embedding.ar_{g}", K.ALL_REDUCE, g, vocab * db)]
            if sp.position_params:
                out.append(Call(f"pos_embedding.ar_{g}", K.ALL_REDUCE, g, sp.position_params * db))
            return out

        z_block = [Call(f"L{{layer}}.{n}.ar_z", K.ALL_REDUCE, "z", e * db) for n, e in small]
        shards = {lay.name: lay.shard_elems for lay in self.blocks}
        data_block = [
            Call(f"L{{layer}}.{n}.ar_data", K.ALL_REDUCE, "data", e * db) for n, e in small
        ] + [
            Call(f"L{{layer}}.{name}.ar_data", K.ALL_REDUCE, "data", e * db)
            for name, e in shards.items()
        ]
        data_tail = [
            Call("final_norm.ar_data", K.ALL_REDUCE, "data", final * db),
            Call("logits.ar_data", K.ALL_REDUCE, "data", self.logits.shard_elems * db),
        ]
        return [
            (tuple(head("z")), False),
            (tuple(z_block), True),
            ((Call("final_norm.ar_z", K.ALL_REDUCE, "z", final * db),), False),
            (tuple(head("data")), False),
            (tuple(data_block), True),
            (tuple(data_tail), False),
        ]

    def gradient_sync(self) -> Iterator[Call]:
        """The collectives after the last microbatch, in issue order."""
        for calls, per_block in self._gradient_sync_plan():
            if not per_block:
                yield from calls
                continue
            for layer in reversed(range(self.spec.layers)):
                for c in calls:
                    yield Call(c.name.format(layer=layer), c.kind, c.group, c.nbytes)

    # ------------------------------------------------------------ totals
    def iteration(self, microbatches: int) -> Iterator[tuple[Call, int]]:
        """Every collective of the iteration with how many times it is issued (blocks of
        one kind, cached or not, are counted once with their multiplicity)."""
        layers, cached = self.spec.layers, self.policy.cached_blocks
        for first, n in ((True, 1), (False, microbatches - 1)):
            if n <= 0:
                continue
            for c in self.head(first):
                yield c, n
            for start, count in ((0, min(cached, layers)), (cached, layers - cached)):
                if count > 0:
                    for c in self.block(start, first):
                        yield c, n * count
        for calls, per_block in self._gradient_sync_plan():
            for c in calls:
                yield c, layers if per_block else 1
