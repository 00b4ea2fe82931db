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

FP8 training (workloads/fp8.py): Transformer Engine caches every FP8 linear's weight in
FP8 with its transpose for the iteration (2 bytes per weight element; under sharding,
while the unit is gathered) and keeps the linears' inputs in FP8.

Activations (workloads/activations.py: Korthikanti et al. 2022, Table 2, with the
architecture's own widths and flash attention's rule): per chunk-microbatch the stored
activations of its blocks (block inputs only under full recompute); a pipeline stage
holds as many chunk-microbatches as its schedule keeps in flight (p - s for 1F1B's stage
s). Beside them, the working set of the block in backward (its rebuilt activations under
full recompute, its recomputed attention scores under selective) and context
parallelism's buffers. The first stage adds the embedding's dropout mask, the last the
final norm's and the output layer's inputs and the logits (bf16) with their fp32 softmax
and gradient.
"""

from __future__ import annotations

from dataclasses import replace

from workloads.activations import (
    MASK_BYTES,
    ActivationShape,
    block_activation_bytes,
    recompute_working_bytes,
)
from workloads.fp8 import fp8_weight_cache_bytes
from workloads.hybrid.framework_memory import StateMemory, deepspeed_states, fsdp_states
from workloads.hybrid.groups import LEVEL_GROUP, group_size
from workloads.hybrid.schedule import in_flight
from workloads.hybrid.setup import (
    HybridSetup,
    block_linears,
    block_params,
    logits_linear,
    stage_chunks,
    stage_param_counts,
)
from workloads.memory import (
    RUNTIME_RESERVE_BYTES,
    MemoryBreakdown,
    largest_fitting,
    logit_bytes_per_elem,
    optimizer_bytes_per_param,
)
from workloads.models import TransformerSpec


def activation_shape(spec: TransformerSpec, setup: HybridSetup) -> ActivationShape:
    """One GPU's share of a block's activations for one microbatch."""
    return ActivationShape(
        tokens=setup.microbatch_sequences * spec.seq_len // setup.cp,
        seq_len=spec.seq_len,
        hidden=spec.hidden,
        heads=spec.heads,
        kv_dim=spec.kv_dim,
        mlp_up=spec.mlp_up_out,
        ffn=spec.ffn,
        tp=setup.tp,
        sequence_parallel=setup.sequence_parallel and setup.tp > 1,
        flash_attention=setup.flash_attention,
        dropout=spec.dropout,
        dtype_bytes=spec.dtype_bytes,
        parallel_block=spec.parallel_block,
        shared_norm=spec.shared_norm,
        fp8_linear_inputs=spec.fp8,
    )


def context_parallel_buffers(a: ActivationShape, setup: HybridSetup) -> float:
    """Transient bytes of one block's attention under context parallelism: p2p keeps
    four KV-sized ring buffers (K and V, their gradients; one sent, one received) and
    the cp per-step outputs until they are merged; all_gather the gathered KV and its
    gathered gradient; a2a the head-split Q, K, V and output."""
    if setup.cp == 1:
        return 0.0
    kv = a.dtype_bytes * a.tokens * 2 * a.kv_dim / a.tp
    out = a.dtype_bytes * a.tokens * a.hidden / a.tp
    if setup.cp_comm == "all_gather":
        return 2.0 * setup.cp * kv
    if setup.cp_comm == "a2a":
        return kv + 2.0 * out
    return 4.0 * kv + setup.cp * out


def _edge_activations(spec: TransformerSpec, setup: HybridSetup, first: bool, last: bool) -> float:
    """Per microbatch: the embedding's dropout mask on the first stage; the final norm's
    and the output layer's inputs on the last (Korthikanti et al. 2022, Section 4.3)."""
    a = activation_shape(spec, setup)
    rest = a.tokens * a.hidden / (a.tp if a.sequence_parallel else 1)
    out = MASK_BYTES * rest if first and a.dropout else 0.0
    return out + (2.0 * a.dtype_bytes * rest if last else 0.0)


