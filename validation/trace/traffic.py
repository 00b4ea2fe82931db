"""Bytes an ATen op moves through memory, estimated from its recorded input shapes.

Why: a memory-bound kernel's time is its traffic over the achieved bandwidth, and a trace
records no traffic, only the launching op's `Input Dims` and `Input type` (with
`record_shapes`). The estimate follows what the kernels of each op family read and write:

- out-of-place element-wise ops (and norms, activations, softmax, their backwards): every
  input read once, one output the size of the largest input written;
- in-place ops (`add_`, `mul_`, `copy_`, `_foreach_*_`...): inputs read, the first input
  (the one modified) written; `fill_`/`zero_`/`normal_` only write it;
- reductions (`sum`, `mean`, `norm`, `amax`...): inputs read, a negligible output;
- `cat`/`stack`: inputs read, their concatenation written;
- gathers (`embedding`, `index_select`): the selected rows read and written, not the table.

None means unknown: no shapes recorded, or no tensor input to size the op by.
"""

from __future__ import annotations

from typing import Any

from validation.trace.shapes import dtype_size, is_shape, numel

REDUCTIONS = frozenset(
    {
        "sum", "mean", "norm", "amax", "amin", "max", "min", "var", "std", "all", "any",
        "linalg_vector_norm", "argmax", "argmin", "prod", "logsumexp", "_foreach_norm",
        "nll_loss", "nll_loss2d",
    }
)  # fmt: skip
"""ATen op names (without `aten::` and a trailing `_`) whose output is small."""
WRITE_ONLY = frozenset({"fill_", "zero_", "normal_", "uniform_", "random_", "bernoulli_"})
CONCAT = frozenset({"cat", "stack", "_cat", "concat"})
GATHERS = frozenset({"embedding", "index_select", "embedding_dense_backward"})
DEFAULT_ELEMENT_BYTES = 4


def _entries(
    dims: Any, types: Any, default: int = DEFAULT_ELEMENT_BYTES
) -> list[tuple[int, int, list[int] | None]]:
    """(elements, element bytes, shape or None for a TensorList) of each tensor input;
    `default` bytes where neither the input's nor any other input's dtype is recorded."""
    types = types if isinstance(types, list) else []
    known = next((dtype_size(t) for t in types if isinstance(t, str) and dtype_size(t)), 0)
    out = []
    for i, d in enumerate(dims if isinstance(dims, list) else []):
        n = numel(d)
        if n <= 0:
            continue
        size = dtype_size(types[i]) if i < len(types) and isinstance(types[i], str) else 0
        out.append((n, size or known or default, d if is_shape(d) else None))
    return out


Tensor = tuple[int, int]
"""(elements, bytes per element) of one tensor an op reads or writes."""


def op_tensors(
    name: str, dims: Any, types: Any, default: int = DEFAULT_ELEMENT_BYTES
) -> tuple[list[Tensor], list[Tensor]] | None:
    """(read, written) tensors of ATen op `name` by the rules of the module doc (`default`
    bytes per element where no dtype is recorded); None when unknown (gathers are sized by
    op_traffic alone)."""
    if not name.startswith("aten::") or not isinstance(dims, list):
        return None
    base = name.removeprefix("aten::")
    inputs = _entries(dims, types, default)
    if not inputs or base in GATHERS:
        return None
    reads = [(n, b) for n, b, _ in inputs]
    if base in WRITE_ONLY:
        return [], reads[:1]
    if base.rstrip("_") in REDUCTIONS:
        return reads, []
    if base in CONCAT:
        total = sum(n for n, _ in reads)
        return reads, [(total, reads[0][1])]
    if base.endswith("_"):  # in place: the first input is also the output
        return reads, reads[:1]
    largest = max(reads, key=lambda t: t[0] * t[1])
    return reads, [(largest[0], reads[0][1])]


def op_traffic(name: str, dims: Any, types: Any) -> float | None:
    """Estimated bytes read and written by the kernels of ATen op `name` (see module doc)."""
    if name.removeprefix("aten::") in GATHERS and isinstance(dims, list):
        inputs = _entries(dims, types)
        return _gather(name.removeprefix("aten::"), inputs) if inputs else None
    tensors = op_tensors(name, dims, types)
    if tensors is None:
        return None
    reads, writes = tensors
    return float(sum(n * b for n, b in reads) + sum(n * b for n, b in writes))


def _gather(base: str, inputs: list[tuple[int, int, list[int] | None]]) -> float | None:
    """Rows selected from a table: read and written once each, plus the indices."""
    if base == "embedding_dense_backward":  # grad [.., d], indices: rows scattered back
        grad, idx = inputs[0], inputs[1] if len(inputs) > 1 else (0, 0, None)
        return float(2 * grad[0] * grad[1] + idx[0] * idx[1])
    if len(inputs) < 2 or inputs[0][2] is None or not inputs[0][2]:
        return None
    table, idx = inputs[0], inputs[-1]
    shape = table[2] or [1]
    row = table[0] // max(shape[0], 1)
    return float(2 * idx[0] * row * table[1] + idx[0] * idx[1])
