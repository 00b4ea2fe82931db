"""Count the non-GEMM kernels of one transformer block from a real torch trace.

Why: the simulator's block skeleton (workloads/transformer.py) must launch the kernels a
real implementation launches, not a guess. `axsim trace-torch --grid 1,1,1,1 --layers 1
--no-checkpoint` runs our torch implementation of the block (validation/torch4d) and
records a Kineto trace; this module reads it and lists, in launch order, every data-moving
ATen op of the block's forward (the `4d:block0.attention` and `4d:block0.mlp` ranges) and
of its backward (the autograd nodes whose sequence numbers are the forward ops'), with the
tensors each reads and writes (validation.trace.traffic) named by the block's sizes:

    T*h, T*3h, T*4h  tokens x hidden, x QKV width, x MLP width (activations);
    h, 3h, 4h        bias and LayerNorm vectors;  T  per-token statistics;
    T*heads          per-token, per-head statistics (attention's log-sum-exp)

with a `:f32` suffix for fp32 tensors of a bf16 run. Rows carry the linear layer they
follow (`slot`: 0 before the range's first linear, 1 after it, 2 after the second) and a
role (norm, attention, activation, bias, residual, copy, other) that the skeleton uses to
place them. GEMMs are the strategies' (they split them), so they are left out here.

`python -m validation.references.block_kernels TRACE [-o FILE]` writes workloads/data/block_kernels.yaml;
tests/test_block_inventory.py regenerates it from the committed fixture trace.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from validation.errors import TraceError
from validation.trace.classify import FREE_OPS, GEMM_OPS, MATMUL_OPS, is_attention_op
from validation.trace.reader import iter_events
from validation.trace.traffic import op_tensors

RANGES = ("attention", "mlp")
LINEAR_MARKERS = ("_Linear4D", "LinearBackward", "_Linear4DBackward")
SKIP = (
    FREE_OPS | GEMM_OPS | MATMUL_OPS | {"aten::detach", "aten::item", "aten::_local_scalar_dense"}
)


@dataclass
class _Op:
    name: str
    ts: float
    end: float
    args: dict[str, Any]
    children: list[_Op]


def _tree(events: list[dict[str, Any]]) -> list[_Op]:
    """Nest one thread's ranges by time containment (outermost first)."""
    roots: list[_Op] = []
    stack: list[_Op] = []
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        node = _Op(str(e["name"]), float(e["ts"]), float(e["ts"]) + float(e["dur"]),
                   e.get("args") or {}, [])  # fmt: skip
        while stack and stack[-1].end < node.end:
            stack.pop()
        (stack[-1].children if stack else roots).append(node)
        stack.append(node)
    return roots


def _walk(node: _Op) -> Iterator[_Op]:
    yield node
    for c in node.children:
        yield from _walk(c)


def _kernels(node: _Op) -> Iterator[_Op]:
    """The outermost data-moving ATen ops at or under `node` (their children are theirs)."""
    if any(m in node.name for m in LINEAR_MARKERS) or node.name in GEMM_OPS | MATMUL_OPS:
        return
    if node.name.startswith(("c10d::", "gloo:")):
        return
    if node.name.startswith("aten::") and node.name not in SKIP:
        yield node
        return
    for c in node.children:
        yield from _kernels(c)


@dataclass(frozen=True)
class Sizes:
    """The traced block's dimensions: numel -> symbol."""

    tokens: int
    hidden: int
    heads: int

    def symbols(self) -> dict[int, str]:
        t, h = self.tokens, self.hidden
        table = {t * h: "T*h", t * 3 * h: "T*3h", t * 4 * h: "T*4h", h: "h", 3 * h: "3h",
                 4 * h: "4h", t: "T", t * self.heads: "T*heads"}  # fmt: skip
        if len(table) != 8:
            raise TraceError("the traced block's sizes must be distinct (T, h, heads)")
        return table


def _role(name: str, reads: list[str]) -> str:
    base = name.removeprefix("aten::")
    if "layer_norm" in base:
        return "norm"
    if is_attention_op(name):
        return "attention"
    if "gelu" in base or "silu" in base:
        return "activation"
    vectors = [r for r in reads if r.split(":")[0] in ("h", "3h", "4h")]
    if base in ("add", "add_") and vectors:
        return "bias"
    if base == "sum" and len(reads) == 1:
        return "bias"  # a bias's gradient: the sum over tokens
    if base in ("add", "add_"):
        return "residual"
    if base in ("stack", "cat", "clone", "copy_", "contiguous", "_to_copy", "to"):
        return "copy"
    return "other"


