"""Kernel classification tables: one place that maps kernel names to timeline kinds.

`classify_kernel(name)` walks `KERNEL_RULES` in order and returns the first match as
(kind, family). `kind` uses the strings of `simulator.engine.timeline` (gemm, attention,
elementwise, optimizer, memcpy, quantize) or "collective" for NCCL/RCCL kernels, whose
collective kind is resolved later from richer metadata (kernel args, the enclosing
annotation or c10d op) with `collective_kind`. `family` names the library or op class
(cublas, cutlass, tensile, ck, conv, flash, nccl, norm, ...) for reports and calibration.

Names seen 2021-2026 on NVIDIA and AMD: cuBLAS (`volta_sgemm_*`, `ampere_*gemm*`,
`sm90_xmma_gemm_*`, `gemmSN_*`, `gemv*`, `splitKreduce_kernel`), CUTLASS
(`cutlass_80_tensorop_s1688gemm_*`), rocBLAS/hipBLASLt (`Cijk_*`), Composable Kernel
(`ck::`, `DeviceGemm`), cuDNN convolutions (`*_implicit_gemm_*`, `*fprop*`/`*dgrad*`/
`*wgrad*`), flash attention (`flash_fwd_kernel`, `fmha*`, `attn_fwd`), NCCL
(`ncclKernel_*`, `ncclDevKernel_*`) and RCCL (`rcclGenericKernel*`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

COLLECTIVE = "collective"


@dataclass(frozen=True)
class Rule:
    """A case-insensitive regex over kernel names, with the kind and family it implies."""

    pattern: re.Pattern[str]
    kind: str
    family: str


def _rule(regex: str, kind: str, family: str) -> Rule:
    return Rule(re.compile(regex, re.IGNORECASE), kind, family)


# Order matters: the first matching rule wins.
KERNEL_RULES: tuple[Rule, ...] = (
    _rule(r"rccl", COLLECTIVE, "rccl"),
    _rule(r"nccl", COLLECTIVE, "nccl"),
    _rule(
        r"flash|_efficient_attention|\bmha_|attn_fwd|attn_bwd|fused_attention", "attention", "flash"
    ),
    _rule(r"fmha|attention", "attention", "fmha"),
    _rule(
        r"implicit_gemm|implicitgemmconv|convolve|conv[123]d|fprop|dgrad|wgrad|scudnn|cudnn::cnn",
        "gemm",
        "conv",
    ),
    _rule(r"Cijk_", "gemm", "tensile"),
    _rule(r"\bck::|DeviceGemm|gemm_xdl|gemm_wmma", "gemm", "ck"),
    _rule(r"cutlass\w*gemm|cutlass::gemm", "gemm", "cutlass"),
    _rule(r"triton_tem_fused_\w*mm", "gemm", "triton"),
    _rule(r"(?<!fb)gemm|gemv|cublas|hipblaslt|splitKreduce", "gemm", "cublas"),
    _rule(r"embedding", "elementwise", "embedding"),
    _rule(
        r"(Adam|AdamW|Adagrad|Lamb|SGD|Lion|Adafactor)\w*Functor|fused_adam|_fused_sgd|FusedAdam",
        "optimizer",
        "fused",
    ),
    _rule(r"quantize|hfp8|fp8|float8|_to_mx", "quantize", "quantize"),
    _rule(r"norm|Welford|RowwiseMoments|GammaBeta|bn_fw|bn_bw", "elementwise", "norm"),
    _rule(r"softmax", "elementwise", "softmax"),
    _rule(r"reduce_kernel|cub::|Reduce", "elementwise", "reduce"),
    _rule(r"copy|CatArray|index|gather|scatter|Memcpy", "elementwise", "copy"),
    _rule(r"triton", "elementwise", "triton"),
)

# CPU ops whose kernels are GEMMs, and the ops under which GEMMs may sit one level up.
GEMM_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm"})
MATMUL_OPS = frozenset({"aten::matmul", "aten::linear"})

FREE_OPS = frozenset(
    {
        "aten::view", "aten::reshape", "aten::_reshape_alias", "aten::as_strided", "aten::t",
        "aten::transpose", "aten::permute", "aten::select", "aten::unsqueeze", "aten::squeeze",
        "aten::expand", "aten::detach", "aten::detach_", "aten::alias", "aten::slice",
        "aten::narrow", "aten::split", "aten::chunk", "aten::unbind", "aten::empty",
        "aten::empty_like", "aten::empty_strided", "aten::resolve_conj", "aten::resolve_neg",
        "aten::_unsafe_view", "aten::lift_fresh", "aten::to", "aten::contiguous",
        "aten::result_type", "aten::zeros", "aten::ones_like", "aten::zeros_like",
    }
)  # fmt: skip
"""Ops that move no data (or whose data op is a separate, recorded child)."""


def is_attention_op(name: str) -> bool:
    """CPU ops of fused attention (`aten::scaled_dot_product_attention` and the backend
    ops under it, forward and backward)."""
    return "scaled_dot_product" in name


_KERNEL_COLL = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
# NCCL < 2.9 (2020-21): ncclAllReduceRingLLKernel_sum_f32, ncclBroadcastTreeSimpleKernel_...
_KERNEL_COLL_OLD = re.compile(
    r"(?:nccl|rccl)(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|AllToAll)"
)
_COLL_SUFFIXES = ("coalesced", "tensor", "into", "base", "single", "list")
_COLL_KINDS = {
    "allreduce": "all-reduce",
    "barrier": "all-reduce",
    "allgather": "all-gather",
    "reducescatter": "reduce-scatter",
    "alltoall": "all-to-all",
    "alltoallv": "all-to-all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "send-recv",
    "send": "send-recv",
    "recv": "send-recv",
}


@lru_cache(maxsize=65536)
def classify_kernel(name: str) -> tuple[str, str]:
    """(kind, family) of a GPU kernel from its name alone; default elementwise/other.

    Memoised: a trace has millions of kernels but only hundreds of distinct names.
    """
    for rule in KERNEL_RULES:
        if rule.pattern.search(name):
            return rule.kind, rule.family
    return "elementwise", "other"


def collective_kind(text: str) -> str | None:
    """Timeline collective kind of a collective's name in any spelling, or None.

    Accepts kernel-arg names ("allreduce", "_allgather_base"), annotations
    ("nccl:_reduce_scatter_base", "gloo:all_to_all"), c10d ops ("c10d::alltoall_base_")
    and NCCL kernel tokens ("AllReduce", "SendRecv"). "wait" and unknown names give None.
    """
    token = text.rsplit("::", 1)[-1].split(":", 1)[-1]
    token = re.sub(r"[^a-z]", "", token.lower())
    for prefix in ("nccl", "rccl", "gloo"):
        token = token.removeprefix(prefix)
    changed = True
    while changed:
        changed = False
        for suffix in _COLL_SUFFIXES:
            if token.endswith(suffix) and token != suffix:
                token, changed = token[: -len(suffix)], True
    return _COLL_KINDS.get(token)


def collective_from_kernel_name(name: str) -> tuple[str, str] | None:
    """(kind, token) from an NCCL/RCCL kernel name such as ncclDevKernel_AllGather_RING_LL."""
    match = _KERNEL_COLL.search(name) or _KERNEL_COLL_OLD.search(name)
    if not match:
        return None
    token = match.group(1)
    kind = collective_kind(token)
    return (kind, token) if kind else None


def is_comm_op(name: str) -> bool:
    """CPU ranges that describe a collective: c10d ops, record_param_comms, nccl:/gloo: annotations."""
    return name.startswith(("c10d::", "nccl:", "rccl:", "gloo:")) or name == "record_param_comms"
