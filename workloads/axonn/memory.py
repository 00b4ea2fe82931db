"""Per-GPU memory of AxoNN's 4D algorithm, as each implementation keeps it.

What is counted (bytes per GPU; implementation.py names the sources):
- model states: the parameters a GPU stores (schedule.py `params_per_gpu`: linear weights
  sharded over X, Y and Z; LayerNorms, biases and position embedding replicated; the
  embedding sharded over Z (axonn-0.2), split over X·Y only (sc24) or replicated with a 4D
  output linear (litgpt)), as bf16 weights (2 B), gradients in the implementation's
  precision (bf16 2 B in axonn-0.2, Megatron's fp32 main_grad 4 B in sc24), fp32 master
  weights 4 B and Adam moments 8 B (SGD: none); litgpt keeps fp32 parameters under
  autocast (4 B, their own masters) with fp32 gradients;
  sc24 with ORS also holds the reduce-scattered bf16 shard gradients until the backward
  ends (axonn's `accumulate_later`);
- gathered weights, exactly what the weight lifetime keeps: 'regather' the linear in use
  plus one prefetched with OAG; 'keep' a whole block's four (its recompute saves them
  for its backward; without checkpointing every block's); 'cache' the cached blocks' for
  the whole iteration, plus what the others keep;
- the full (pre-reduce-scatter) weight gradient of the layer in backward;
- activations: with checkpointing the input of every block plus one block's full
  activations during its recompute/backward; without it every block's full activations;
  logits and their fp32 softmax for the loss;
- communication and runtime buffers: a fixed reserve (CUDA context, NCCL channels,
  allocator fragmentation), `RUNTIME_RESERVE_BYTES`.
"""

from __future__ import annotations

from workloads.axonn.implementation import PRESETS, ImplementationPreset, WeightPolicy
from workloads.axonn.layers import block_layouts
from workloads.axonn.params import Grid, OverlapFlag
from workloads.axonn.schedule import AxonnCalls
from workloads.memory import LOGIT_BYTES_PER_ELEM_EXTRA, RUNTIME_RESERVE_BYTES, MemoryBreakdown
from workloads.models import TransformerSpec

__all__ = ["RUNTIME_RESERVE_BYTES", "MemoryBreakdown", "axonn_memory", "shard_params"]

MASTER_AND_ADAM_BYTES = 4.0 + 8.0  # fp32 master weight + Adam's two fp32 moments
MASTER_ONLY_BYTES = 4.0  # SGD keeps the fp32 master weight only


def shard_params(
    spec: TransformerSpec,
    grid: Grid,
    transpose_alternate: bool = True,
    preset: ImplementationPreset | None = None,
) -> float:
    """Parameters stored per GPU (linear weights sharded over X, Y, Z; small params
    replicated; the embedding as the implementation lays it out)."""
    calls = AxonnCalls(
        spec,
        grid,
        preset or PRESETS["axonn-0.2"],
        WeightPolicy("regather", 0),
        1,
        True,
        transpose_alternate,
    )
    return calls.params_per_gpu()


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


def gathered_weight_bytes(calls: AxonnCalls, oag: bool) -> float:
    """Z-gathered weights alive at the peak, as the weight lifetime keeps them (in the
    stored weights' dtype: fp32 under autocast in litgpt)."""
    if calls.grid.z == 1:
        return 0.0  # nothing is gathered: the weights are used in place
    b = calls.wb
    blocks = calls.blocks
    per_block = sum(lay.gathered_elems for lay in blocks)
    largest = max(lay.gathered_elems for lay in blocks)
    if calls.preset.embedding in ("4d", "replicated"):
        largest = max(largest, calls.logits.gathered_elems)
    policy, layers = calls.policy, calls.spec.layers
    cached = policy.cached_blocks * per_block
    if policy.cached_blocks >= layers:
        return b * cached
    if policy.lifetime == "keep":
        transient = (
            per_block if calls.checkpointing else (layers - policy.cached_blocks) * per_block
        )
        transient += largest if oag else 0  # a prefetch in flight beside the saved block
    else:
        transient = largest * (2 if oag else 1)
    return b * (cached + transient)


def axonn_memory(
    spec: TransformerSpec,
    grid: Grid,
    microbatch_sequences: int,
    *,
    preset: ImplementationPreset | None = None,
    policy: WeightPolicy | None = None,
    checkpointing: bool = True,
    overlap: tuple[OverlapFlag, ...] = ("oar", "ors", "oag"),
    optimizer: str = "adam",
    transpose_alternate: bool = True,
    flash_attention: bool = True,
) -> MemoryBreakdown:
    """Memory per GPU for a microbatch of `microbatch_sequences` sequences per GPU
    (defaults: the SC'24 code with its own weight lifetime)."""
    preset = preset or PRESETS["sc24"]
    policy = policy or WeightPolicy(preset.default_lifetime, 0)
    tokens = microbatch_sequences * spec.seq_len
    calls = AxonnCalls(spec, grid, preset, policy, tokens, checkpointing, transpose_alternate)
    b = spec.dtype_bytes
    params = calls.params_per_gpu()
    blocks = calls.blocks
    largest_gathered = max(lay.gathered_elems for lay in blocks)
    sharded_weights = spec.layers * sum(lay.shard_elems for lay in blocks)
    pending = b * sharded_weights if (preset.pending_shard_grads and "ors" in overlap) else 0.0
    full_grad = b * largest_gathered  # one layer's dW before its reduce-scatter
    block_act = block_activation_bytes(spec, grid, tokens, transpose_alternate, flash_attention)
    if checkpointing:
        activations = spec.layers * b * tokens * calls.h_res + block_act
    else:
        activations = spec.layers * block_act
    vocab_local = (
        calls.xy_vocab if preset.embedding == "vocab-parallel-xy" else calls.logits.n_local
    )
    logit_bytes = tokens * vocab_local * (b + LOGIT_BYTES_PER_ELEM_EXTRA)
    state = MASTER_AND_ADAM_BYTES if optimizer == "adam" else MASTER_ONLY_BYTES
    wb = calls.wb
    if wb == 4:  # fp32 parameters (autocast) are their own master weights
        state -= MASTER_ONLY_BYTES
    return MemoryBreakdown(
        weights=wb * params,
        gradients=preset.grad_dtype_bytes * params + pending + full_grad,
        optimizer=state * params,
        gathered_weights=gathered_weight_bytes(calls, "oag" in overlap),
        activations=activations,
        logits=logit_bytes,
        runtime_reserve=RUNTIME_RESERVE_BYTES,
    )
