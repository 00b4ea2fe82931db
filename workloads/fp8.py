"""FP8 training as Transformer Engine runs it for Megatron-Core (delayed scaling).

Why a module of its own: FP8 changes a linear layer's GEMMs, adds quantisation kernels
and collectives, and changes what is stored, but not the block's structure; the hybrid
generator asks this module, per linear, what to emit (`LinearPrecision`), and the memory
model asks it what is stored (`fp8_weight_cache_bytes`, the activation widths in
workloads/activations.py).

What is FP8 (sources: NVIDIA/TransformerEngine transformer_engine/pytorch/module/
{linear,layernorm_linear,base}.py and quantization.py; NVIDIA/Megatron-LM
megatron/core/transformer/transformer_config.py, megatron/core/extensions/
transformer_engine.py):
- the block's four linear layers (TE's LayerNormColumnParallelLinear for QKV and MLP-up,
  RowParallelLinear for attention-out and MLP-down): their forward (fprop), data-gradient
  (dgrad) and weight-gradient (wgrad) GEMMs take FP8 inputs (E4M3 forward, E5M2
  gradients: Megatron's 'hybrid' format; `fp8_wgrad` defaults on) and write bf16;
- everything else stays bf16/fp32: attention (`fp8_dot_product_attention` off), norms,
  softmax, activations, residuals, the embedding, the output layer (Megatron's own
  ColumnParallelLinear, outside TE's autocast), the optimizer with its fp32 master
  weights, gradients and their reduction. Megatron's `first_last_layers_bf16` is off by
  default: every block runs FP8.

What it adds (per linear layer, Hopper: FP8 GEMMs take both operands K-major, "TN", so
dgrad needs W^T and wgrad X^T and dY^T in FP8; TE makes them with fused cast+transpose):
- weights: cast + transpose to FP8 once per iteration (Megatron passes
  `is_first_microbatch`, TE caches the FP8 weight and its transpose across microbatches,
  `cache_weight`), 2 bytes per weight element held for the iteration;
- inputs: QKV's and MLP-up's are quantised by the fused LayerNorm kernel (no kernel of
  their own; sequence parallelism all-gathers them in FP8, and backward re-gathers the
  FP8 rows and transposes them for wgrad); attention-out's and MLP-down's inputs by a
  cast + transpose kernel each;
- output gradients: a cast + transpose (+ bias gradient) kernel per linear; with sequence
  parallelism the row-parallel layers quantise their local rows, all-gather them in FP8
  and transpose the gathered tensor;
- delayed scaling (`DelayedScaling`, Megatron's default recipe): every quantisation
  records its amax; at the end of each forward pass (fp8_autocast exit) and of each
  backward pass (the first FP8 module's backward) TE all-reduces (MAX, blocking) the
  pass's amaxes over Megatron's amax reduction group (tensor x data x context parallel:
  every GPU of the pipeline stage) and one fused kernel updates the histories and scales;
- current scaling (`Float8CurrentScaling`, the recipe of NVIDIA's recent H100 benchmark
  recipes, "fp8_cs"): every quantisation first scans its input for the amax (one more
  bf16 read per element, the LayerNorm's output included: it is no longer quantised
  inside the norm kernel), and the sequence-parallel column layers all-reduce that amax
  over the tensor-parallel group before the cast (`amax_reduction_group`); no histories.
"""

from __future__ import annotations

from workloads.builder import ProgramBuilder
from workloads.models import FP8_ELEMENT_BYTES, TransformerSpec
from workloads.ops import CollectiveKind as K
from workloads.ops import ComputeKind as C

FP8_LINEARS = ("qkv", "attn_out", "mlp_up", "mlp_down")
"""The linears TE runs in FP8 (the block's; not the output layer)."""
NORM_FUSED_INPUTS = ("qkv", "mlp_up")
"""Linears whose input the fused LayerNorm kernel quantises (TE's LayerNormLinear)."""
OUT_BYTES = 2  # FP8 GEMMs write bf16 (TE's default output dtype of the linear layers)
CAST_TRANSPOSE_BYTES = 2 + 2 * FP8_ELEMENT_BYTES  # read bf16; write FP8 rows and columns
CAST_BYTES = 2 + FP8_ELEMENT_BYTES  # read bf16; write FP8 rows
TRANSPOSE_BYTES = 2 * FP8_ELEMENT_BYTES  # read FP8 rows; write FP8 columns
QUANTIZE_FLOPS = 2.0  # per element: |x| into the amax, x * scale (vector units)
AMAX_BYTES = 4  # one fp32 amax per quantised tensor
AMAX_TENSORS_FWD = 3  # per GEMM: input, weight, output quantizers ("scaling_fwd")
AMAX_TENSORS_BWD = 2  # per GEMM: grad-output, grad-input quantizers ("scaling_bwd")
AMAX_HISTORY = 1024
"""Amax history length: TE's DelayedScaling default (amax_history_len=1024), the value
NeMo's and Megatron-LM's example FP8 recipes pass (--fp8-amax-history-len 1024); the
update kernel reads and writes the histories (Megatron's own default is 1: cheaper)."""


def is_fp8_linear(spec: TransformerSpec, name: str) -> bool:
    """Whether linear `name` (a block linear or 'logits') runs FP8 GEMMs."""
    return spec.fp8 and name in FP8_LINEARS


def fp8_gemm_bytes(m: int, n: int, k: int) -> float:
    """Bytes an FP8 GEMM moves: FP8 operands, a bf16 output."""
    return float(FP8_ELEMENT_BYTES * (m * k + k * n) + OUT_BYTES * m * n)


