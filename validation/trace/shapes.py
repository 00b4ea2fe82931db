"""Tensor shapes from CPU-op args: dtype sizes, element counts, GEMM (m, n, k, batch).

Profilers record `Input Dims` (a list with one entry per op input: a shape list, an empty
list for scalars, or a list of shapes for a TensorList) and `Input type` (dtype names such
as "float", "c10::BFloat16", "long int"). Kernel and record_param_comms args spell dtypes
as "Float", "BFloat16", "Long". This module reads both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

_DTYPE_BYTES = {
    "float": 4, "float32": 4, "int": 4, "int32": 4, "unsigned int": 4, "uint32": 4,
    "double": 8, "float64": 8, "long": 8, "long int": 8, "int64": 8, "unsigned long": 8,
    "bfloat16": 2, "c10::bfloat16": 2, "half": 2, "c10::half": 2, "float16": 2,
    "short": 2, "short int": 2, "int16": 2,
    "byte": 1, "char": 1, "signed char": 1, "unsigned char": 1, "bool": 1, "int8": 1,
    "uint8": 1, "int8_t": 1, "uint8_t": 1,
    "c10::complex<float>": 8, "c10::complex<double>": 16, "complexfloat": 8,
}  # fmt: skip


def dtype_size(name: str) -> int:
    """Bytes per element of a profiler dtype name; 1 for float8 variants, 0 if unknown."""
    key = name.strip().lower()
    if key in _DTYPE_BYTES:
        return _DTYPE_BYTES[key]
    if "float8" in key or "fp8" in key:
        return 1
    return 0


def is_shape(value: Any) -> bool:
    """A list of ints (one tensor's shape; [] is a 0-d tensor or a scalar)."""
    return isinstance(value, list) and all(isinstance(x, int) for x in value)


def numel(value: Any) -> int:
    """Elements of a shape, or the sum over a list of shapes (TensorList)."""
    if is_shape(value):
        return math.prod(value) if value else 0
    if isinstance(value, list):
        return sum(numel(v) for v in value)
    return 0


def tensor_dims(dims: Any) -> list[Any]:
    """The non-empty tensor entries of an `Input Dims` list, in order (scalars dropped)."""
    if not isinstance(dims, list):
        return []
    return [d for d in dims if isinstance(d, list) and d and numel(d) > 0]


@dataclass(frozen=True)
class GemmShape:
    """C[batch, m, n] = A[batch, m, k] @ B[batch, k, n]; `dtype` is A's."""

    m: int
    n: int
    k: int
    batch: int
    dtype: str

    @property
    def flops(self) -> float:
        """2·m·n·k·batch: one multiply and one add per inner-product term."""
        return 2.0 * self.m * self.n * self.k * self.batch

    @property
    def bytes(self) -> float:
        """A, B and C read or written once (the roofline's memory term)."""
        size = dtype_size(self.dtype) or 4
        return float(size * self.batch * (self.m * self.k + self.k * self.n + self.m * self.n))


def _type_at(types: Any, index: int) -> str:
    if isinstance(types, list) and index < len(types) and isinstance(types[index], str):
        return types[index]
    return ""


def gemm_shape(op: str, dims: Any, types: Any) -> GemmShape | None:
    """GEMM shape of an aten matmul-family op from its Input Dims; None if unreadable."""
    if not isinstance(dims, list):
        return None
    ab = {"aten::mm": (0, 1), "aten::_scaled_mm": (0, 1), "aten::bmm": (0, 1),
          "aten::addmm": (1, 2), "aten::baddbmm": (1, 2), "aten::matmul": (0, 1)}.get(op)  # fmt: skip
    if op == "aten::linear":
        return _linear(dims, types)
    if ab is None or len(dims) <= ab[1]:
        return None
    a, b = dims[ab[0]], dims[ab[1]]
    if not (is_shape(a) and is_shape(b)) or not a or not b:
        return None
    a2 = [1, *a] if len(a) == 1 else a
    b2 = [*b, 1] if len(b) == 1 else b
    if len(a2) < 2 or len(b2) < 2:
        return None
    m, k = a2[-2], a2[-1]
    n = b2[-1]
    batch = max(math.prod(a2[:-2]), math.prod(b2[:-2]))
    return GemmShape(m, n, k, batch, _type_at(types, ab[0]))


def _linear(dims: list[Any], types: Any) -> GemmShape | None:
    if len(dims) < 2 or not is_shape(dims[0]) or not is_shape(dims[1]) or len(dims[1]) != 2:
        return None
    x, w = dims[0], dims[1]
    if not x:
        return None
    return GemmShape(math.prod(x[:-1]) if len(x) > 1 else 1, w[0], w[1], 1, _type_at(types, 0))


def first_dtype(types: Any) -> str:
    """The first non-empty dtype name of an `Input type` list."""
    if isinstance(types, list):
        for t in types:
            if isinstance(t, str) and t and t not in ("Scalar", "TensorList", "ScalarList"):
                return t
    return ""


ATTENTION_BACKWARD_FACTOR = 2.5
"""Flash-attention backward FLOPs over forward FLOPs (workloads.transformer uses the same:
the backward recomputes the scores and runs four GEMM-like products to the forward's two)."""


def attention_flops(name: str, args: dict[str, Any]) -> float:
    """FLOPs of a fused-attention op (scaled_dot_product_attention and its backends, forward
    or backward) from its Input Dims: 4·batch·heads·s_q·s_k·head_dim forward, half of it
    when causal (`Concrete Inputs`' is_causal, else assumed causal as in decoder training),
    x ATTENTION_BACKWARD_FACTOR for a backward op. 0 when the shapes are unreadable."""
    dims = args.get("Input Dims")
    t = [d for d in dims if is_shape(d) and len(d) == 4] if isinstance(dims, list) else []
    backward = "backward" in name
    if backward and len(t) >= 3:
        t = t[1:]  # grad_out comes first
    if len(t) < 2:
        return 0.0
    q, k = t[0], t[1]
    if name.startswith("aten::_flash_attention") or name.startswith("aten::_efficient_attention"):
        b, s_q, h, d = q  # these backends take (batch, seq, heads, dim)
        s_k = k[1]
    else:
        b, h, s_q, d = q
        s_k = k[2]
    flops = 4.0 * b * h * s_q * s_k * d
    concrete = args.get("Concrete Inputs")
    causal = True
    if isinstance(concrete, list) and "scaled_dot_product_attention" in name and len(concrete) > 5:
        causal = str(concrete[5]) != "False"
    if causal:
        flops *= 0.5
    return flops * ATTENTION_BACKWARD_FACTOR if backward else flops
