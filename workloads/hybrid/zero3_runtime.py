"""DeepSpeed ZeRO-3 on one rank: the coordinator's fetches and the gradient buckets.

Reusable by every DeepSpeed ZeRO-3 variant (`deepspeed` zero_stage 3, `zeropp`,
`zeropp-hier`): the all-gathers go through the Sharder, so ZeRO++'s options (qwZ int8
gathers, the hpZ secondary partition, qgZ all-to-all reductions) compose with the
coordinator's plan (workloads/hybrid/zero3_plan.py). Sources: microsoft/DeepSpeed at
commit 38327e0 (deepspeed/runtime/zero/partitioned_param_coordinator.py,
partition_parameters.py, stage3.py, runtime/comm/coalesced_collectives.py).

Gathers (PartitionedParameterCoordinator.fetch_sub_module): each module use follows the
plan: a coalesced all-gather of what the module lacks, the wait for its parameters in
flight, then the prefetch. All of them are issued from the allgather stream, which waits
for nothing on the compute stream; the handles are waited inside `with
stream(allgather_stream)`, so the qwZ dequantise kernel and the copies that cut a
coalesced gather into its parameters run there, and the compute stream then waits for
that stream. Releasing a parameter after its module ran (release_sub_module ->
`_partition`) fills its hpZ secondary partition the first time after each optimizer step
(`_partition_param_sec`: a copy of its 1/k slice on the compute stream); DeepSpeed then
synchronises the host with the stream (a TODO in its code), which the engine does not
model (it has no host waits: the prefetch reaches one module ahead either way).

Gradients (DeepSpeedZeroOptimizer_Stage3): every parameter's gradient, as its hook
fires, is copied into the contiguous `ipg` bucket on the reduce-and-partition stream
(which waits for the compute stream); a full bucket (reduce_bucket_size elements) is
reduced by `__avg_scatter_grads`: `reduce_scatter_coalesced` (flatten with padding,
divide, one reduce-scatter in the communication dtype), or with qgZ across more than one
node `all_to_all_quant_reduce`, tensor by tensor: each 2-D gradient through the
quantised all-to-all chain (Sharder.qgz_reduce), each 1-D one (biases, norms) and any
whose size is not a multiple of 2 x world (DeepSpeed's fallback) through a
`reduce_scatter_coalesced` of its own. Then its partition is copied or added into the
gradient partition (`partition_grads`). The backward's epilogue flushes the last bucket
and synchronises the stream. After the step the persistent parameters are all-gathered,
one collective each, and the secondary partitions are invalidated.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.builder import comm_stream
from workloads.hybrid.frameworks import DeepSpeedRuntime
from workloads.hybrid.groups import LEVEL_GROUP, group_size
from workloads.hybrid.setup import HybridSetup, block_linears, logits_linear
from workloads.hybrid.sharding import Gather, Sharder
from workloads.hybrid.streams import StreamBuilder
from workloads.hybrid.zero3_plan import Param, Use, Zero3Plan, plan_zero3
from workloads.models import TransformerSpec
from workloads.ops import COMPUTE_STREAM
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


def _param(name: str, numel: float, threshold: int, vector: bool = False) -> Param:
    return Param(name, float(numel), numel <= threshold, vector)


def _norm_params(name: str, spec: TransformerSpec, threshold: int) -> tuple[Param, ...]:
    """A norm's 1-D parameters: its weight, and its bias when it has one (LayerNorm)."""
    h = spec.hidden
    out = [_param(f"{name}.w", h, threshold, True)]
    if spec.norm_params > h:
        out.append(_param(f"{name}.b", spec.norm_params - h, threshold, True))
    return tuple(out)


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
                ps.append(_param(f"L{layer}.{lay.name}.b", lay.bias_elems, threshold, True))
            modules[f"L{layer}.{lay.name}"] = tuple(ps)
        norms[f"L{layer}"] = tuple(
            p
            for i in range(1, spec.block_norms + 1)
            for p in _norm_params(f"L{layer}.ln{i}", spec, threshold)
        )
    norms["final"] = _norm_params("final_ln", spec, threshold)
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
        self.setup = setup
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
        self.bucket: list[tuple[Param, int]] = []  # (parameter, its larger dimension)
        self.flushes = 0
        self.last_reduce: int | None = None
        self.microbatch = 0
        sh = setup.sharding
        # hpZ: a secondary partition distinct from what the first forward reads
        self.secondary_k = (
            group_size(setup, LEVEL_GROUP[sh.backward_level])
            if sh.backward_level not in ("global", sh.forward_level)
            else 1
        )
        self.secondary: set[str] = set()  # parameters whose secondary tensor is valid
        # DeepSpeed quantises gradients only across more than one node
        self.quantized_grads = sh.qgz and setup.world > setup.gpus_per_node

    # ------------------------------------------------------------- gathers
    def _gather(self, params: tuple[Param, ...], index: int, backward: bool, tag: str) -> None:
        elems = sum(p.numel for p in params)
        level = None
        if self.secondary_k > 1:  # all_gather_coalesced: params[0].ds_secondary_tensor
            sh = self.setup.sharding
            level = sh.backward_level if params[0].name in self.secondary else sh.forward_level
        self.handles[index] = self.sharder.gather(
            f"{tag}.z3g{index}",
            elems,
            backward,
            blocking=False,
            stream=ALLGATHER_STREAM,
            coalesced=len(params) > 1,
            level=level,
        )

    def _release(self, step: int) -> None:
        """release_sub_module of trace step `step` (its module has run): the first
        release of a parameter after the step fills its hpZ secondary partition."""
        if self.secondary_k == 1 or step < 0:
            return
        for p in self.plan.steps[step].release:
            if p.name in self.secondary:
                continue
            self.secondary.add(p.name)
            part = p.numel / self.secondary_k
            self.b.compute(f"{p.name}.hpz.partition_sec", C.MEMCPY, 0.0, 2 * self.db * part)

    def use(self, module: str, backward: bool) -> None:
        """fetch_sub_module for the next module use of the trace (after the previous
        use's release)."""
        expected = self.model.trace[self.step]
        if expected.module != module:
            raise RuntimeError(f"ZeRO-3 trace out of step: {module} where {expected.module}")
        self._release(self.step - 1)
        sp = self.plan.steps[self.step]
        if sp.fetch:
            self._gather(sp.fetch, sp.gather_index, backward, module)
        for index in (*sp.wait_for, *([sp.gather_index] if sp.fetch else [])):
            g = self.handles.pop(index, None)
            if g is not None:
                self.sharder.finish(g, ALLGATHER_STREAM)
        if sp.prefetch:
            self._gather(sp.prefetch, sp.prefetch_index, backward, module)
        self.step += 1

    # ----------------------------------------------------------- gradients
    def grad_ready(self, module: str, max_dim: int = 0) -> None:
        """A module's gradients are ready: into the ipg bucket (flushing a full one)."""
        for p in self.model.modules.get(module, ()):
            self._add(p, max_dim, module)

    def norms_ready(self, key: str) -> None:
        """A block's (or the final) norm gradients are ready."""
        for p in self.model.norms[key]:
            self._add(p, 0, f"{key}.norms")

    def _add(self, p: Param, max_dim: int, tag: str) -> None:
        if p.numel <= 0 or self.shard == 1:
            return
        if (
            self.bucket
            and sum(q.numel for q, _ in self.bucket) + p.numel > self.rt.reduce_bucket_elems
        ):
            self._flush()
        deps = self.b.last_compute()
        if self.rt.contiguous_gradients and p.numel <= self.rt.reduce_bucket_elems:
            self._kernel(f"{p.name}.z3.ipg_copy", p.numel, 2 * self.db * p.numel, deps)
        self.bucket.append((p, max_dim))

    def _kernel(self, name: str, elems: float, nbytes: float, deps: tuple[int, ...] = ()) -> int:
        if self.rt.overlap_comm:
            return self.b.side_compute(name, C.ELEMENTWISE, elems, nbytes, REDUCE_STREAM, deps)
        return self.b.compute(name, C.ELEMENTWISE, elems, nbytes)

    def _reduce_scatter(self, tag: str, n: float, deps: tuple[int, ...]) -> int:
        """reduce_scatter_coalesced: flatten with padding and divide, cast to the
        communication dtype, one reduce-scatter over the shard group."""
        cb = self.rt.comm_bytes
        deps = (self._kernel(f"{tag}.flatten_divide", n, 4 * self.db * n, deps),)
        if cb != self.db:
            deps = (self._kernel(f"{tag}.to_comm_dtype", n, (self.db + cb) * n, deps),)
        return self.b.side_collective(
            f"{tag}.rs_shard", K.REDUCE_SCATTER, "shard", n * cb, comm_stream("shard"), deps
        )

    def _flush(self) -> None:
        """__reduce_and_partition_ipg_grads over the bucket."""
        if not self.bucket:
            return
        n = sum(p.numel for p, _ in self.bucket)
        tag = f"z3.ipg{self.flushes}"
        self.flushes += 1
        deps = self.b.last_compute()
        if self.quantized_grads:
            tail = deps[0] if deps else None
            world2 = 2 * self.setup.world
            for p, dim in sorted(self.bucket, key=lambda e: e[0].name):
                prev = () if tail is None else (tail,)
                if p.vector or p.numel % world2:
                    tail = self._reduce_scatter(f"{tag}.{p.name}", p.numel, prev)
                else:
                    stream = REDUCE_STREAM if self.rt.overlap_comm else COMPUTE_STREAM
                    tail = self.sharder.qgz_reduce(f"{tag}.{p.name}", p.numel, dim, stream, prev)
        else:
            tail = self._reduce_scatter(tag, n, deps)
        part = n / self.shard
        gb = self.rt.grad_accum_bytes
        nbytes = (self.db + gb) * part if self.microbatch == 0 else (self.db + 2 * gb) * part
        assert tail is not None
        tail = self._kernel(f"{tag}.partition_grads", part, nbytes, (tail,))
        if not self.rt.overlap_comm:
            self.b.wait(tail)
        self.last_reduce = tail
        self.bucket = []

    def backward_done(self) -> None:
        """The backward's epilogue: flush the last bucket and synchronise the reduce
        stream (the next compute waits for it); the trace restarts."""
        self._release(self.step - 1)
        self._flush()
        if self.last_reduce is not None:
            self.b.wait(self.last_reduce, "wait:z3.reduce_and_partition")
        self.last_reduce = None
        self.step = 0
        self.microbatch += 1

    def after_step(self) -> None:
        """_post_step: all-gather every persistent parameter, one collective each
        (partition_parameters._allgather_params_coalesced: async launches, one wait),
        then invalidate the secondary partitions (invalidate_secondary_tensor)."""
        self.secondary.clear()
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
