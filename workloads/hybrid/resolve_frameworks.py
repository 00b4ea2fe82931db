"""From the FSDP and DeepSpeed options a user gave to the runtimes a setup runs.

Every default is the framework's own, resolved where the framework resolves it (the
source of each rule is named next to it).
"""

from __future__ import annotations

from workloads.errors import WorkloadError
from workloads.hybrid.deepspeed_params import DeepSpeedParallel, Zero3Options
from workloads.hybrid.frameworks import DeepSpeedRuntime, FsdpRuntime, OptimizerPath
from workloads.hybrid.fsdp_params import DTYPE_BYTES, FsdpOptions, backward_prefetch_mode

REDUCED_PRECISION = 2  # bf16 / fp16 bytes per element


def fsdp_runtime(params: FsdpOptions, dtype_bytes: int, default_version: int) -> FsdpRuntime:
    """FSDP's runtime: `dtype_bytes` is the model's compute dtype (MixedPrecision's
    param_dtype). Under mixed precision (compute in 2 bytes) FSDP keeps the sharded
    parameters in fp32 (the module's own dtype; MixedPrecision casts a copy per unshard,
    _flat_param.py _use_low_precision_shard); reduce_dtype defaults to param_dtype in
    FSDP1 (_init_utils: 'reduce_dtype ... inferred from param_dtype') and to float32 in
    torchtitan's FSDP2 (job config `mixed_precision_reduce`)."""
    version = params.fsdp_version or default_version
    strategy = params.sharding_strategy or "FULL_SHARD"
    compute = max(dtype_bytes, REDUCED_PRECISION)
    default_reduce = compute if version == 1 else 4
    reduce = DTYPE_BYTES[params.reduce_dtype] if params.reduce_dtype else default_reduce
    return FsdpRuntime(
        version=version,
        reshard_after_forward=strategy in ("FULL_SHARD", "HYBRID_SHARD"),
        no_shard=strategy == "NO_SHARD",
        limit_all_gathers=params.limit_all_gathers and version == 1,
        forward_prefetch=bool(params.forward_prefetch) and version == 1,
        backward_prefetch=backward_prefetch_mode(params.backward_prefetch, "pre"),  # type: ignore[arg-type]
        reduce_bytes=reduce,
        shard_param_bytes=4,
        keep_last_unit=version == 2,
    )


def optimizer_path(params: DeepSpeedParallel, dtype: str) -> tuple[OptimizerPath, int]:
    """The optimizer wrapper DeepSpeedEngine builds and the gradient accumulation bytes
    (engine.py get_data_types: with no data_types.grad_accum_dtype, bf16 without ZeRO
    accumulates in fp32, otherwise in the model dtype; _do_optimizer_sanity_check: bf16
    with fp32 accumulation at stage <= 1 is BF16_Optimizer, fp16 at stage 0 the
    FP16_Optimizer, ZeRO otherwise)."""
    stage = params.zero_stage
    if params.grad_accum_dtype is not None:
        accum = DTYPE_BYTES[params.grad_accum_dtype]
    elif dtype == "bf16" and stage == 0:
        accum = 4
    else:
        accum = DTYPE_BYTES.get(dtype, REDUCED_PRECISION)
    if dtype == "bf16" and accum == 4 and stage <= 1:
        return "bf16_optimizer", accum
    if stage == 0:
        if dtype == "bf16":
            if (params.pp or 1) > 1:
                return "bf16_optimizer", accum
            raise WorkloadError(
                "parallel.zero_stage=0 with bf16 needs grad_accum_dtype fp32 (DeepSpeed: "
                "'Bfloat16 wrapper must use a gradient accumulation type of fp32')"
            )
        return "fp16_optimizer", accum
    return "zero", accum


def deepspeed_runtime(params: DeepSpeedParallel, dtype: str, dtype_bytes: int) -> DeepSpeedRuntime:
    """DeepSpeed's runtime for the given model dtype."""
    path, accum = optimizer_path(params, dtype)
    # engine.py communication_data_type: the config's, else the model's half precision
    # (since d56268f, DeepSpeed 0.9.2; between 261d637 and it bf16 runs reduced in fp32,
    # which `communication_data_type: fp32` reproduces). The BF16_Optimizer's fp32
    # gradients are cast to it for the all-reduce and back (engine.allreduce_bucket).
    compute = max(dtype_bytes, REDUCED_PRECISION)
    comm = (
        DTYPE_BYTES[params.communication_data_type] if params.communication_data_type else compute
    )
    return DeepSpeedRuntime(
        stage=params.zero_stage,
        optimizer_path=path,
        reduce_bucket_elems=params.reduce_bucket_size,
        allgather_bucket_elems=params.allgather_bucket_size,
        overlap_comm=params.overlap,
        contiguous_gradients=params.contiguous_gradients,
        grad_accum_bytes=accum,
        comm_bytes=comm,
        prefetch_bucket_elems=params.stage3_prefetch_bucket_size,
        max_live_elems=params.stage3_max_live_parameters,
        max_reuse_distance_elems=params.stage3_max_reuse_distance,
        persistence_threshold_elems=params.stage3_param_persistence_threshold,
        pipeline=(params.pp or 1) > 1,
    )


def zeropp_runtime(params: Zero3Options, dtype: str, dtype_bytes: int) -> DeepSpeedRuntime:
    """The runtime of the ZeRO++ strategies: DeepSpeedZeroOptimizer_Stage3 with their
    ZeRO-3 options, exactly as `deepspeed` resolves `zero_stage: 3` with the same keys."""
    fields = set(Zero3Options.model_fields)
    same = DeepSpeedParallel(zero_stage=3, **{f: getattr(params, f) for f in fields})
    return deepspeed_runtime(same, dtype, dtype_bytes)


def hpz_level(params: DeepSpeedParallel, gpus_per_node: int) -> str:
    """The partition level of zero_hpz_partition_size: 1 = none ('global'), the GPUs of
    a node ('node'), a GCD pair ('pair')."""
    size = params.zero_hpz_partition_size
    if size == 1:
        return "global"
    if size == gpus_per_node:
        return "node"
    if size == 2:
        return "pair"
    raise WorkloadError(
        f"parallel.zero_hpz_partition_size={size}: axsim models a secondary partition of "
        f"one node ({gpus_per_node} GPUs) or one GPU pair (2)"
    )
