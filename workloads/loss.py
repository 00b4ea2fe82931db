"""The cross-entropy loss kernels a framework's code runs over the logits, in one place.

Why per implementation: the loss is a handful of memory-bound passes over tokens x vocab
elements, and which passes depends on the code. With a large vocabulary and a small
model they are a visible part of the step (Megatron's unfused loss moves ~52 bytes per
logit element against a fused kernel's 6). Each kernel below is what the named code
launches, with the HBM bytes it moves per logit element as passes over the logit dtype
(`logit`: bf16/fp16 = the model's) and over fp32 (`fp32`), read plus written.

A row-wise multi-pass kernel (PyTorch's softmax, apex's xentropy) reads its row again
from L2 once it has been read from HBM (a row of 32k-128k fp32 values is 128-512 KB and
one row per thread block is in flight, well under the 40-50 MB L2), so it counts one HBM
read; a full-tensor pass of separate kernels (Megatron's) reads HBM every time.

- `vocab-parallel`: Megatron's `_VocabParallelCrossEntropy` (megatron/core/
  tensor_parallel/cross_entropy.py at core_r0.8.0; the same passes in the older
  megatron/mpu/cross_entropy.py that Megatron-DeepSpeed runs, with `.float()` in the
  caller): forward `.float()` (r logit, w fp32), `torch.max` (r), the in-place
  subtraction of the max (r + w), `torch.exp(out=)` (r + w), `.sum` (r), `div_` by the
  sum (r + w), with the TP all-reduces of the max, the predicted logits and the sum of
  exponentials between them; backward `mul_` by the output gradient (r + w) and the
  autograd cast of the fp32 gradient back to the logits' dtype (r fp32, w logit). At
  bf16: 38 + 14 = 52 bytes per element.
- `eager`: `F.cross_entropy(logits.float(), labels)` (torchtitan's loss; aten
  log_softmax + nll_loss, aten/src/ATen/native/cuda/SoftMax.cu `cunn_SoftMaxForward`:
  max, sum-of-exp and write passes over a row): `.float()` (r logit, w fp32),
  log_softmax (r + w fp32); backward nll_loss_backward's zero-filled gradient (w),
  `cunn_SoftMaxBackward` (r grad, r output, w), the cast back (r fp32, w logit). At
  bf16: 14 + 22 = 36.
- `fused`: a fused softmax cross-entropy over the bf16 logits (llm-foundry's
  fused_crossentropy = flash-attn's CrossEntropyLoss on the apex-derived
  xentropy_cuda_lib): forward reads the logits (max and sum of exponentials of a row)
  and writes one loss and log-sum-exp per row; backward reads the logits and writes
  their gradient. At bf16: 2 + 4 = 6.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

LossImpl = Literal["eager", "fused", "vocab-parallel"]
FP32_BYTES = 4

PEAK_EXTRA_BYTES = {"eager": 12.0, "fused": 0.0, "vocab-parallel": 4.0}
"""Peak memory per logit element beyond the bf16 logits (workloads/memory.py):
- eager: the fp32 copy and log_softmax's saved fp32 output in forward; in backward the
  saved output, the incoming gradient and log_softmax's gradient, all fp32 (12);
- fused: a fused kernel writing the gradient into the logits in place (flash-attn's
  CrossEntropyLoss with inplace_backward, llm-foundry's fused_crossentropy): an fp32
  log-sum-exp per token only (0);
- vocab-parallel: one fp32 buffer (the logits cast, turned into the softmax in place and
  into the gradient in place) (4)."""


@dataclass(frozen=True)
class LossKernel:
    """One kernel of a loss implementation: HBM passes over the logit dtype and over fp32
    per logit element, and arithmetic per element (exp, compare, add, divide)."""

    name: str
    logit_passes: float
    fp32_passes: float
    flops: float

    def bytes_per_elem(self, logit_bytes: int) -> float:
        return self.logit_passes * logit_bytes + self.fp32_passes * FP32_BYTES


@dataclass(frozen=True)
class LossSteps:
    """A phase of a loss implementation: kernels, with the TP all-reduces (of 4-byte
    per-token values) that Megatron's vocab-parallel loss issues after kernel i."""

    kernels: tuple[LossKernel, ...]
    reduce_after: dict[int, int]  # kernel index -> all-reduces of tokens x 4 bytes after it


K = LossKernel
LOSS: dict[str, dict[str, LossSteps]] = {
    "vocab-parallel": {
        "fwd": LossSteps(
            (
                K("float", 1, 1, 0),
                K("max", 0, 1, 1),
                K("sub_max", 0, 2, 1),
                K("exp", 0, 2, 1),
                K("sum", 0, 1, 1),
                K("div", 0, 2, 1),
            ),
            {1: 1, 4: 2},  # the max; the predicted logits and the sum of exponentials
        ),
        "bwd": LossSteps((K("mul_grad", 0, 2, 1), K("to_logits", 1, 1, 0)), {}),
    },
    "eager": {
        "fwd": LossSteps((K("float", 1, 1, 0), K("log_softmax", 0, 2, 4)), {}),
        "bwd": LossSteps(
            (
                K("nll_backward", 0, 1, 0),
                K("log_softmax_backward", 0, 3, 3),
                K("to_logits", 1, 1, 0),
            ),
            {},
        ),
    },
    "fused": {
        "fwd": LossSteps((K("xentropy", 1, 0, 4),), {}),
        "bwd": LossSteps((K("xentropy_backward", 2, 0, 3),), {}),
    },
}


def loss_steps(impl: str, phase: Literal["fwd", "bwd"]) -> LossSteps:
    """The kernels of `impl`'s forward or backward (see the module docstring)."""
    got = LOSS.get(impl)
    if got is None:
        raise ValueError(f"unknown cross-entropy implementation '{impl}' (expected {list(LOSS)})")
    return got[phase]


KernelSink = Callable[[str, float, float], object]
"""compute(name, flops, bytes): issue one memory-bound kernel on the compute stream."""


def emit_loss(
    compute: KernelSink,
    impl: str,
    phase: Literal["fwd", "bwd"],
    elems: float,
    logit_bytes: int,
    reduce: Callable[[str], object] | None = None,
) -> None:
    """Issue `impl`'s loss kernels of one phase over `elems` logit elements of this GPU,
    calling `reduce(name)` where the implementation all-reduces per-token values over
    the vocabulary split (Megatron's tensor-parallel group), if the caller has one."""
    steps = loss_steps(impl, phase)
    for i, k in enumerate(steps.kernels):
        compute(f"loss.{k.name}.{phase}", k.flops * elems, k.bytes_per_elem(logit_bytes) * elems)
        if reduce is not None:
            for j in range(steps.reduce_after.get(i, 0)):
                reduce(f"loss.ar_tp{i}.{j}")


def loss_bytes_per_elem(impl: str, logit_bytes: int) -> float:
    """HBM bytes per logit element of `impl`'s forward and backward together."""
    return sum(
        k.bytes_per_elem(logit_bytes)
        for phase in ("fwd", "bwd")
        for k in loss_steps(impl, phase).kernels
    )