def _row(op: _Op, phase: str, rng: str, slot: int, sizes: dict[int, str]) -> dict[str, Any]:
    found = op_tensors(op.name, op.args.get("Input Dims"), op.args.get("Input type"), default=2)
    if found is None:
        raise TraceError(f"{op.name}: no tensor shapes in the trace (record_shapes off?)")
    names = []
    for part in found:
        names.append([sizes.get(n, f"?{n}") + (":f32" if b == 4 else "") for n, b in part])
    unknown = [x for part in names for x in part if x.startswith("?")]
    if unknown:
        raise TraceError(f"{op.name}: tensor sizes {unknown} are none of the block's")
    return {"phase": phase, "range": rng, "slot": slot, "op": op.name,
            "role": _role(op.name, names[0]), "read": names[0], "write": names[1]}  # fmt: skip


def _step(roots: list[_Op]) -> _Op:
    steps = [r for r in roots if r.name.startswith("ProfilerStep#")]
    if not steps:
        raise TraceError("no ProfilerStep in the trace")
    return steps[-1]


def inventory(path: str | Path) -> dict[str, Any]:
    """The block's kernel inventory from one trace-torch trace of a single block."""
    events = [
        e for e in iter_events(Path(path))
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")
    ]  # fmt: skip
    tids = {e["tid"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}
    step = _step(_tree([e for e in events if e["tid"] in tids]))
    rows: list[dict[str, Any]] = []
    seqs: dict[int, tuple[str, int]] = {}
    dims: dict[str, int] = {}
    for rng in RANGES:
        scope = next((n for n in _walk(step) if n.name == f"4d:block0.{rng}"), None)
        if scope is None:
            raise TraceError(f"{path}: no 4d:block0.{rng} range (trace one block, no checkpoint)")
        slot = 0
        for top in scope.children:
            seq = top.args.get("Sequence number")
            if any(m in top.name for m in LINEAR_MARKERS):
                slot += 1
                if isinstance(seq, int):
                    seqs[seq] = (rng, -slot)
                continue
            if isinstance(seq, int):
                seqs[seq] = (rng, slot)
            if top.name == "aten::layer_norm" and rng == "attention":
                x = top.args["Input Dims"][0]
                dims["tokens"], dims["hidden"] = x[0] * x[1], x[-1]
            if is_attention_op(top.name):
                dims["heads"] = top.args["Input Dims"][0][1]
            rows += [{"_op": k, "range": rng, "slot": slot, "phase": "fwd"} for k in _kernels(top)]
    sizes = Sizes(dims["tokens"], dims["hidden"], dims["heads"]).symbols()
    out = [_row(r["_op"], "fwd", r["range"], r["slot"], sizes) for r in rows]
    for node in step.children:
        if not node.name.startswith("autograd::engine::evaluate_function"):
            continue
        seq = next((c.args.get("Sequence number") for c in node.children), None)
        if not isinstance(seq, int) or seq not in seqs:
            continue
        rng, slot = seqs[seq]
        if slot < 0:
            continue  # a linear's backward: GEMMs and collectives, the strategy's
        out += [_row(k, "bwd", rng, slot, sizes) for c in node.children for k in _kernels(c)]
    return {"rows": out}


def render(inv: dict[str, Any], source: str) -> str:
    """The YAML file (header comment + rows), deterministic."""
    head = (
        "# Non-GEMM kernels of one transformer block as our torch implementation launches\n"
        "# them (eager PyTorch), counted by validation/references/block_kernels.py from\n"
        f"# {source}\n"
        "# Do not edit: regenerate with `python -m validation.references.block_kernels TRACE -o FILE`.\n"
        "# Sizes: T*h, T*3h, T*4h (tokens x hidden / QKV / MLP width), h, 3h, 4h (vectors),\n"
        "# T (per token), T*heads (per token and head); ':f32' marks fp32 tensors of a bf16\n"
        "# run. slot: the linear layer of the range the kernel follows (0: none yet).\n"
    )
    return head + yaml.safe_dump(inv, sort_keys=False, default_flow_style=None, width=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("-o", "--out")
    parser.add_argument("--source", default=None, help="Provenance line for the header.")
    args = parser.parse_args(argv)
    try:
        text = render(inventory(args.trace), args.source or args.trace)
    except (TraceError, KeyError, IndexError, TypeError) as exc:
        sys.stderr.write(f"block_kernels: error: {exc}\n")
        return 2
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