def _framework_states(spec: TransformerSpec, setup: HybridSetup, stage: int) -> StateMemory | None:
    """The states of PyTorch FSDP's or DeepSpeed's runtime when the setup runs one."""
    if setup.fsdp is not None:
        return fsdp_states(spec, setup, setup.fsdp)
    if setup.deepspeed is not None:
        return deepspeed_states(spec, setup, setup.deepspeed, stage)
    return None


def _states(spec: TransformerSpec, setup: HybridSetup, stage: int) -> dict[str, float]:
    framework = _framework_states(spec, setup, stage)
    if framework is not None:
        return {
            "weights": framework.weights,
            "gradients": framework.gradients,
            "optimizer": framework.optimizer,
            "gathered_weights": framework.gathered_weights,
            "buffers": framework.buffers,
        }
    counts = stage_param_counts(spec, setup, stage)
    total = float(counts["total"])
    adam = optimizer_bytes_per_param(setup.optimizer, spec.dtype_bytes)
    db = spec.dtype_bytes
    fp8_block = _fp8_linear_elems(spec, setup) if spec.fp8 else 0.0
    if not setup.sharded:
        opt = adam * total / (setup.grad_ranks if setup.data_mode == "distopt" else 1)
        layers = stage_layers(spec, setup, stage)
        return {
            # + Transformer Engine's FP8 weight cache (rows and transpose) for the iteration
            "weights": db * total + fp8_weight_cache_bytes(layers * fp8_block),
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
    units = 2 if sh.forward_prefetch else 1
    gathered = db * (units * unit + root) if sh.reshard_after_forward else db * sharded
    if spec.fp8:  # the FP8 copies of the gathered units' linear weights
        fp8_unit = fp8_block if sh.granularity == "block" else unit
        held = units if sh.reshard_after_forward else stage_layers(spec, setup, stage)
        gathered += fp8_weight_cache_bytes(held * fp8_unit)
    full_grads = db * (unit if sh.sync_every_microbatch else sharded)
    return {
        "weights": weights,
        "gradients": db * held + full_grads,
        "optimizer": adam * held,
        "gathered_weights": gathered,
    }


def _fp8_linear_elems(spec: TransformerSpec, setup: HybridSetup) -> float:
    """Weight elements per GPU of one block's FP8 linears."""
    return float(sum(lay.weight_elems for lay in block_linears(spec, setup.tp)))


def stage_layers(spec: TransformerSpec, setup: HybridSetup, stage: int) -> int:
    """Transformer layers pipeline rank `stage` holds."""
    return sum(c.stop - c.start for c in stage_chunks(spec, setup, stage))


def stage_memory(spec: TransformerSpec, setup: HybridSetup, stage: int) -> MemoryBreakdown:
    """Memory per GPU of pipeline stage `stage`."""
    db = spec.dtype_bytes
    a = activation_shape(spec, setup)
    tokens = a.tokens
    chunks = stage_chunks(spec, setup, stage)
    per_chunk = chunks[0].stop - chunks[0].start
    first, last = any(c.first for c in chunks), any(c.last for c in chunks)
    per_block = block_activation_bytes(a, setup.recompute)
    if setup.recompute == "full" and setup.distribute_saved_activations:
        # Megatron's --distribute-saved-activations: each saved block input split over TP
        per_block /= setup.tp
    stored = per_chunk * per_block
    stored += _edge_activations(spec, setup, first, last) / setup.virtual_stages
    working = recompute_working_bytes(a, setup.recompute) + context_parallel_buffers(a, setup)
    live = in_flight(setup.pp, setup.microbatches, setup.virtual_stages, stage)
    logits = 0.0
    if last:
        v_local = logits_linear(spec, setup.tp).n_local
        logits = tokens * v_local * logit_bytes_per_elem(setup.cross_entropy, db)
    states = _states(spec, setup, stage)
    return MemoryBreakdown(
        weights=states["weights"],
        gradients=states["gradients"],
        optimizer=states["optimizer"],
        gathered_weights=states["gathered_weights"],
        activations=live * stored + working,
        logits=logits,
        runtime_reserve=RUNTIME_RESERVE_BYTES,
        buffers=states.get("buffers", 0.0),
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
