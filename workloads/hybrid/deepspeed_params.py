"""DeepSpeed as configured: `parallel.strategy: deepspeed` with DeepSpeed's own option names.

The fields are the keys of a DeepSpeed config (deepspeed/runtime/zero/config.py,
commit 38327e0) flattened into the parallel section: `zero_stage` is
`zero_optimization.stage`, the ZeRO keys keep their names (`reduce_bucket_size`,
`stage3_prefetch_bucket_size`, ...), `grad_accum_dtype` is `data_types.grad_accum_dtype`
and `communication_data_type` the top-level key. `tp` is Megatron-DeepSpeed's tensor
parallelism, `pp` DeepSpeed's PipelineEngine (which takes ZeRO stages 0 and 1 only, as
DeepSpeed asserts). Defaults are DeepSpeed's: buckets of 5e8 elements, a 5e7-element
prefetch bucket, 1e9 live parameters and reuse distance, parameters of at most 1e5
elements persistent, `overlap_comm` on for stage 3 only (`overlap_comm_valid`).

Which optimizer wrapper runs follows DeepSpeedEngine._do_optimizer_sanity_check:
bf16 with fp32 gradient accumulation at stage 0 or 1 (stage 0's default) is the
BF16_Optimizer (fp32 gradients of the whole model, all-reduced in fp32 after the
backward, then an all-gather of the bf16 parameter partitions); bf16 at stage 1 or 2 with
bf16 accumulation (the default once ZeRO is on) is DeepSpeedZeroOptimizer; stage 3 is
DeepSpeedZeroOptimizer_Stage3.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from topologies.user_model import UserModel
from workloads.hybrid.fsdp_params import DtypeName

MAX_ELEMS = 2**50  # a bound far beyond any bucket (a typo fails at once)


class Zero3Options(UserModel):
    """DeepSpeed's ZeRO-3 runtime options (zero_optimization keys, DeepSpeed's defaults),
    shared by `deepspeed` and the ZeRO++ strategies (`zeropp`, `zeropp-hier`), which
    run DeepSpeedZeroOptimizer_Stage3 with its PartitionedParameterCoordinator
    (workloads/hybrid/zero3_runtime.py). overlap_comm None: DeepSpeed's default (on for
    stage 3)."""

    reduce_bucket_size: int = Field(default=500_000_000, ge=1, le=MAX_ELEMS)
    overlap_comm: bool | None = None
    contiguous_gradients: bool = True
    stage3_prefetch_bucket_size: int = Field(default=50_000_000, ge=0, le=MAX_ELEMS)
    stage3_max_live_parameters: int = Field(default=1_000_000_000, ge=0, le=MAX_ELEMS)
    stage3_max_reuse_distance: int = Field(default=1_000_000_000, ge=0, le=MAX_ELEMS)
    stage3_param_persistence_threshold: int = Field(default=100_000, ge=0, le=MAX_ELEMS)
    communication_data_type: DtypeName | None = None


class DeepSpeedParallel(Zero3Options):
    """DeepSpeed ZeRO stages 0-3 with Megatron-DeepSpeed tensor parallelism and
    DeepSpeed's pipeline engine (see the module docstring for the option names)."""

    strategy: Literal["deepspeed"] = "deepspeed"
    zero_stage: Literal[0, 1, 2, 3] = 0
    tp: int | None = Field(default=None, ge=1)
    pp: int | None = Field(default=None, ge=1)
    # transformer layers per pipeline stage (PipelineModule's partition_method, e.g.
    # 'type:transformer|embedding' counting the embedding as a layer: BLOOM's [5, 6 x 10, 5])
    layers_per_stage: tuple[int, ...] | None = Field(default=None, min_length=1, max_length=4096)
    allgather_bucket_size: int = Field(default=500_000_000, ge=1, le=MAX_ELEMS)
    reduce_scatter: bool = True
    grad_accum_dtype: DtypeName | None = None
    zero_quantized_weights: bool = False
    zero_quantized_gradients: bool = False
    zero_hpz_partition_size: int = Field(default=1, ge=1, le=2**18)

    @model_validator(mode="after")
    def _stage_options(self) -> DeepSpeedParallel:
        given = self.layers_per_stage
        if given is not None:
            if any(n < 1 for n in given):
                raise ValueError("parallel.layers_per_stage: every stage needs a layer")
            if self.pp is not None and self.pp != len(given):
                raise ValueError(
                    f"parallel.layers_per_stage lists {len(given)} stages but parallel.pp={self.pp}"
                )
        if (self.pipeline_size or 1) > 1 and self.zero_stage > 1:
            raise ValueError(
                f"parallel.zero_stage={self.zero_stage} cannot be combined with pp > 1 "
                "(DeepSpeed's PipelineEngine takes ZeRO stages 0 and 1 only)"
            )
        zeropp = (
            self.zero_quantized_weights
            or self.zero_quantized_gradients
            or self.zero_hpz_partition_size > 1
        )
        if zeropp and self.zero_stage != 3:
            raise ValueError(
                "parallel.zero_quantized_weights / zero_quantized_gradients / "
                "zero_hpz_partition_size (ZeRO++) need zero_stage 3"
            )
        return self

    @property
    def pipeline_size(self) -> int | None:
        """pp as given, or the length of layers_per_stage."""
        if self.pp is None and self.layers_per_stage is not None:
            return len(self.layers_per_stage)
        return self.pp

    @property
    def overlap(self) -> bool:
        """overlap_comm as DeepSpeed resolves it (on for stage 3 when not given)."""
        return self.zero_stage == 3 if self.overlap_comm is None else self.overlap_comm