def fp8_weight_cache_bytes(linear_weight_elems: float) -> float:
    """TE's FP8 weight cache for `linear_weight_elems` FP8-linear weight elements: the
    FP8 rows and their transpose, kept for the iteration beside the bf16 weights."""
    return 2.0 * FP8_ELEMENT_BYTES * linear_weight_elems


class LinearPrecision:
    """What a linear layer emits beyond its bf16 form when the model trains in FP8.

    The bf16 spec (dtype != fp8) makes every method a no-op or the bf16 value, so the
    generator calls them unconditionally.
    """

    def __init__(self, spec: TransformerSpec, builder: ProgramBuilder, db: int):
        self.spec = spec
        self.b = builder
        self.db = db
        self.on = spec.fp8
        self.current = spec.fp8 and spec.fp8_recipe == "current"
        self.weights_cast: set[str] = set()  # linears (tags) whose FP8 weight is cached

    # -------------------------------------------------------------- GEMMs
    def gemm(self, name: str, lay_name: str, m: int, n: int, k: int, sm_margin: int = 0) -> int:
        """A linear's GEMM: FP8 operands when the layer is FP8, else the model's dtype;
        `sm_margin` SMs left to a concurrent communication kernel."""
        if not is_fp8_linear(self.spec, lay_name):
            return self.b.gemm(name, m, n, k, self.db, sm_margin=sm_margin)
        flops = 2.0 * m * n * k
        nbytes = fp8_gemm_bytes(m, n, k)
        return self.b.compute(
            name, C.GEMM, flops, nbytes, (m, n, k), dtype_bytes=1, sm_margin=sm_margin
        )

    def gather_bytes(self, lay_name: str) -> int:
        """Bytes per element a sequence-parallel all-gather of the layer's input or output
        gradient moves (FP8 for FP8 layers: TE gathers the quantised tensor)."""
        return FP8_ELEMENT_BYTES if is_fp8_linear(self.spec, lay_name) else self.db

    # ------------------------------------------------------ quantisation
    def _quantize(self, name: str, elems: float, per_elem: float) -> None:
        """A quantisation kernel; current scaling first reads the input for its amax."""
        casts = per_elem > TRANSPOSE_BYTES
        if casts and self.current:
            per_elem += 2  # the amax scan reads the bf16 input once more
        flops = QUANTIZE_FLOPS * elems if casts else 0.0
        self.b.compute(name, C.QUANTIZE, flops, per_elem * elems, dtype_bytes=1)

    def forward_casts(self, lay_name: str, tag: str, input_elems: float, weight_elems: float,
                      recompute: bool, sp_group: str | None = None) -> None:  # fmt: skip
        """Before a forward GEMM: the weight's cast + transpose on the iteration's first
        use, the input's cast + transpose unless the LayerNorm quantised it (delayed
        scaling; current scaling casts it after the norm, its amax all-reduced over
        `sp_group` when sequence parallelism splits the rows)."""
        if not is_fp8_linear(self.spec, lay_name):
            return
        if not recompute and tag not in self.weights_cast:
            self._quantize(f"{tag}.fp8_weight_cast", weight_elems, CAST_TRANSPOSE_BYTES)
            self.weights_cast.add(tag)
        if lay_name not in NORM_FUSED_INPUTS:
            self._quantize(f"{tag}.fp8_input_cast", input_elems, CAST_TRANSPOSE_BYTES)
        elif self.current:
            if sp_group is not None:
                self.b.collective(f"{tag}.fp8_amax.ar", K.ALL_REDUCE, sp_group, AMAX_BYTES)
            self._quantize(f"{tag}.fp8_input_cast", input_elems, CAST_TRANSPOSE_BYTES)

    def grad_cast(self, lay_name: str, tag: str, elems: float, gathered: bool) -> None:
        """Before a backward's GEMMs: quantise the output gradient (`elems` local
        elements). Gathered (row-parallel under sequence parallelism): rows only here,
        the transpose after the FP8 all-gather (`gathered_transpose`)."""
        if is_fp8_linear(self.spec, lay_name):
            per = CAST_BYTES if gathered else CAST_TRANSPOSE_BYTES
            self._quantize(f"{tag}.fp8_grad_cast", elems, per)

    def gathered_transpose(self, lay_name: str, tag: str, elems: float) -> None:
        """The columnwise copy of an FP8 tensor all-gathered rowwise (TE transposes the
        gathered input / output gradient for the wgrad GEMM)."""
        if is_fp8_linear(self.spec, lay_name):
            self._quantize(f"{tag}.fp8_transpose", elems, TRANSPOSE_BYTES)

    # ------------------------------------------------------ delayed scaling
    def amax_reduction(self, direction: str, layers: int, group: str) -> None:
        """End of a pass's FP8 region: the blocking all-reduce (MAX) of its amaxes over
        the amax group, then the fused history-and-scale update."""
        if not self.on or self.current or layers == 0:
            return
        per_gemm = AMAX_TENSORS_FWD if direction == "fwd" else AMAX_TENSORS_BWD
        tensors = float(per_gemm * len(FP8_LINEARS) * layers)
        self.b.collective(f"fp8.amax.{direction}.ar", K.ALL_REDUCE, group, AMAX_BYTES * tensors)
        history = 2.0 * AMAX_BYTES * AMAX_HISTORY * tensors  # read and write the histories
        self.b.compute(
            f"fp8.scale_update.{direction}", C.QUANTIZE, AMAX_HISTORY * tensors, history,
            dtype_bytes=4,
        )  # fmt: skip
