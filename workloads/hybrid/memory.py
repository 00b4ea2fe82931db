"""Per-GPU memory of the hybrid strategies, and the largest batch that fits.

Model states per parameter a GPU holds (P = the stage's parameters after the TP split):
- ddp (Megatron): bf16 weights 2 + gradients g (Megatron's fp32 main_grad, g = 4) +
  fp32 master weights and Adam moments 12 (SGD: 4);
- distopt: 2 + g + 12/dp (Megatron's distributed optimizer: 6 + 12/dp with fp32 grads);
- sharded (ZeRO-3/FSDP): (2 + 2 + 12)/shard per sharded parameter; per-linear ZeRO-3
  keeps biases, LayerNorms and the position embedding replicated.
Sharded extras: gathered weights in flight (the unit in use plus a prefetched one; the
whole stage when weights stay unsharded for the iteration, as FSDP+PP does), the
unsharded gradient of the unit in backward (the whole stage's when gradients are only
reduced after the last microbatch), ZeRO++'s secondary partitions (hpZ: + M/|node| per
GPU; a node/pair forward partition likewise).

Activations: per chunk-microbatch the stored activations of its blocks (block inputs only
under full recompute, plus one block's working set); a pipeline stage holds as many
chunk-microbatches as its schedule keeps in flight (p - s for 1F1B's stage s). The last
stage adds the logits (bf16) with their fp32 softmax and gradient.
"""

from __future__ import annotations

from dataclasses import replace

from workloads.hybrid.groups import LEVEL_GROUP, group_size
from workloads.hybrid.schedule import in_flight
from workloads.hybrid.setup import (
    HybridSetup,
    block_linears,
    block_params,
    block_shape,
    logits_linear,
    stage_chunks,
    stage_param_counts,
)
from workloads.memory import (
    LOGIT_BYTES_PER_ELEM_EXTRA,
    RUNTIME_RESERVE_BYTES,
    MemoryBreakdown,
    block_activation_bytes,
    largest_fitting,
    optimizer_bytes_per_param,
)
from workloads.models import TransformerSpec


def _block_activations(spec: TransformerSpec, setup: HybridSetup, tokens: int) -> float:
    sp = setup.sequence_parallel and setup.tp > 1
    shape = block_shape(spec, setup.tp, sp, tokens, setup.flash_attention)
    lin = block_linears(spec, setup.tp)
    column_input = tokens // setup.tp if sp else tokens  # SP stores the split input
    inputs = sum(column_input * lay.k if lay.column else tokens * lay.k_local for lay in lin)
    return block_activation_bytes(
        shape, inputs, spec.dtype_bytes, selective=setup.recompute == "selective"
    )


def _states(spec: TransformerSpec, setup: HybridSetup, stage: int) -> dict[str, float]:
    counts = stage_param_counts(spec, setup, stage)
    total = float(counts["total"])
    adam = optimizer_bytes_per_param(setup.optimizer, spec.dtype_bytes)
    db = spec.dtype_bytes
    if not setup.sharded:
        opt = adam * total / (setup.dp if setup.data_mode == "distopt" else 1)
        return {
            "weights": db * total,
            "gradients": setup.grad_reduce_bytes * total,
            "optimizer": opt,
            "gathered_weights": 0.0,
        }
    sh = setup.sharding
    repl = float(counts["small"]) if sh.granularity == "linear" else 0.0
    sharded = total - repl
    held = sharded / setup.shard + repl
    weights = db * held
    for level in {sh.forward_level, sh.backward_level} - {"global"}:
        weights += db * sharded / group_size(setup, LEVEL_GROUP[level])
    unit = float(block_params(spec, setup.tp))
    root = float(counts["embedding"] + counts["head"])
    if sh.granularity == "linear":
        unit = float(max(lay.weight_elems for lay in block_linears(spec, setup.tp)))
        unit = max(unit, float(logits_linear(spec, setup.tp).weight_elems))
        root = 0.0
    if sh.reshard_after_forward:
        gathered = db * ((2 if sh.forward_prefetch else 1) * unit + root)
    else:
        gathered = db * sharded
    full_grads = db * (unit if sh.sync_every_microbatch else sharded)
    return {
        "weights": weights,
        "gradients": db * held + full_grads,
        "optimizer": adam * held,
        "gathered_weights": gathered,
    }


def stage_memory(spec: TransformerSpec, setup: HybridSetup, stage: int) -> MemoryBreakdown:
    """Memory per GPU of pipeline stage `stage`."""
    db = spec.dtype_bytes
    tokens = setup.microbatch_sequences * spec.seq_len
    chunks = stage_chunks(spec, setup, stage)
    per_chunk = chunks[0].stop - chunks[0].start
    block_act = _block_activations(spec, setup, tokens)
    sp = setup.sequence_parallel and setup.tp > 1
    if setup.recompute == "full":
        split = setup.tp if sp or setup.distribute_saved_activations else 1
        stored = per_chunk * db * tokens * spec.hidden / split
        working = block_act
    else:
        stored = per_chunk * block_act
        working = 0.0
    live = in_flight(setup.pp, setup.microbatches, setup.virtual_stages, stage)
    logits = 0.0
    if any(c.last for c in chunks):
        v_local = logits_linear(spec, setup.tp).n_local
        logits = tokens * v_local * (db + LOGIT_BYTES_PER_ELEM_EXTRA)
    states = _states(spec, setup, stage)
    return MemoryBreakdown(
        weights=states["weights"],
        gradients=states["gradients"],
        optimizer=states["optimizer"],
        gathered_weights=states["gathered_weights"],
        activations=live * stored + working,
        logits=logits,
        runtime_reserve=RUNTIME_RESERVE_BYTES,
    )


def hybrid_memory(spec: TransformerSpec, setup: HybridSetup) -> MemoryBreakdown:
    """The memory of the stage that needs the most (what must fit on every GPU)."""
    return max((stage_memory(spec, setup, s) for s in range(setup.pp)), key=lambda m: m.total)


def max_batch_sequences(spec: TransformerSpec, setup: HybridSetup, capacity_bytes: float) -> int:
    """The largest global batch (sequences) that fits without gradient accumulation: one
    microbatch per data-parallel replica (pipelines: the minimum of pp microbatches).
    0 if not even one sequence per microbatch fits."""
    m = setup.pp

    def fits(b: int) -> bool:
        trial = replace(setup, microbatch_sequences=b, microbatches=m)
        try:
            return hybrid_memory(spec, trial).total <= capacity_bytes
        except ValueError:
            return False

    return largest_fitting(fits) * m * setup.dp
