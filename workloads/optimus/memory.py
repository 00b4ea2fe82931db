"""Per-GPU memory of Optimus, and the largest batch that fits.

Model states per parameter a GPU holds: weights and gradients in the model's dtype plus
the optimizer state (`optimizer_bytes_per_param`: mixed-precision Adam 12, fp32 Adam 8),
every weight split over the q x q mesh.
SUMMA buffers: the broadcast X and A blocks of the largest linear (twice when the next
step's broadcasts are prefetched). Activations are blocks of (tokens/q) x (features/q):
activation memory per GPU falls as 1/q^2 (Megatron's 1D tensor parallelism keeps the
residual stream replicated), which is why Optimus' maximum batch grows.
"""

from __future__ import annotations

from dataclasses import replace

from workloads.memory import (
    LOGIT_BYTES_PER_ELEM_EXTRA,
    RUNTIME_RESERVE_BYTES,
    MemoryBreakdown,
    block_activation_bytes,
    largest_fitting,
    optimizer_bytes_per_param,
)
from workloads.models import TransformerSpec
from workloads.optimus.program import (
    OptimusSetup,
    optimus_params,
    optimus_shape,
    summa_linears,
    summa_logits,
)


def optimus_memory(spec: TransformerSpec, setup: OptimusSetup) -> MemoryBreakdown:
    """Memory per GPU (every rank holds the same)."""
    q, db = setup.q, spec.dtype_bytes
    tokens = setup.microbatch_sequences * spec.seq_len
    mq = tokens // q
    params = float(optimus_params(spec, q))
    lin = summa_linears(spec, q)
    lg = summa_logits(spec, q)
    largest = max([*lin, lg], key=lambda s: mq * s.k_block + s.weight_elems)
    buffers = db * (mq * largest.k_block + largest.weight_elems)
    buffers *= 2 if setup.prefetch_broadcasts else 1
    shape = optimus_shape(spec, q, tokens, setup.flash_attention)
    block_act = block_activation_bytes(shape, sum(mq * s.k_block for s in lin), db)
    if setup.checkpointing:
        activations = spec.layers * db * shape.res_elems + block_act
    else:
        activations = spec.layers * block_act
    adam = optimizer_bytes_per_param(setup.optimizer, db)
    return MemoryBreakdown(
        weights=db * params,
        gradients=db * params,
        optimizer=adam * params,
        gathered_weights=buffers,
        activations=activations,
        logits=mq * lg.n_block * (db + LOGIT_BYTES_PER_ELEM_EXTRA),
        runtime_reserve=RUNTIME_RESERVE_BYTES,
    )


def optimus_max_batch_sequences(
    spec: TransformerSpec, setup: OptimusSetup, capacity_bytes: float
) -> int:
    """The largest global batch (sequences) that fits with one microbatch per replica
    (the per-mesh batch a multiple of q, split over the mesh rows); 0 if none fits."""

    def fits(k: int) -> bool:
        trial = replace(setup, microbatch_sequences=k * setup.q, microbatches=1)
        return optimus_memory(spec, trial).total <= capacity_bytes

    return largest_fitting(fits) * setup.q * setup.data
