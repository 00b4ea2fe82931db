"""Per-GPU memory of AxoNN's 4D algorithm.

What is counted (bytes per GPU):
- model states, sharded over X, Y and Z (AxoNN shards weights and optimizer state over
  Z): bf16 weights 2 + bf16 gradients 2 + fp32 master weights 4 + Adam moments 8 = 16
  bytes per parameter of the shard (SGD: 2 + 2 + 4 = 8);
- gathered weights: the Z all-gather output of the layer in use plus one prefetched
  layer with OAG; every layer's when weights are cached;
- the full (pre-reduce-scatter) weight gradient of the layer in backward;
- activations: with checkpointing the input of every block plus one block's full
  activations during its recompute/backward; without it every block's full activations;
  logits and their fp32 softmax for the loss;
- communication and runtime buffers: a fixed reserve (CUDA context, NCCL channels,
  allocator fragmentation), `RUNTIME_RESERVE_BYTES`.
"""

from __future__ import annotations

from workloads.axonn.layers import block_layouts, logits_layout
from workloads.axonn.params import Grid
from workloads.memory import LOGIT_BYTES_PER_ELEM_EXTRA, RUNTIME_RESERVE_BYTES, MemoryBreakdown
from workloads.models import TransformerSpec

__all__ = ["RUNTIME_RESERVE_BYTES", "MemoryBreakdown", "axonn_memory", "shard_params"]


def shard_params(spec: TransformerSpec, grid: Grid, transpose_alternate: bool = True) -> float:
    """Parameters stored per GPU (linear weights sharded over X, Y, Z; small params
    replicated)."""
    blocks = block_layouts(spec, grid, transpose_alternate)
    per_block = sum(lay.shard_elems for lay in blocks)
    small = 4 * spec.hidden + sum(lay.n_local for lay in blocks)  # LayerNorms + bias shards
    logits = logits_layout(spec, grid).shard_elems
    return spec.layers * (per_block + small) + logits + spec.seq_len * spec.hidden + 2 * spec.hidden


def block_activation_bytes(
    spec: TransformerSpec,
    grid: Grid,
    tokens: int,
    transpose_alternate: bool = True,
    flash_attention: bool = True,
) -> float:
    """Activations one block keeps for its backward, per GPU (flash attention stores no
    s x s scores; the unfused path keeps the softmax output, the dropout output and mask)."""
    b = spec.dtype_bytes
    blocks = block_layouts(spec, grid, transpose_alternate)
    linear_inputs = sum(tokens * lay.k_local for lay in blocks)
    h_res = spec.hidden // (grid.x if transpose_alternate else grid.y)
    qkv = blocks[0]
    up = blocks[2]
    layernorm_inputs = 2 * tokens * h_res
    attention = tokens * qkv.n_local + tokens * (spec.hidden // qkv.g_n)  # q,k,v and output
    gelu_input = tokens * up.n_local
    residual = 2 * tokens * h_res
    lse = 4.0 * tokens * (spec.heads // qkv.g_n) / b  # fp32 log-sum-exp per head
    scores = (
        0.0
        if flash_attention
        else tokens * spec.seq_len * (spec.heads // qkv.g_n) * (4.0 * b + 1.0)
    )
    return b * (linear_inputs + layernorm_inputs + attention + gelu_input + residual + lse) + scores


def axonn_memory(
    spec: TransformerSpec,
    grid: Grid,
    microbatch_sequences: int,
    *,
    checkpointing: bool = True,
    oag: bool = True,
    cache_weights: bool = False,
    optimizer: str = "adam",
    transpose_alternate: bool = True,
    flash_attention: bool = True,
) -> MemoryBreakdown:
    """Memory per GPU for a microbatch of `microbatch_sequences` sequences per GPU."""
    b = spec.dtype_bytes
    params = shard_params(spec, grid, transpose_alternate)
    blocks = block_layouts(spec, grid, transpose_alternate)
    logits = logits_layout(spec, grid)
    largest_gathered = max([lay.gathered_elems for lay in blocks] + [logits.gathered_elems])
    if cache_weights:
        gathered = b * (
            spec.layers * sum(lay.gathered_elems for lay in blocks) + logits.gathered_elems
        )
    else:
        gathered = b * largest_gathered * (2 if oag else 1)
    full_grad = b * largest_gathered  # one layer's dW before its reduce-scatter
    tokens = microbatch_sequences * spec.seq_len
    block_act = block_activation_bytes(spec, grid, tokens, transpose_alternate, flash_attention)
    h_res = spec.hidden // (grid.x if transpose_alternate else grid.y)
    if checkpointing:
        activations = spec.layers * b * tokens * h_res + block_act
    else:
        activations = spec.layers * block_act
    logit_bytes = tokens * logits.n_local * (b + LOGIT_BYTES_PER_ELEM_EXTRA)
    optimizer_bytes = (12.0 if optimizer == "adam" else 4.0) * params
    return MemoryBreakdown(
        weights=b * params,
        gradients=b * params + full_grad,
        optimizer=optimizer_bytes,
        gathered_weights=gathered,
        activations=activations,
        logits=logit_bytes,
        runtime_reserve=RUNTIME_RESERVE_BYTES,
    )
