"""From a strategy's parameters to `HybridSetup`s: degrees, microbatches, validation.

`candidate_setups` lists every valid configuration a strategy allows on a cluster
(degrees the parameters leave open x microbatch sizes); `choose_setup` picks the default
one (the smallest model-parallel degrees whose memory fits, then the largest microbatch
that fits, keeping pipelines at >= 4 microbatches per stage when it can).
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.errors import WorkloadError
from workloads.hybrid.context import check_context_parallel
from workloads.hybrid.frameworks import DeepSpeedRuntime
from workloads.hybrid.memory import hybrid_memory
from workloads.hybrid.params import (
    DeepSpeedParallel,
    FsdpPpParallel,
    FsdpTpParallel,
    HybridParallel,
    MegatronParallel,
    ShardedParallel,
    ZeroppHierParallel,
    ZeroppParallel,
)
from workloads.hybrid.resolve_frameworks import (
    deepspeed_runtime,
    fsdp_runtime,
    hpz_level,
    zeropp_runtime,
)
from workloads.hybrid.setup import (
    HybridSetup,
    Recompute,
    ShardingSetup,
    TpOverlapSetup,
    check_tensor_parallel,
)
from workloads.hybrid.stages import check_stages, stage_layers_for
from workloads.models import TransformerSpec
from workloads.run import ClusterShape, TrainingSetup, batch_sequences, divisors

DEFAULT_BUCKET_ELEMS = 40_000_000
# Most (stage, microbatch, virtual stage) forward passes a pipeline schedule may hold:
# every stage's 1F1B order is built item by item before its ops, and passes that differ
# (warm-up and cool-down of an interleaved schedule) are built in full, so the build grows
# with pp x microbatches x virtual stages. Measured here: pp 512 x 4,096 microbatches (2^21)
# ran past 147 CPU-s and 3.5 GB with no answer; pp 8 x 64 x 512 virtual stages (2^18)
# ran past 15 minutes at 0.6 GB. The largest published configuration we model, GPT-3
# 175B on 64 A100s (pp 8 x 1,536 microbatches x 3 virtual stages = 36,864; Narayanan et
# al. 2021, Table 1), is inside 2^16 with room to spare.
MAX_PIPELINE_PASSES = 2**16


@dataclass(frozen=True, order=True)
class Degrees:
    """Tensor, pipeline and shard-group sizes (the data axis is what remains)."""

    tp: int
    pp: int
    shard: int | None  # None: the whole data axis


def resolve_recompute(params: HybridParallel, training: TrainingSetup) -> Recompute:
    """Megatron's explicit recompute mode, else full/none from the training section."""
    r = params.recompute if isinstance(params, MegatronParallel) else None
    if r is not None:
        return r
    return "full" if training.activation_checkpointing else "none"


def sharding_of(
    params: HybridParallel, dtype_bytes: int = 2, gpus_per_node: int = 8
) -> ShardingSetup:
    """The data axis' sharding behaviour implied by the parameters (`dtype_bytes`: the
    model's compute dtype, which FSDP's mixed precision gathers in)."""
    if isinstance(params, MegatronParallel):
        return ShardingSetup()
    if isinstance(params, DeepSpeedParallel):
        return _deepspeed_sharding(params, gpus_per_node)
    if isinstance(params, ShardedParallel):
        if params.strategy == "zero3":
            gran = params.granularity or "linear"
            fwd, bwd = params.forward_prefetch, params.backward_prefetch
            return ShardingSetup(
                granularity=gran,
                forward_prefetch=True if fwd is None else fwd,
                backward_prefetch=True if bwd is None else bool(bwd),
            )
        return _fsdp_sharding(params, params.granularity or "block", dtype_bytes, 1)
    if isinstance(params, FsdpTpParallel):
        return _fsdp_sharding(params, "block", dtype_bytes, 2)
    if isinstance(params, ZeroppParallel):
        # DeepSpeed's ZeRO-3 runtime: per-module fetches (linear granularity)
        return ShardingSetup(
            granularity="linear",
            backward_level="node" if params.hpz else "global",
            gradient_level="node" if params.qgz else "global",
            qwz=params.qwz,
            qgz=params.qgz,
        )
    if isinstance(params, ZeroppHierParallel):
        return ShardingSetup(
            granularity="linear",
            forward_level=params.forward_partition,
            backward_level=params.backward_partition,
            gradient_level=params.gradient_partition,
            qwz=params.qwz,
            qgz=params.qgz,
        )
    fwd, bwd = params.forward_prefetch, params.backward_prefetch
    again = params.reshard_after_forward
    return ShardingSetup(
        forward_prefetch=fwd,
        backward_prefetch=bwd,
        reshard_after_forward=again,
        sync_every_microbatch=again,
    )


