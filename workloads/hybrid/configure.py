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
from workloads.hybrid.memory import hybrid_memory
from workloads.hybrid.params import (
    FsdpPpParallel,
    FsdpTpParallel,
    HybridParallel,
    MegatronParallel,
    ShardedParallel,
    ZeroppHierParallel,
    ZeroppParallel,
)
from workloads.hybrid.setup import HybridSetup, Recompute, ShardingSetup, check_tensor_parallel
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


def sharding_of(params: HybridParallel) -> ShardingSetup:
    """The data axis' sharding behaviour implied by the parameters."""
    if isinstance(params, MegatronParallel):
        return ShardingSetup()
    fwd, bwd = params.forward_prefetch, params.backward_prefetch
    if isinstance(params, ShardedParallel):
        gran = params.granularity or ("linear" if params.strategy == "zero3" else "block")
        return ShardingSetup(granularity=gran, forward_prefetch=fwd, backward_prefetch=bwd)
    if isinstance(params, ZeroppParallel):
        return ShardingSetup(
            granularity=params.granularity,
            forward_prefetch=fwd,
            backward_prefetch=bwd,
            backward_level="node" if params.hpz else "global",
            gradient_level="node" if params.qgz else "global",
            qwz=params.qwz,
            qgz=params.qgz,
        )
    if isinstance(params, ZeroppHierParallel):
        return ShardingSetup(
            granularity=params.granularity,
            forward_prefetch=fwd,
            backward_prefetch=bwd,
            forward_level=params.forward_partition,
            backward_level=params.backward_partition,
            gradient_level=params.gradient_partition,
            qwz=params.qwz,
            qgz=params.qgz,
        )
    if isinstance(params, FsdpPpParallel):
        again = params.reshard_after_forward
        return ShardingSetup(
            forward_prefetch=fwd,
            backward_prefetch=bwd,
            reshard_after_forward=again,
            sync_every_microbatch=again,
        )
    return ShardingSetup(forward_prefetch=fwd, backward_prefetch=bwd)


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
    given = params.pipeline_size if isinstance(params, MegatronParallel) else params_pp(params)
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
    if params.strategy == "hsdp":
        return min(cluster.gpus_per_node, dp)
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
    if isinstance(params, MegatronParallel):
        data_mode = "distopt" if params.distributed_optimizer else "ddp"
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
        sharding=sharding_of(params),
        bucket_elems=meg.bucket_size or max(DEFAULT_BUCKET_ELEMS, 1_000_000 * dp * cp),
        overlap_grad_reduce=meg.overlap_grad_reduce,
        overlap_param_gather=meg.overlap_param_gather,
        grad_reduce_bytes=4 if data_mode != "sharded" and meg.grad_reduce_in_fp32 else 2,
        optimizer=training.optimizer,
        flash_attention=training.flash_attention,
        compress_microbatches=training.compress_microbatches,
        gpus_per_node=cluster.gpus_per_node,
    )
    check_setup(spec, setup)
    return setup


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
