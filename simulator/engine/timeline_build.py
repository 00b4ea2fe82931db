"""Materialise a simulated rank's Timeline records from compiled arrays (on demand)."""

from __future__ import annotations

from array import array

import numpy as np

from simulator.engine.compiled import PS_PER_S, CompiledProgram
from simulator.timeline import RankTimeline
from workloads.ops import CollectiveOp, ComputeOp, RecvOp, SendOp


def _program_columns(prog: CompiledProgram) -> dict[str, np.ndarray]:
    ops = prog.program.ops
    n = len(ops)
    names = np.empty(n, dtype=object)
    kinds = np.empty(n, dtype=object)
    groups = np.empty(n, dtype=object)
    phases = np.empty(n, dtype=object)
    nbytes = np.zeros(n)
    flops = np.zeros(n)
    launch = np.zeros(n)
    for i, op in enumerate(ops):
        names[i] = op.name
        phases[i] = op.phase
        if isinstance(op, ComputeOp):
            kinds[i] = op.kind.value
            groups[i] = ""
            nbytes[i] = op.bytes
            flops[i] = op.flops
            launch[i] = prog.launch_ps / PS_PER_S
        elif isinstance(op, CollectiveOp):
            kinds[i] = op.kind.value
            groups[i] = op.group
            nbytes[i] = op.bytes
        elif isinstance(op, SendOp | RecvOp):
            kinds[i] = "send-recv"
            groups[i] = op.group
            nbytes[i] = op.bytes
        else:
            kinds[i] = "wait"
            groups[i] = ""
    streams = np.array(prog.stream_names, dtype=object)[np.asarray(prog.stream, dtype=np.int64)]
    stretch = (
        np.asarray(prog.stretch_ps, dtype=np.float64) / PS_PER_S if prog.stretch_ps else np.zeros(n)
    )
    return {
        "issue_s": np.asarray(prog.issue_ps, dtype=np.float64) / PS_PER_S,
        "launch_s": launch,
        "interference_s": stretch,
        "name": names,
        "kind": kinds,
        "group": groups,
        "phase": phases,
        "bytes": nbytes,
        "flops": flops,
        "stream": streams,
    }


def rank_timeline(
    rank: int,
    prog: CompiledProgram,
    start: array,
    end: array,
    sync: dict[int, int],
    cache: dict[int, object],
) -> RankTimeline:
    """The RankTimeline of one simulated rank (program columns are shared and cached)."""
    cols = cache.get(id(prog))
    if cols is None:
        cols = _program_columns(prog)
        cache[id(prog)] = cols
    assert isinstance(cols, dict)
    st = np.frombuffer(start, dtype=np.int64).astype(np.float64) / PS_PER_S
    en = np.frombuffer(end, dtype=np.int64).astype(np.float64) / PS_PER_S
    sync_s = st.copy()
    if sync:
        idx = np.fromiter(sync.keys(), dtype=np.int64, count=len(sync))
        val = np.fromiter(sync.values(), dtype=np.int64, count=len(sync))
        sync_s[idx] = val / PS_PER_S
    return RankTimeline(
        rank=rank,
        stream=cols["stream"],
        name=cols["name"],
        kind=cols["kind"],
        group=cols["group"],
        start_s=st,
        end_s=en,
        bytes=cols["bytes"],
        flops=cols["flops"],
        phase=cols["phase"],
        sync_start_s=sync_s,
        launch_s=cols["launch_s"],
        interference_s=cols["interference_s"],
        issue_s=cols["issue_s"],
    )
