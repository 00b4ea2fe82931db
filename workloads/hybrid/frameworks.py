"""The resolved runtime settings of PyTorch FSDP and DeepSpeed (what a setup runs).

The parameter models (fsdp_params.py, deepspeed_params.py) say what the user asked for,
in the frameworks' own vocabulary; these frozen records say what the generator and the
memory model act on, every framework default resolved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PrefetchMode = Literal["pre", "post", "none"]
OptimizerPath = Literal["bf16_optimizer", "fp16_optimizer", "zero"]


@dataclass(frozen=True)
class FsdpRuntime:
    """PyTorch FSDP as configured.

    version: 1 (FullyShardedDataParallel) or 2 (fully_shard). reshard_after_forward:
    FULL_SHARD / HYBRID_SHARD (True) against SHARD_GRAD_OP / _HYBRID_SHARD_ZERO2 (False).
    no_shard: NO_SHARD (each unit's gradient all-reduced, nothing gathered).
    reduce_bytes: bytes per element of the gradient collectives (reduce_dtype).
    shard_param_bytes: the sharded (master) parameter's bytes per element: fp32 under
    mixed precision, the compute dtype when the model itself is held in it.
    keep_last_unit: FSDP2 under torchtitan's parallelize: the last transformer block is
    not resharded after forward (torchtitan apply_fsdp, "FSDP would prefetch it
    immediately").
    """

    version: int = 1
    reshard_after_forward: bool = True
    no_shard: bool = False
    limit_all_gathers: bool = True
    forward_prefetch: bool = False
    backward_prefetch: PrefetchMode = "pre"
    reduce_bytes: int = 2
    shard_param_bytes: int = 4
    keep_last_unit: bool = False


@dataclass(frozen=True)
class DeepSpeedRuntime:
    """DeepSpeed as configured (every default resolved as the engine resolves it).

    optimizer_path: which wrapper DeepSpeedEngine builds: 'bf16_optimizer'
    (BF16_Optimizer: fp32 gradient accumulation, fp32 all-reduce after the backward,
    bf16 all-gather of the partitions after the step), 'fp16_optimizer' (stage 0 fp16:
    the engine's bucketed all-reduce, fp32 master weights on every GPU) or 'zero'
    (DeepSpeedZeroOptimizer for stages 1-2, DeepSpeedZeroOptimizer_Stage3 for 3).
    Bucket sizes are in elements; grad_accum_bytes / comm_bytes are bytes per element.
    pipeline: DeepSpeed's PipelineEngine runs the stages (blocking point-to-point
    transfers, gradients reduced after the last microbatch).
    """

    stage: int = 0
    optimizer_path: OptimizerPath = "zero"
    reduce_bucket_elems: int = 500_000_000
    allgather_bucket_elems: int = 500_000_000
    overlap_comm: bool = False
    contiguous_gradients: bool = True
    grad_accum_bytes: int = 2
    comm_bytes: int = 2
    prefetch_bucket_elems: int = 50_000_000
    max_live_elems: int = 1_000_000_000
    max_reuse_distance_elems: int = 1_000_000_000
    persistence_threshold_elems: int = 100_000
    pipeline: bool = False
