"""PyTorch FSDP's options, in its own vocabulary, shared by the FSDP strategies.

Names and defaults follow torch.distributed.fsdp.FullyShardedDataParallel (FSDP1, torch
2.x: `sharding_strategy` FULL_SHARD, `backward_prefetch` BACKWARD_PRE,
`forward_prefetch` False, `limit_all_gathers` True, `MixedPrecision.reduce_dtype`
defaulting to the parameter dtype) and `fully_shard` (FSDP2, torchtitan's
`mixed_precision_reduce` = float32). Each option changes traffic, overlap or memory:

- sharding_strategy: FULL_SHARD re-gathers every unit in backward; SHARD_GRAD_OP keeps
  the gathered parameters from forward to backward (no backward all-gather, the whole
  unsharded model alive); HYBRID_SHARD / _HYBRID_SHARD_ZERO2 shard inside `shard` GPUs
  and all-reduce the reduced shard across the replicas (every microbatch, as FSDP's
  post-backward hook does); NO_SHARD all-reduces each unit's gradient (DDP).
- reduce_dtype: the dtype gradients are cast to before the reduce-scatter (fp32 doubles
  its bytes and adds the cast kernel and an fp32 copy of the unit's gradient).
- limit_all_gathers: FSDP1's rate limiter (torch/distributed/fsdp/_limiter_utils.py:
  at most 2 all-gathers whose outputs are not yet freed; the CPU waits on the oldest
  free event before issuing a third).
- backward_prefetch: BACKWARD_PRE issues the next unit's all-gather before the current
  unit's gradient computation, BACKWARD_POST after it, NONE (or false) not at all.
- forward_prefetch: FSDP1 issues the next unit's all-gather in the current unit's
  pre-forward hook (without it the next gather is issued by that unit's own hook).
- fsdp_version: 1 = FullyShardedDataParallel (flat parameters, views, the rate limiter,
  gradient pre/post-divide kernels); 2 = fully_shard (per-parameter shards: all-gather
  copy-in and copy-out kernels, reduce-scatter copy-in, no limiter: the next all-gather
  waits for the current copy-out on the GPU).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from topologies.user_input.model import UserModel

ShardingStrategy = Literal[
    "FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2", "NO_SHARD"
]
BackwardPrefetch = Literal["BACKWARD_PRE", "BACKWARD_POST", "NONE"]
DtypeName = Literal["bf16", "fp16", "fp32"]
HYBRID_STRATEGIES = ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")
FSDP_OPTION_FIELDS = (
    "fsdp_version",
    "sharding_strategy",
    "reduce_dtype",
    "limit_all_gathers",
)
DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4}


class FsdpOptions(UserModel):
    """The FSDP options every FSDP strategy takes (a mixin of their parameter models).

    `forward_prefetch` / `backward_prefetch` left at None take the framework's default
    (FSDP: off / BACKWARD_PRE); `backward_prefetch: true` means BACKWARD_PRE and `false`
    NONE, as earlier configs wrote it."""

    fsdp_version: Literal[1, 2] | None = None
    sharding_strategy: ShardingStrategy | None = None
    reduce_dtype: DtypeName | None = None
    limit_all_gathers: bool = True
    forward_prefetch: bool | None = None
    backward_prefetch: BackwardPrefetch | bool | None = Field(default=None)


def backward_prefetch_mode(value: BackwardPrefetch | bool | None, default: str) -> str:
    """'pre', 'post' or 'none' from an FSDP backward_prefetch value (None: `default`)."""
    if value is None:
        return default
    if value is True or value == "BACKWARD_PRE":
        return "pre"
    if value == "BACKWARD_POST":
        return "post"
    return "none"
