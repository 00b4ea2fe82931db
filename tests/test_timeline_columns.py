"""A text's timeline columns are read once per compile signature and spread to every op
(simulator/engine/timeline_build.py `_text_columns`): the same values, dtypes and types
as reading every op, on a program whose passes repeat and whose ops differ in name,
kind, group, bytes and class."""

from __future__ import annotations

import numpy as np

from simulator.cost.model import RooflineKernels
from simulator.engine.compiled import PS_PER_S, CompiledProgram, compile_program
from simulator.engine.timeline_build import _text_columns
from workloads.graph import Program
from workloads.ops import (
    CollectiveKind,
    CollectiveOp,
    ComputeKind,
    ComputeOp,
    Op,
    RecvOp,
    SendOp,
    WaitOp,
)


def _program() -> Program:
    ops: list[Op] = []
    for m in range(5):
        base = len(ops)
        dep = (base - 1,) if base else ()
        ops += [
            ComputeOp("fwd", ComputeKind.GEMM, 4e9, 1e6, deps=dep, phase="fwd"),
            CollectiveOp("ar", CollectiveKind.ALL_REDUCE, "x", 3e7, "ar", "comm:x", deps=(base,)),
            SendOp("send", "pp", 1, 2e6, "pp:s", "comm:pp", deps=(base,)),
            RecvOp("recv", "pp", 0, 2e6, "pp:r", "comm:pp", deps=(base,)),
            WaitOp("w_ar", target=base + 1),
            ComputeOp(
                f"bwd{m % 2}", ComputeKind.ATTENTION, 6e9, 2e6, deps=(base + 4,), phase="bwd"
            ),
        ]
    ops.append(ComputeOp("step", ComputeKind.OPTIMIZER, 1e8, 3e6, deps=(len(ops) - 1,)))
    return Program("p", tuple(ops))


def _reference(cp: CompiledProgram) -> dict[str, list[object]]:
    out: dict[str, list[object]] = {
        k: [] for k in ("name", "kind", "group", "phase", "bytes", "flops", "launch_s")
    }
    for op in cp.program.ops:
        out["name"].append(op.name)
        out["phase"].append(op.phase)
        compute = isinstance(op, ComputeOp)
        if isinstance(op, ComputeOp | CollectiveOp):
            out["kind"].append(op.kind.value)
        else:
            out["kind"].append("send-recv" if isinstance(op, SendOp | RecvOp) else "wait")
        out["group"].append(op.group if isinstance(op, CollectiveOp | SendOp | RecvOp) else "")
        out["bytes"].append(float(getattr(op, "bytes", 0.0)))
        out["flops"].append(float(op.flops) if compute else 0.0)
        out["launch_s"].append(cp.launch_ps / PS_PER_S if compute else 0.0)
    return out


def test_columns_per_signature_match_every_op() -> None:
    program = _program()
    cp = compile_program(program, RooflineKernels(50e12, 1e12, 2e-6))
    assert len(set(cp.sig)) < len(program.ops)  # the passes repeat
    got = _text_columns(cp)
    for key, values in _reference(cp).items():
        col = got[key]
        assert col.shape == (len(program.ops),)
        assert col.dtype == (np.float64 if isinstance(values[0], float) else object), key
        assert col.tolist() == values, key
        assert [type(x) for x in col.tolist()] == [type(x) for x in values], key
