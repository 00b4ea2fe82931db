"""Model-state and buffer memory of PyTorch FSDP and DeepSpeed, as their code allocates it.

Per GPU, bytes. P = the stage's parameters after the tensor-parallel split, N = the shard
group. Each term names the tensor that holds it.

PyTorch FSDP (torch/distributed/fsdp, mixed precision with fp32 module parameters):
- weights: the fp32 sharded flat parameter (`_local_shard`, 4 P/N); the master weights
  are these (no separate copy), so the optimizer holds Adam's two moments (8 P/N);
- gradients: the fp32 sharded gradient (`_saved_grad_shard` / `.grad`, 4 P/N) plus the
  transient unsharded ones of the unit in backward: its gradient in the compute dtype, its
  cast to reduce_dtype (`flat_param.grad.to(reduce_dtype)`), and the reduce-scatter input
  of the previous unit still in flight (record_stream keeps it until the collective
  ends); the root's unsharded gradient lives through the whole backward (the head's
  backward starts it, the embedding's ends it);
- gathered_weights: the root's unsharded parameters (not resharded after forward) and the
  units in flight: FSDP1 with the rate limiter holds the unit computing and the one being
  gathered, and when gathers run a unit ahead (forward_prefetch, BACKWARD_PRE) also the
  unit whose free event the GPU has not passed (freed storage is record_stream'ed to the
  compute stream; the limiter waits for the oldest of two queued free events); without
  the limiter the CPU runs ahead and any number may be allocated (bounded here by all
  units); FSDP2 keeps the all-gather output until the next copy-out in forward (3 units);
  SHARD_GRAD_OP keeps every unit gathered from forward to backward.

DeepSpeed (deepspeed/runtime, commit 38327e0):
- BF16_Optimizer: bf16 parameters and gradients (2 P + 2 P), the fp32 gradient buffer of
  the whole model (`fp32_groups_gradients_flat`, 4 P), fp32 master partition and Adam
  (12 P/dp); the all-reduce's cast to the communication dtype (2 P while it runs);
- DeepSpeedZeroOptimizer: bf16 parameters 2 P, gradients 2 P (stage 1) or 2 P/dp (stage 2:
  reduced gradients outside the rank's partition freed), the fp32 partition's gradient
  (4 P/dp), master and Adam 12 P/dp, the contiguous ipg bucket buffers
  (reduce_bucket_size elements, two with overlap_comm);
- Stage 3: bf16 partition 2 P/N, gradient partition (grad_accum dtype) P/N, master and Adam
  12 P/N, persistent parameters whole, hpZ's secondary partition (2 P/k for a partition of
  k GPUs) and the Frontier hierarchy's forward partition likewise, the ipg bucket buffer, the fp32 gradient of one
  optimizer sub-group (sub_group_size, 1e9 elements) at the step, and the coordinator's
  peak of gathered parameters (workloads/hybrid/zero3_plan.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.hybrid.frameworks import DeepSpeedRuntime, FsdpRuntime
from workloads.hybrid.groups import LEVEL_GROUP, group_size
from workloads.hybrid.setup import HybridSetup, block_params, stage_param_counts
from workloads.hybrid.zero3_runtime import persistent_elems, zero3_plan
from workloads.models import TransformerSpec

FP32 = 4
ADAM_MOMENTS = 8.0  # exp_avg + exp_avg_sq in fp32
SUB_GROUP_ELEMS = 1e9  # DeepSpeed zero_optimization.sub_group_size default


@dataclass(frozen=True)
class StateMemory:
    """Model states and buffers of one GPU (bytes); `buffers_high`: the buffer term's
    upper bound where the runtime lets it grow (FSDP1 without the rate limiter)."""

    weights: float
    gradients: float
    optimizer: float
    gathered_weights: float
    buffers: float = 0.0
    gathered_high: float | None = None


def _adam(optimizer: str) -> float:
    return ADAM_MOMENTS if optimizer == "adam" else 0.0


def fsdp_states(spec: TransformerSpec, setup: HybridSetup, rt: FsdpRuntime) -> StateMemory:
    """FSDP's model states, unsharded units in flight and gradient buffers."""
    counts = stage_param_counts(spec, setup, 0)
    total = float(counts["total"])
    db = max(spec.dtype_bytes, 2)
    n = 1 if rt.no_shard else setup.shard
    held = total / n
    whole = setup.sharding.granularity == "model"
    unit = total if whole else float(block_params(spec, setup.tp))
    root = 0.0 if whole else float(counts["embedding"] + counts["head"])
    blocks = spec.layers
    rb = rt.reduce_bytes
    if rt.no_shard:
        live = 0.0
        high = None
        grads = (db + (rb if rb != db else 0)) * unit
        gathered = db * total  # the compute-dtype copy (_mp_shard) of every unit
    else:
        if not rt.reshard_after_forward:
            units, high = float(blocks), None
        elif rt.version == 2:
            units, high = 3.0 + (1.0 if rt.keep_last_unit else 0.0), None
        else:
            # the unit computing and the one being gathered, plus, when a gather is issued
            # a unit ahead (forward prefetch, BACKWARD_PRE), the unit whose free event the
            # GPU has not passed (tests/test_fsdp_memory_reference.py: the CPU's
            # synchronous run holds one unit fewer)
            ahead = rt.forward_prefetch or rt.backward_prefetch == "pre"
            units = 3.0 if ahead else 2.0
            high = None if rt.limit_all_gathers else float(blocks)
        units = min(units, float(max(blocks, 1)))
        live = units * unit
        gathered = db * (root + live)
        if high is not None:
            high = db * (root + min(high, float(blocks)) * unit)
        # the unit's gradient, its reduce-dtype copy, the previous unit's reduce input,
        # and the root's unsharded gradient held through the backward
        cast = rb * unit if rb != db else 0.0
        grads = db * unit + cast + rb * unit + db * root
    return StateMemory(
        weights=FP32 * held,
        gradients=FP32 * held + grads,
        optimizer=_adam(setup.optimizer) * held,
        gathered_weights=gathered,
        gathered_high=high,
    )


