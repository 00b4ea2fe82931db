"""DeepSpeed ZeRO-3 on one rank: the coordinator's fetches and the gradient buckets.

Reusable by every DeepSpeed ZeRO-3 variant: the all-gathers go through the Sharder, so
ZeRO++'s options (qwZ int8 gathers, the hpZ secondary partition, qgZ all-to-all
reductions) compose with the coordinator's plan (workloads/hybrid/zero3_plan.py).

Gathers (PartitionedParameterCoordinator): each module use follows the plan: a
coalesced all-gather of what the module lacks, the wait for its parameters in flight,
then the prefetch. All of them run from the allgather stream, which waits for nothing on
the compute stream; all-gathers and gradient reduce-scatters share the data-parallel
process group and so one NCCL stream.

Gradients (DeepSpeedZeroOptimizer_Stage3, stage3.py): every parameter's gradient, as
its hook fires, is copied into the contiguous `ipg` bucket on the reduce-and-partition
stream (which waits for the compute stream); a full bucket (reduce_bucket_size elements)
is reduced by `reduce_scatter_coalesced` (flatten with padding, divide, reduce-scatter in
the communication dtype; qgZ: the quantised all-to-all) and its partition copied or
added into the gradient partition (`partition_grads`). The backward's epilogue flushes
the last bucket and synchronises the stream. After the step the persistent parameters
are all-gathered, one collective each.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.builder import comm_stream
from workloads.hybrid.frameworks import DeepSpeedRuntime
from workloads.hybrid.setup import HybridSetup, block_linears, logits_linear
from workloads.hybrid.sharding import Gather, Sharder
from workloads.hybrid.streams import StreamBuilder
from workloads.hybrid.zero3_plan import Param, Use, Zero3Plan, plan_zero3
from workloads.models import TransformerSpec
from workloads.ops import CollectiveKind as K
from workloads.ops import ComputeKind as C
from workloads.transformer import LINEAR_NAMES

ALLGATHER_STREAM = "ds:allgather"
REDUCE_STREAM = "ds:reduce_and_partition"


@dataclass(frozen=True)
class Zero3Model:
    """The modules a rank runs (parameters per GPU), their trace for one step and the
    small parameters outside the linears (norms; persistent under the default threshold)."""

    modules: dict[str, tuple[Param, ...]]
    trace: list[Use]
    norms: dict[str, tuple[Param, ...]]


def _param(name: str, numel: float, threshold: int) -> Param:
    return Param(name, float(numel), numel <= threshold)


def zero3_model(spec: TransformerSpec, setup: HybridSetup, threshold: int) -> Zero3Model:
    """The modules and trace of a pure data-parallel (pp = 1) ZeRO-3 step."""
    lins = block_linears(spec, setup.tp)
    lg = logits_linear(spec, setup.tp)
    modules: dict[str, tuple[Param, ...]] = {}
    emb = [_param("wte", lg.weight_elems, threshold)]
    if spec.position_params:
        emb.append(_param("wpe", spec.position_params, threshold))
    modules["embedding"] = tuple(emb)
    norms: dict[str, tuple[Param, ...]] = {}
    for layer in range(spec.layers):
        for lay in lins:
            ps = [_param(f"L{layer}.{lay.name}.w", lay.weight_elems, threshold)]
            if lay.bias_elems:
                ps.append(_param(f"L{layer}.{lay.name}.b", lay.bias_elems, threshold))
            modules[f"L{layer}.{lay.name}"] = tuple(ps)
        norms[f"L{layer}"] = tuple(
            _param(f"L{layer}.ln{i}", spec.norm_params, threshold) for i in (1, 2)
        )
    norms["final"] = (_param("final_ln", spec.norm_params, threshold),)
    tied = spec.tied_embeddings
    modules["logits"] = (
        (modules["embedding"][0],) if tied else (_param("lm_head", lg.weight_elems, threshold),)
    )
    fwd = [Use("embedding", False)]
    for layer in range(spec.layers):
        fwd += [Use(f"L{layer}.{n}", False) for n in LINEAR_NAMES]
    fwd.append(Use("logits", False))
    bwd = [Use("logits", True)]
    for layer in reversed(range(spec.layers)):
        if setup.recompute == "full":
            bwd += [Use(f"L{layer}.{n}", True) for n in LINEAR_NAMES]
        bwd += [Use(f"L{layer}.{n}", True) for n in reversed(LINEAR_NAMES)]
    bwd.append(Use("embedding", True))
    return Zero3Model(modules, fwd + bwd, norms)


def zero3_plan(spec: TransformerSpec, setup: HybridSetup, rt: DeepSpeedRuntime) -> Zero3Plan:
    """The coordinator's plan for one step of this setup."""
    m = zero3_model(spec, setup, rt.persistence_threshold_elems)
    return plan_zero3(
        m.modules, m.trace, rt.prefetch_bucket_elems, rt.max_live_elems, rt.max_reuse_distance_elems
    )


def persistent_elems(
    spec: TransformerSpec, setup: HybridSetup, rt: DeepSpeedRuntime
) -> tuple[float, int]:
    """Elements and count of the persistent parameters (kept whole on every GPU)."""
    m = zero3_model(spec, setup, rt.persistence_threshold_elems)
    seen: dict[str, Param] = {}
    for ps in (*m.modules.values(), *m.norms.values()):
        for p in ps:
            seen[p.name] = p
    kept = [p for p in seen.values() if p.persistent]
    return float(sum(p.numel for p in kept)), len(kept)