def _fsdp_sharding(
    params: ShardedParallel | FsdpTpParallel, gran: str, dtype_bytes: int, version: int
) -> ShardingSetup:
    rt = fsdp_runtime(params, dtype_bytes, version)
    return ShardingSetup(
        granularity=gran,  # type: ignore[arg-type]
        forward_prefetch=rt.forward_prefetch,
        backward_prefetch=rt.backward_prefetch != "none",
        reshard_after_forward=rt.reshard_after_forward,
        fsdp=rt,
    )


def _deepspeed_sharding(params: DeepSpeedParallel, gpus_per_node: int) -> ShardingSetup:
    """ZeRO-3 as DeepSpeed runs it: per-module fetches (linear granularity), with ZeRO++'s
    options (hpZ secondary partition, qwZ, qgZ) at their DeepSpeed names."""
    hpz = hpz_level(params, gpus_per_node)
    return ShardingSetup(
        granularity="linear",
        backward_level=hpz,  # type: ignore[arg-type]
        gradient_level="node" if params.zero_quantized_gradients else "global",
        qwz=params.zero_quantized_weights,
        qgz=params.zero_quantized_gradients,
    )


def tp_overlap_of(params: HybridParallel) -> TpOverlapSetup | None:
    """Megatron's --tp-comm-overlap settings (None: NCCL collectives, not overlapped)."""
    if not isinstance(params, MegatronParallel) or not params.tp_comm_overlap:
        return None
    return TpOverlapSetup(
        params.tp_comm_overlap_sms,
        params.tp_comm_overlap_splits,
        params.tp_comm_overlap_rs,
        params.tp_comm_overlap_sm_margin,
    )


def _tp_options(spec: TransformerSpec, params: HybridParallel, cluster: ClusterShape) -> list[int]:
    given = getattr(params, "tp", None)
    if given is not None:
        return [given]
    if not isinstance(params, MegatronParallel | FsdpTpParallel):
        return [1]
    lo = 2 if isinstance(params, FsdpTpParallel) else 1
    # Megatron may also split a layer across nodes (up to 4 nodes); FSDP+TP keeps TP small
    limit = cluster.gpus_per_node * (4 if isinstance(params, MegatronParallel) else 1)
    out = []
    t = lo
    while t <= limit and cluster.gpus % t == 0:
        try:
            check_tensor_parallel(spec, t, "parallel.tp")
            out.append(t)
        except WorkloadError:
            pass
        t *= 2
    return out


