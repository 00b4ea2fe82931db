"""Per-GPU memory by category, shared by every strategy's memory model.

Categories (bytes per GPU): weights (bf16 copies a GPU holds between uses, including
ZeRO++'s secondary partitions), gradients, optimizer (fp32 master weights and moments),
gathered_weights (temporarily unsharded weights: ZeRO/FSDP all-gather outputs, SUMMA
broadcast buffers), activations (what the backward needs, with checkpointing), logits
(the output layer's logits and fp32 softmax) and a fixed runtime reserve (CUDA context,
NCCL buffers, allocator fragmentation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from workloads.loss import PEAK_EXTRA_BYTES
from workloads.transformer import BlockShape

RUNTIME_RESERVE_BYTES = 2.0e9  # CUDA context + NCCL buffers (assumption; the upper bound)
# The least of it: a CUDA context with PyTorch's kernels loaded and the cuBLAS workspace
# (about 0.5 GB on A100/H100 processes, nvidia-smi's per-process figure before the first
# allocation; assumption), NCCL's channel buffers (NCCL_BUFFSIZE 4 MiB per channel and
# protocol) being what grows with the communicators a strategy opens.
RUNTIME_RESERVE_LOW_BYTES = 0.5e9
LOGIT_BYTES_PER_ELEM_EXTRA = (
    12  # fp32 upcast, fp32 softmax and its fp32 gradient beside bf16 logits
)
# Peak bytes per logit element beyond the bf16 logits, by loss kernel: workloads/loss.py,
# with the same implementations' kernels (one place for the loss).
CROSS_ENTROPY_EXTRA_BYTES = PEAK_EXTRA_BYTES
FRAGMENTATION_FRACTION = 0.10  # caching-allocator slack on short-lived tensors (assumption)


def optimizer_bytes_per_param(optimizer: str, dtype_bytes: int) -> float:
    """Optimizer-state bytes per parameter beside the weights and gradients. Mixed
    precision (2-byte weights) keeps an fp32 master copy: Adam 4 + 8 (moments), SGD 4.
    Training in fp32 (the Optimus release's default) updates the weights in place: Adam 8,
    SGD 0 (ZeRO paper, Rajbhandari et al. 2020, Sec. 3.1: K = 12 for mixed-precision Adam)."""
    master = 4.0 if dtype_bytes < 4 else 0.0
    return master + (8.0 if optimizer == "adam" else 0.0)


def lower_bound(memory: dict[str, float]) -> float:
    """MemoryBreakdown.lower from its `as_dict()` (the categories, fragmentation, total)."""
    total = float(memory.get("total", 0.0))
    reserve = float(memory.get("runtime_reserve", 0.0))
    low = min(reserve, RUNTIME_RESERVE_LOW_BYTES)
    return total - float(memory.get("fragmentation", 0.0)) - (reserve - low)


def logit_bytes_per_elem(cross_entropy: str, dtype_bytes: int) -> float:
    """Peak bytes per element of the logits for a loss kernel (CROSS_ENTROPY_EXTRA_BYTES)."""
    return dtype_bytes + CROSS_ENTROPY_EXTRA_BYTES.get(cross_entropy, LOGIT_BYTES_PER_ELEM_EXTRA)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per GPU by category."""

    weights: float
    gradients: float
    optimizer: float
    gathered_weights: float
    activations: float
    logits: float
    runtime_reserve: float
    buffers: float = 0.0  # framework buffers: gradient buckets, reduction inputs

    @property
    def fragmentation(self) -> float:
        """PyTorch's caching allocator cannot reuse every freed block for the next
        request: short-lived tensors (activations, logits, gathered weights) cost a
        fraction more than their size."""
        return FRAGMENTATION_FRACTION * (self.activations + self.logits + self.gathered_weights)

    @property
    def total(self) -> float:
        """The estimate a configuration is chosen by (every term at its upper end)."""
        return sum(asdict(self).values()) + self.fragmentation

    @property
    def lower(self) -> float:
        """The least this memory can be: no fragmentation, the smallest runtime reserve.
        A configuration whose lower bound exceeds the GPU certainly does not fit; between
        the bounds the verdict is uncertain (the report gives the margin and the terms)."""
        reserve = min(self.runtime_reserve, RUNTIME_RESERVE_LOW_BYTES)
        return self.total - self.fragmentation - (self.runtime_reserve - reserve)

    def as_dict(self) -> dict[str, float]:
        """Every category, fragmentation and `total` (the upper estimate); `lower_bound`
        recovers the lower one from it."""
        d = asdict(self)
        d["fragmentation"] = self.fragmentation
        d["total"] = self.total
        return d


def block_activation_bytes(
    shape: BlockShape, linear_input_elems: float, dtype_bytes: int, selective: bool = False
) -> float:
    """Activations one block keeps for its backward, per GPU, with flash attention (no
    s x s scores): the linear layers' inputs (`linear_input_elems`, as each strategy stores
    them), LayerNorm inputs, q/k/v and the attention output, the activation's input, the
    residual stream twice and the fp32 log-sum-exp per head. Selective recompute drops
    the attention output and log-sum-exp (recomputed in backward)."""
    s = shape
    attention = float(s.attn_tokens * s.qkv_width)
    if not selective:
        attention += (
            s.attn_tokens * s.heads * s.head_dim + 4.0 * s.attn_tokens * s.heads / dtype_bytes
        )
    # unfused: stored softmax output, dropout output and mask, plus the scores and their
    # gradient alive while one layer runs
    scores = 0.0 if s.flash_attention else s.score_elems * (4.0 * dtype_bytes + 1.0)
    return dtype_bytes * (linear_input_elems + 4 * s.res_elems + attention + s.act_elems) + scores


def largest_fitting(fits: Callable[[int], bool], limit: int = 1 << 24) -> int:
    """The largest b >= 1 with fits(b) (fits is monotone: true up to some b), or 0."""
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
