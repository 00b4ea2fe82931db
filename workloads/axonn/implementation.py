"""The AxoNN code versions axsim can replay, and what each one's iteration really does.

A published number is the product of one code version, not of the algorithm in the
abstract. Two versions matter and differ in ways that move iteration time by tens of
percent at scale (all read in the public sources named below):

`sc24` — the code of the SC'24 paper's runs (Singh et al., arXiv 2502.08145):
Megatron-AxoNN (github.com/axonn-ai/Megatron-AxoNN, branches update-amd-script of
2024-01-17 for Frontier and gordon-bell-perlmutter of 2024-03 for Perlmutter) on axonn
before commit c5ef65d (2024-07-09).
- Weight lifetime "keep": `AsyncLinear.forward` saved the Z-gathered weight for its
  backward (`ctx.save_for_backward(input_, weight, original_weight)`, removed by c5ef65d),
  so backward issues no all-gather. With full activation checkpointing the forward runs
  under no_grad and the recompute's gather is the one saved.
- Megatron-AxoNN's weight cache (`--num-layers-for-caching-weights-in-depth-tensor-
  parallel-all-gather K`): the first K blocks keep their gathered weights in axonn's
  `weights_cache` until `train_step` calls `clear_weights_cache()` after the optimizer
  step, so a cached block gathers once per iteration.
- Overlap: `forward_backward_no_pipelining` runs each microbatch's forward step outside
  `optimize_communication` and only the backward step inside it, so the forward's Z
  all-gathers are blocking; OAG prefetches inside each checkpointed block's recompute
  (`overlap_all_gathers_for_checkpointed_forward(ctx.checkpointed_model)`: the block's
  own linears in module order, the first issued on entry). OAR and ORS as the paper
  describes; ORS handles are synchronised when the context exits.
- Embedding and logits: Megatron's VocabParallelEmbedding and vocab-parallel output
  layer split the (tied) vocabulary over the X·Y group (`outer_inner_intra_layer_
  parallel_group`, Megatron-AxoNN commit 7637494) and are replicated over Z and data;
  the embedding's forward all-reduce, the logits' backward input all-reduce and the
  vocab-parallel cross entropy's three statistics all-reduces run on that group. The
  transformer drops its input over X (backward: all-gather over X) and gathers its
  output over X (transformer.py: `drop`/`gather` with skip_batch).
- Gradients: bf16 training sets `accumulate_allreduce_grads_in_fp32` (Megatron
  arguments.py), so every parameter has an fp32 `main_grad`. After the last microbatch
  `sync_gradients(model, gradient_attr_name="main_grad", vectorize=False)` all-reduces,
  one tensor at a time in fp32 over Z, every parameter that is not a Z-sharded weight
  (LayerNorms, biases, the replicated embedding, the position embedding); then Megatron's
  DistributedDataParallel (overlap_grad_reduce off in every launch script, so one bucket)
  all-reduces the whole fp32 gradient buffer over data, after the backward, not
  overlapped.
- Model states: bf16 weights (2 B), fp32 main grads (4 B), fp32 master weights (4 B) and
  Adam moments (8 B): 18 bytes per parameter (Megatron's Float16OptimizerWithFloat16Params).

`litgpt` — the code of the paper's Frontier runs: LitGPT with AxoNN (paper §VI-A; the
Frontier runs did not use Megatron-LM) through axonn's Lightning Fabric strategy
(axonn/lightning/axonn_strategy.py, added 2024-06-18 in b03b58e) before c5ef65d. The
LitGPT pretraining script itself is not public (axonn-ai/litgpt holds only a finetuning
script of 2024-07-01), so what the strategy and axonn do is modelled and what the
script chose is stated:
- the layer saved its gathered weight for backward (as sc24, "keep");
- `AxonnStrategy.optimize_communication` is `optimize_communication(True, True, True,
  module)` around the step: OAG prefetches the forward's gathers (`trigger_async_all_
  gathers` over model.modules()); a checkpointed block's recompute gathers again,
  blocking (the prefetch of recomputed blocks, `overlap_all_gathers_for_checkpointed_
  forward`, is Megatron-AxoNN's call);
- precision: bf16 weights with fp32 master weights, as the paper states for every run
  (§VI), so the Z gathers and the gradients are bf16. LitGPT's default for training,
  "bf16-mixed" (`get_default_supported_precision(training=True)`), would instead keep
  fp32 parameters under torch.autocast: axonn would gather the fp32 shard (`_gather` and
  `trigger_async_all_gathers` allocate in the weight's dtype; 8e502aa of 2024-06-13 made
  the overlap work under autocast) and autocast would cast every gathered weight before
  each matmul. That variant (`weight_dtype_bytes=4`, grad 4 bytes) simulates 13.07 s of
  computation and 17.0 s of communication on the 8,192-GCD point without overlap against
  the 11.84 + 11.88 s Fig. 7 measured (the casts alone add ~1.2 s): it is ruled out on
  that one point (Fig. 7's 8,192-GCD "Kernel tuning" row), which is what this choice is
  fitted on; the bf16 weights may have come from axonn's own mixed precision (its
  "custom mixed precision", deprecated in ade0c1a of 2024-07-01) or "bf16-true";
- `AxonnStrategy.backward` then calls `sync_gradients_depth_parallel(mean=True)` (every
  parameter that is not Z-sharded, biases included, over Z) and `sync_gradients_data_
  parallel(mean=True)` (every parameter over data), one tensor at a time
  (`vectorize=False`), in the parameters' dtype (fp32);
- LitGPT's token embedding is a plain torch.nn.Embedding, replicated (axonn's
  auto_parallelize replaced only Linear layers until 2e51658 of 2024-07-09); its output
  head is a Linear, so a 4D linear;
- model states: bf16 weights and gradients, fp32 master weights and Adam moments: 16
  bytes per parameter;
- streams: the authors' Frontier environment ran PyTorch 2.1 (Megatron-AxoNN's Frontier
  launcher activates venv_axonn_pt_2.1), whose stream pool is eager; axonn's own tests
  moved to torch 2.3 (77e06d5, 2024-06-10), whose ROCm pool is lazy (pytorch/pytorch
  #119996). Which one the LitGPT runs used is not public: eager is chosen on Fig. 7's
  8,192-GCD point (see `stream_pool` below).

`axonn-0.2` — the PyPI release 0.2.0 (git 464e4a8, 2024-10-19), the algorithm as
axonn-4d.md describes it: the backward re-gathers the weight (c5ef65d), OAG prefetches
in the forward too (`optimize_communication` wraps forward and backward), the
embedding is a 4D-parallel linear (vocabulary over Y, sharded over Z), and
`sync_gradients` all-reduces each weight shard over data, each bias and LayerNorm
parameter over data then Z, and the rest over the world, one bf16 tensor at a time.
16 bytes per parameter (bf16 weights and gradients, fp32 master, Adam).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workloads.axonn.params import AxonnParallel, Implementation, WeightLifetime


@dataclass(frozen=True)
class ImplementationPreset:
    """What one AxoNN code version does beyond the 4D algorithm itself."""

    name: Implementation
    source: str
    default_lifetime: WeightLifetime
    forward_prefetch: bool  # OAG also prefetches in the forward pass (not only recompute)
    embedding: Literal["4d", "vocab-parallel-xy", "replicated"]
    grad_sync: Literal["per-tensor", "one-bucket", "z-then-data"]
    grad_dtype_bytes: int  # gradient buffer and all-reduce precision
    pending_shard_grads: bool  # ORS keeps bf16 shard gradients beside the fp32 main grads
    # OAG also prefetches the gathers of a checkpointed block's recompute
    recompute_prefetch: bool = True
    # bytes per element of the stored (and Z-gathered) weights; None: the model's dtype
    # (bf16 weights with separate fp32 masters); 4: fp32 parameters under autocast, which
    # are their own master weights and are cast to the model's dtype for each matmul
    weight_dtype_bytes: int | None = None
    # the framework's stream creation (which communicator shares the compute stream's
    # hardware queue on ROCm, simulator/cost/interference.py): PyTorch's pool made all of
    # a priority's streams at its first use ("eager", PyTorch < 2.3) or each at its own
    # ("lazy", ROCm builds of 2.3 on, pytorch/pytorch#119996); the communicators that
    # first communicate before the iteration (the launcher's barrier on the world group)
    stream_pool: Literal["eager", "lazy"] = "eager"
    communicators_before: tuple[str, ...] = ("world",)
    # the cross entropy the training code calls (workloads/loss.py): Megatron-AxoNN's
    # GPT model calls Megatron's vocab_parallel_cross_entropy on output.float()
    # (megatron/model/gpt_model.py post_language_model_processing); LitGPT and a user's
    # script with the PyPI release, PyTorch's F.cross_entropy ("eager")
    cross_entropy: str = "eager"


PRESETS: dict[str, ImplementationPreset] = {
    "litgpt": ImplementationPreset(
        name="litgpt",
        source=(
            "LitGPT with axonn's Lightning Fabric strategy, axonn before c5ef65d "
            "(2024-07-09); bf16 weights with fp32 masters"
        ),
        default_lifetime="keep",
        forward_prefetch=True,
        embedding="replicated",
        grad_sync="z-then-data",
        grad_dtype_bytes=2,
        pending_shard_grads=False,
        recompute_prefetch=False,
        # bf16 weights with fp32 masters (the paper's §VI); fp32 parameters under
        # autocast (LitGPT's default "bf16-mixed", weight_dtype_bytes=4, grad 4) are ruled
        # out on Fig. 7's 8,192-GCD Kernel-tuning point (see the module docstring)
        weight_dtype_bytes=None,
        # the authors' Frontier environment (Megatron-AxoNN's launcher activates
        # venv_axonn_pt_2.1: PyTorch 2.1, an eager pool); with a lazy pool (PyTorch >= 2.3)
        # Z would share the compute stream's queue and no Z collective would hide, which
        # Fig. 7's 8,192-GCD "Coll. overlap" point (5.8 s hidden) rules out: the one point
        # this choice is fitted on
        stream_pool="eager",
        communicators_before=("world",),
    ),
    "sc24": ImplementationPreset(
        name="sc24",
        cross_entropy="vocab-parallel",
        source=(
            "Megatron-AxoNN update-amd-script (2024-01-17) / gordon-bell-perlmutter "
            "(2024-03) on axonn before c5ef65d (2024-07-09)"
        ),
        default_lifetime="keep",
        forward_prefetch=False,
        embedding="vocab-parallel-xy",
        grad_sync="one-bucket",
        grad_dtype_bytes=4,
        pending_shard_grads=True,
        # Megatron-AxoNN's Frontier launcher (update-amd-script examples/run_axonn_amd.sh)
        # activates venv_axonn_pt_2.1: PyTorch 2.1, whose pool is eager; Megatron's
        # initialize (_compile_dependencies) runs a barrier on the world group first
        stream_pool="eager",
        communicators_before=("world",),
    ),
    "axonn-0.2": ImplementationPreset(
        name="axonn-0.2",
        source="axonn 0.2.0 (PyPI; git 464e4a8, 2024-10-19)",
        default_lifetime="regather",
        forward_prefetch=True,
        embedding="4d",
        grad_sync="per-tensor",
        grad_dtype_bytes=2,
        pending_shard_grads=False,
        # 0.2.0 (2024-10) is tested with PyTorch >= 2.3 (axonn 77e06d5, 2024-06-10: "update
        # vit tests to run with torch 2.3"), whose ROCm pool is lazy
        stream_pool="lazy",
        communicators_before=("world",),
    ),
}


def preset_for(params: AxonnParallel) -> ImplementationPreset:
    """The implementation preset a parallel config names."""
    return PRESETS[params.implementation]


@dataclass(frozen=True)
class WeightPolicy:
    """Which blocks cache their gathered weights, and what the others do."""

    lifetime: WeightLifetime  # of the blocks that do not cache ('regather' or 'keep')
    cached_blocks: int  # the first `cached_blocks` blocks cache for the iteration

    def cached(self, layer: int) -> bool:
        return layer < self.cached_blocks

    @property
    def label(self) -> str:
        """'cache' when blocks cache, else the lifetime (what a report prints)."""
        return "cache" if self.cached_blocks else self.lifetime


def weight_policy(params: AxonnParallel, layers: int) -> WeightPolicy:
    """Resolve `weight_lifetime` / `cached_layers` against the model's block count."""
    preset = preset_for(params)
    if params.weight_lifetime != "cache":
        return WeightPolicy(params.weight_lifetime or preset.default_lifetime, 0)
    k = layers if params.cached_layers is None else min(params.cached_layers, layers)
    return WeightPolicy(preset.default_lifetime, k)