def deepspeed_states(
    spec: TransformerSpec, setup: HybridSetup, rt: DeepSpeedRuntime, stage: int
) -> StateMemory:
    """DeepSpeed's model states and buffers for its optimizer wrapper and ZeRO stage."""
    total = float(stage_param_counts(spec, setup, stage)["total"])
    db = max(spec.dtype_bytes, 2)
    dp = setup.grad_ranks
    master = (FP32 if db < FP32 else 0.0) + _adam(setup.optimizer)
    bucket = float(min(rt.reduce_bucket_elems, total))
    if rt.stage == 3:
        n = setup.shard
        persist, _ = persistent_elems(spec, setup, rt)
        plan = zero3_plan(spec, setup, rt)
        sub = min(total / n, SUB_GROUP_ELEMS)
        # hpZ's secondary partition (_partition_param_sec: the compute dtype, 1/k of each
        # partitioned parameter) and the Frontier hierarchy's forward partition
        levels = {setup.sharding.forward_level, setup.sharding.backward_level} - {"global"}
        extra = sum(1.0 / group_size(setup, LEVEL_GROUP[lv]) for lv in levels)
        return StateMemory(
            weights=db * (total / n + persist + extra * (total - persist)),
            gradients=rt.grad_accum_bytes * total / n,
            optimizer=master * total / n,
            gathered_weights=db * plan.peak_available,
            buffers=(db * bucket if rt.contiguous_gradients else 0.0) + FP32 * sub,
        )
    if rt.optimizer_path == "bf16_optimizer":
        return StateMemory(
            weights=db * total,
            gradients=db * total + FP32 * total,
            optimizer=master * total / dp,
            gathered_weights=0.0,
            buffers=rt.comm_bytes * total if rt.comm_bytes != FP32 and dp > 1 else 0.0,
        )
    if rt.optimizer_path == "fp16_optimizer":
        return StateMemory(db * total, db * total, master * total, 0.0)
    grads = db * total if rt.stage == 1 else db * total / dp
    ipg = (2.0 if rt.overlap_comm else 1.0) * db * bucket if rt.contiguous_gradients else 0.0
    return StateMemory(
        weights=db * total,
        gradients=grads + FP32 * total / dp,
        optimizer=master * total / dp,
        gathered_weights=0.0,
        buffers=ipg if dp > 1 else 0.0,
    )