class Zero3Runtime:
    """Emits one rank's ZeRO-3 gathers by the plan, and its bucketed gradient reduction."""

    def __init__(
        self,
        b: StreamBuilder,
        sharder: Sharder,
        spec: TransformerSpec,
        setup: HybridSetup,
        rt: DeepSpeedRuntime,
        db: int,
    ):
        self.b, self.sharder, self.rt, self.db = b, sharder, rt, db
        self.model = zero3_model(spec, setup, rt.persistence_threshold_elems)
        self.plan = plan_zero3(
            self.model.modules,
            self.model.trace,
            rt.prefetch_bucket_elems,
            rt.max_live_elems,
            rt.max_reuse_distance_elems,
        )
        self.shard = setup.shard
        self.step = 0
        self.handles: dict[int, Gather] = {}
        self.bucket: list[float] = []
        self.bucket_max_dim = 0
        self.flushes = 0
        self.last_reduce: int | None = None
        self.microbatch = 0

    # ------------------------------------------------------------- gathers
    def _gather(self, params: tuple[Param, ...], index: int, backward: bool, tag: str) -> None:
        elems = sum(p.numel for p in params)
        self.handles[index] = self.sharder.gather(
            f"{tag}.z3g{index}", elems, backward, blocking=False, stream=ALLGATHER_STREAM
        )

    def use(self, module: str, backward: bool) -> None:
        """fetch_sub_module for the next module use of the trace."""
        expected = self.model.trace[self.step]
        if expected.module != module:
            raise RuntimeError(f"ZeRO-3 trace out of step: {module} where {expected.module}")
        sp = self.plan.steps[self.step]
        if sp.fetch:
            self._gather(sp.fetch, sp.gather_index, backward, module)
        for index in (*sp.wait_for, *([sp.gather_index] if sp.fetch else [])):
            g = self.handles.pop(index, None)
            if g is not None:
                self.sharder.finish(g)
        if sp.prefetch:
            self._gather(sp.prefetch, sp.prefetch_index, backward, module)
        self.step += 1

    # ----------------------------------------------------------- gradients
    def grad_ready(self, module: str, max_dim: int = 0) -> None:
        """A module's gradients are ready: into the ipg bucket (flushing a full one)."""
        self._add(sum(p.numel for p in self.model.modules.get(module, ())), max_dim, module)

    def norms_ready(self, key: str) -> None:
        """A block's (or the final) norm gradients are ready."""
        self._add(sum(p.numel for p in self.model.norms[key]), 0, f"{key}.norms")

    def _add(self, elems: float, max_dim: int, tag: str) -> None:
        if elems <= 0 or self.shard == 1:
            return
        if self.bucket and sum(self.bucket) + elems > self.rt.reduce_bucket_elems:
            self._flush()
        deps = self.b.last_compute()
        if self.rt.contiguous_gradients and elems <= self.rt.reduce_bucket_elems:
            self._kernel(f"{tag}.z3.ipg_copy", elems, 2 * self.db * elems, deps)
        self.bucket.append(elems)
        self.bucket_max_dim = max(self.bucket_max_dim, max_dim)

    def _kernel(self, name: str, elems: float, nbytes: float, deps: tuple[int, ...] = ()) -> int:
        if self.rt.overlap_comm:
            return self.b.side_compute(name, C.ELEMENTWISE, elems, nbytes, REDUCE_STREAM, deps)
        return self.b.compute(name, C.ELEMENTWISE, elems, nbytes)

    def _flush(self) -> None:
        """__reduce_and_partition_ipg_grads over the bucket."""
        if not self.bucket:
            return
        n = sum(self.bucket)
        tag = f"z3.ipg{self.flushes}"
        self.flushes += 1
        cb = self.rt.comm_bytes
        if self.sharder.sh.qgz:
            self.sharder.reduce(tag, n, True, self.bucket_max_dim)
            tail = self.sharder.pending.pop()
        else:
            deps = (
                self._kernel(f"{tag}.flatten_divide", n, 4 * self.db * n, self.b.last_compute()),
            )
            if cb != self.db:
                deps = (self._kernel(f"{tag}.to_comm_dtype", n, (self.db + cb) * n, deps),)
            tail = self.b.side_collective(
                f"{tag}.rs_shard", K.REDUCE_SCATTER, "shard", n * cb, comm_stream("shard"), deps
            )
        part = n / self.shard
        gb = self.rt.grad_accum_bytes
        nbytes = (self.db + gb) * part if self.microbatch == 0 else (self.db + 2 * gb) * part
        tail = self._kernel(f"{tag}.partition_grads", part, nbytes, (tail,))
        if not self.rt.overlap_comm:
            self.b.wait(tail)
        self.last_reduce = tail
        self.bucket, self.bucket_max_dim = [], 0

    def backward_done(self) -> None:
        """The backward's epilogue: flush the last bucket and synchronise the reduce
        stream (the next compute waits for it); the trace restarts."""
        self._flush()
        if self.last_reduce is not None:
            self.b.wait(self.last_reduce, "wait:z3.reduce_and_partition")
        self.last_reduce = None
        self.step = 0
        self.microbatch += 1

    def after_step(self) -> None:
        """_post_step: all-gather every persistent parameter, one collective each
        (partition_parameters._allgather_params_coalesced: async launches, one wait)."""
        if self.shard == 1:
            return
        seen: dict[str, Param] = {}
        for ps in (*self.model.modules.values(), *self.model.norms.values()):
            for p in ps:
                if p.persistent:
                    seen[p.name] = p
        handles = [
            self.b.collective(
                f"{p.name}.persist.ag_shard",
                K.ALL_GATHER,
                "shard",
                p.numel * self.db,
                blocking=False,
            )
            for p in seen.values()
        ]
        if handles:  # launched back to back, the last one waited (then a device sync)
            self.b.wait(handles[-1], "wait:z3.persistent_allgather")