def _pp_options(spec: TransformerSpec, params: HybridParallel) -> list[int]:
    given = (
        params.pipeline_size
        if isinstance(params, MegatronParallel | DeepSpeedParallel)
        else params_pp(params)
    )
    if given is not None:
        return [given]
    if not isinstance(params, MegatronParallel | FsdpPpParallel):
        return [1]
    v = params.virtual_stages
    lo = 2 if isinstance(params, FsdpPpParallel) else 1
    extra = 0
    if isinstance(params, MegatronParallel):
        extra = int(params.account_for_embedding) + int(params.account_for_loss)
    units = spec.layers + extra
    return [
        p
        for p in divisors(units)
        if p >= lo and units % (p * v) == 0 and (units // p > 1 or not extra)
    ]


def params_pp(params: HybridParallel) -> int | None:
    """The pipeline degree the parameters fix, if any."""
    return getattr(params, "pp", None)


def _cp_of(params: HybridParallel) -> int:
    return params.cp if isinstance(params, MegatronParallel) else 1


def _shard_default(params: HybridParallel, cluster: ClusterShape, dp: int) -> int:
    shard = getattr(params, "shard", None)
    if shard is not None:
        return shard
    if getattr(params, "hybrid_sharding", False):
        return min(cluster.gpus_per_node, dp)
    if getattr(params, "sharding_strategy", None) == "NO_SHARD":
        return 1
    return dp


def candidate_degrees(
    spec: TransformerSpec, params: HybridParallel, cluster: ClusterShape
) -> list[Degrees]:
    """Degree combinations the parameters allow on the cluster, smallest model-parallel
    size first (ties: tensor parallelism inside a node, then the smaller pipeline)."""
    out = []
    cp = _cp_of(params)
    for tp in _tp_options(spec, params, cluster):
        for pp in _pp_options(spec, params):
            if cluster.gpus % (tp * pp * cp):
                continue
            out.append(Degrees(tp, pp, getattr(params, "shard", None)))
    return sorted(out, key=lambda d: (d.tp * d.pp, d.tp > cluster.gpus_per_node, d.pp))


def build_setup(
    spec: TransformerSpec,
    params: HybridParallel,
    training: TrainingSetup,
    cluster: ClusterShape,
    degrees: Degrees,
    microbatch_sequences: int,
) -> HybridSetup:
    """A validated setup for explicit degrees and microbatch size."""
    tp, pp, cp = degrees.tp, degrees.pp, _cp_of(params)
    if cluster.gpus % (tp * pp * cp):
        what = (
            f"tp*pp*cp = {tp}*{pp}*{cp} = {tp * pp * cp}"
            if cp > 1
            else f"tp*pp = {tp}*{pp} = {tp * pp}"
        )
        raise WorkloadError(f"parallel: {what} does not divide the {cluster.gpus} GPUs")
    dp = cluster.gpus // (tp * pp * cp)
    data_mode = "sharded"
    ds = None
    if isinstance(params, MegatronParallel):
        data_mode = "distopt" if params.distributed_optimizer else "ddp"
    elif isinstance(params, DeepSpeedParallel):
        ds = deepspeed_runtime(params, spec.dtype, spec.dtype_bytes)
        data_mode = "sharded" if params.zero_stage == 3 else "deepspeed"
    elif isinstance(params, ZeroppParallel | ZeroppHierParallel):
        ds = zeropp_runtime(params, spec.dtype, spec.dtype_bytes)
    shard = 1 if data_mode != "sharded" else _shard_default(params, cluster, dp)
    if dp % shard:
        raise WorkloadError(f"parallel.shard={shard} does not divide the {dp} data-parallel GPUs")
    meg = params if isinstance(params, MegatronParallel) else MegatronParallel()
    seqs = batch_sequences(spec, training)
    if seqs % dp:
        raise WorkloadError(
            f"training.batch_tokens: {seqs} sequences are not divisible by the {dp} data-parallel replicas"
        )
    per_replica = seqs // dp
    if per_replica % microbatch_sequences:
        raise WorkloadError(
            f"training.microbatch_sequences={microbatch_sequences} does not divide the "
            f"{per_replica} sequences per data-parallel replica"
        )
    setup = HybridSetup(
        strategy=params.strategy,
        tp=tp,
        pp=pp,
        dp=dp,
        shard=shard,
        cp=cp,
        cp_comm=meg.cp_comm,
        stage_layers=stage_layers_for(spec, params, pp),
        sequence_parallel=bool(getattr(params, "sequence_parallel", False)),
        distribute_saved_activations=bool(getattr(params, "distribute_saved_activations", False)),
        virtual_stages=getattr(params, "virtual_stages", 1),
        microbatch_sequences=microbatch_sequences,
        microbatches=per_replica // microbatch_sequences,
        recompute=resolve_recompute(params, training),
        data_mode=data_mode,  # type: ignore[arg-type]
        sharding=sharding_of(params, spec.dtype_bytes, cluster.gpus_per_node),
        bucket_elems=meg.bucket_size or max(DEFAULT_BUCKET_ELEMS, 1_000_000 * dp * cp),
        overlap_grad_reduce=meg.overlap_grad_reduce,
        overlap_param_gather=meg.overlap_param_gather,
        grad_reduce_bytes=_grad_reduce_bytes(params, data_mode, ds),
        optimizer=training.optimizer,
        flash_attention=training.flash_attention,
        compress_microbatches=training.compress_microbatches,
        gpus_per_node=cluster.gpus_per_node,
        fp8=spec.fp8,
        tp_overlap=tp_overlap_of(params),
        deepspeed=ds,
        cross_entropy=training.cross_entropy or default_cross_entropy(params),
        train_metrics=training.train_metrics,
    )
    check_setup(spec, setup)
    return setup


def _grad_reduce_bytes(params: HybridParallel, data_mode: str, ds: DeepSpeedRuntime | None) -> int:
    """Bytes per gradient element in the data axis' reductions: Megatron's fp32
    main_grad (grad_reduce_in_fp32), DeepSpeed's communication dtype, the model dtype for
    the sharded strategies (FSDP's reduce_dtype is its runtime's)."""
    if ds is not None:
        return ds.comm_bytes
    if data_mode == "sharded":
        return 2
    meg = params if isinstance(params, MegatronParallel) else MegatronParallel()
    return 4 if meg.grad_reduce_in_fp32 else 2


def default_cross_entropy(params: HybridParallel) -> str:
    """The loss kernel a framework runs when training.cross_entropy leaves it open:
    Megatron-LM and Megatron-DeepSpeed's vocab-parallel cross entropy (fp32 logits,
    softmax and gradient in place: megatron/core/tensor_parallel/cross_entropy.py),
    eager PyTorch elsewhere (F.cross_entropy on logits.float(): torchtitan, HF)."""
    if isinstance(params, MegatronParallel | DeepSpeedParallel):
        return "vocab-parallel"
    if isinstance(params, ZeroppParallel | ZeroppHierParallel):
        return "vocab-parallel"  # DeepSpeed's ZeRO++ runs under Megatron-DeepSpeed / GPT-NeoX
    return "eager"


def check_setup(spec: TransformerSpec, setup: HybridSetup) -> None:
    """Raise WorkloadError (naming the field) unless the model splits evenly."""
    if setup.tp > 1:
        check_tensor_parallel(spec, setup.tp, "parallel.tp")
    check_stages(spec, setup)
    check_context_parallel(spec, setup)
    passes = setup.pp * setup.microbatches * setup.virtual_stages
    if setup.pp > 1 and passes > MAX_PIPELINE_PASSES:
        raise WorkloadError(
            f"parallel.pp={setup.pp} x {setup.microbatches:,} microbatches x "
            f"parallel.virtual_stages={setup.virtual_stages} = {passes:,} forward passes to "
            f"schedule, more than the {MAX_PIPELINE_PASSES:,} axsim schedules per iteration: "
            "use a larger training.microbatch_sequences, a smaller training.batch_tokens "
            "or fewer parallel.virtual_stages"
        )
    if setup.virtual_stages > 1 and setup.microbatches % setup.pp:
        raise WorkloadError(
            f"parallel.virtual_stages: the interleaved schedule needs the {setup.microbatches} "
            f"microbatches per replica divisible by pp={setup.pp}"
        )
    tokens = setup.microbatch_sequences * spec.seq_len // setup.cp
    if setup.sequence_parallel and tokens % setup.tp:
        raise WorkloadError(
            f"parallel.sequence_parallel: {tokens} tokens per microbatch and GPU not divisible "
            f"by tp={setup.tp}"
        )
    if setup.distribute_saved_activations and setup.recompute != "full":
        raise WorkloadError(
            "parallel.distribute_saved_activations needs full recompute (training."
            "activation_checkpointing or parallel.recompute='full')"
        )
    if setup.sharded and setup.sharding.granularity == "linear" and setup.pp > 1:
        raise WorkloadError("parallel.granularity 'linear' needs pp = 1")
    if setup.tp_overlap is not None and setup.tp > 1:
        check_tp_overlap(setup, tokens)


def check_tp_overlap(setup: HybridSetup, tokens: int) -> None:
    """Userbuffers' pipeline splits the microbatch's tokens into row chunks that it
    reduce-scatters over tp (TE asserts even splits)."""
    ub = setup.tp_overlap
    splits = ub.pipeline_splits if ub is not None and ub.rs_method == "pipeline" else 1
    if tokens % (setup.tp * splits):
        raise WorkloadError(
            f"parallel.tp_comm_overlap_splits={splits}: {tokens} tokens per microbatch and GPU "
            f"do not split into {splits} chunks of rows divisible by tp={setup.tp}"
        )
    if setup.fsdp is not None and setup.sharding.granularity == "linear":
        raise WorkloadError(
            "parallel.granularity 'linear' is ZeRO-3's per-module fetch; FSDP wraps per "
            "transformer block ('block') or the whole model ('model')"
        )
    if setup.fsdp is not None and setup.pp > 1:
        raise WorkloadError("parallel: FSDP's runtime options need pp = 1 (use fsdp-pp)")


def candidate_setups(
    spec: TransformerSpec,
    params: HybridParallel,
    training: TrainingSetup,
    cluster: ClusterShape,
) -> list[HybridSetup]:
    """Every valid (degrees, microbatch) configuration, in `candidate_degrees` order."""
    out = []
    seqs = batch_sequences(spec, training)
    for deg in candidate_degrees(spec, params, cluster):
        dp = cluster.gpus // (deg.tp * deg.pp * _cp_of(params))
        if seqs % dp:
            continue
        options = (
            [training.microbatch_sequences]
            if training.microbatch_sequences
            else divisors(seqs // dp)
        )
        for mbs in options:
            try:
                out.append(build_setup(spec, params, training, cluster, deg, mbs))
            except WorkloadError:
                continue
    return out


def pick_microbatch(fitting: list[HybridSetup]) -> HybridSetup:
    """The largest fitting microbatch; pipelines keep >= 4 microbatches per stage when
    possible (bubble <= (p-1)/(m+p-1) of about 20%)."""
    pipelined = [s for s in fitting if s.pp > 1 and s.microbatches >= 4 * s.pp]
    pool = pipelined or fitting
    return max(pool, key=lambda s: s.microbatch_sequences)


def choose_setup(
    spec: TransformerSpec,
    params: HybridParallel,
    training: TrainingSetup,
    cluster: ClusterShape,
) -> HybridSetup:
    """The default configuration: smallest model-parallel degrees that fit in memory."""
    setups = candidate_setups(spec, params, training, cluster)
    if not setups:
        raise _no_setup_error(spec, params, training, cluster)
    by_degrees: dict[tuple[int, int, int], list[HybridSetup]] = {}
    for s in setups:
        by_degrees.setdefault((s.tp, s.pp, s.shard), []).append(s)
    for group in by_degrees.values():
        fitting = [s for s in group if hybrid_memory(spec, s).total <= cluster.capacity_bytes]
        if fitting:
            return pick_microbatch(fitting)
    return min(setups, key=lambda s: hybrid_memory(spec, s).total)


def _no_setup_error(
    spec: TransformerSpec,
    params: HybridParallel,
    training: TrainingSetup,
    cluster: ClusterShape,
) -> WorkloadError:
    """Rebuild the first candidate to surface its validation error, naming the field."""
    degrees = candidate_degrees(spec, params, cluster)
    if not degrees:
        return WorkloadError(
            f"parallel: no valid {params.strategy} degrees for {cluster.gpus} GPUs and "
            f"{spec.layers} layers / {spec.heads} heads"
        )
    try:
        build_setup(spec, params, training, cluster, degrees[0], training.microbatch_sequences or 1)
    except WorkloadError as e:
        return e
    return WorkloadError(f"parallel: no valid {params.strategy} configuration")
