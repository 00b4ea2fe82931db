"""Materialise a simulated rank's Timeline records from the engine's arrays (on demand).

Records follow the program text when the text lists every op (copies the engine skipped
are filled in from the copies it simulated, shifted by whole periods: the periodic proof
makes them exact). A program whose text stands for more copies than it holds
(`Segment.repeat`) keeps the records the engine simulated, in the order it unrolled
them; the `warps` metadata says which records stand for the skipped copies.
"""

from __future__ import annotations

from array import array

import numpy as np

from simulator.engine.compiled import PS_PER_S, CompiledProgram
from simulator.engine.ranks import Warp
from simulator.engine.timeline import RankTimeline
from simulator.engine.unroll import Unrolled
from workloads.ops import CollectiveOp, ComputeOp, RecvOp, SendOp


def _objects(values: list[str]) -> np.ndarray:
    """A 1-d object array of the values (np.array would make a string array)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _text_columns(cp: CompiledProgram) -> dict[str, np.ndarray]:
    """Columns of the text's ops. They are read from one op per compile signature
    (`CompiledProgram.sig`: ops with one signature have equal fields other than their
    dependencies, and no column reads those), appended to lists, and spread to every op
    by the signature: the values of a pass over every op, for the distinct ops' cost."""
    n = len(cp.program.ops)
    sig = np.asarray(cp.sig if len(cp.sig) == n else range(n), dtype=np.int64)
    # one row per distinct signature (its first op); `row[i]` is op i's
    _, first, row = np.unique(sig, return_index=True, return_inverse=True)
    ops = [cp.program.ops[i] for i in first.tolist()]
    gap = cp.launch_ps / PS_PER_S
    names: list[str] = []
    phases: list[str] = []
    kinds: list[str] = []
    groups: list[str] = []
    nbytes: list[float] = []
    flops: list[float] = []
    launch: list[float] = []
    for op in ops:
        names.append(op.name)
        phases.append(op.phase)
        if isinstance(op, ComputeOp):
            kinds.append(op.kind.value)
            groups.append("")
            nbytes.append(op.bytes)
            flops.append(op.flops)
            launch.append(gap)
            continue
        flops.append(0.0)
        launch.append(0.0)
        if isinstance(op, CollectiveOp):
            kinds.append(op.kind.value)
            groups.append(op.group)
            nbytes.append(op.bytes)
        elif isinstance(op, SendOp | RecvOp):
            kinds.append("send-recv")
            groups.append(op.group)
            nbytes.append(op.bytes)
        else:
            kinds.append("wait")
            groups.append("")
            nbytes.append(0.0)
    streams = np.array(cp.stream_names, dtype=object)[np.asarray(cp.stream, dtype=np.int64)]
    stretch = (
        np.asarray(cp.stretch_ps, dtype=np.float64) / PS_PER_S if cp.stretch_ps else np.zeros(n)
    )
    return {
        "issue_s": np.asarray(cp.issue_ps, dtype=np.float64) / PS_PER_S,
        "launch_s": np.array(launch, dtype=np.float64)[row],
        "interference_s": stretch,
        "name": _objects(names)[row],
        "kind": _objects(kinds)[row],
        "group": _objects(groups)[row],
        "phase": _objects(phases)[row],
        "bytes": np.array(nbytes, dtype=np.float64)[row],
        "flops": np.array(flops, dtype=np.float64)[row],
        "stream": streams,
    }


def program_columns(prog: Unrolled, cache: dict[int, object]) -> dict[str, np.ndarray]:
    """Per-record columns of a program's records (shared by its ranks, cached)."""
    key = id(prog)
    got = cache.get(key)
    if got is None:
        text = cache.get(id(prog.cp))
        if text is None:
            text = _text_columns(prog.cp)
            cache[id(prog.cp)] = text
        assert isinstance(text, dict)
        if prog.src is None or not prog.program.compressed:
            got = text
        else:
            idx = np.asarray(prog.src, dtype=np.int64)
            got = {k: v[idx] for k, v in text.items()}
        cache[key] = got
    assert isinstance(got, dict)
    return got


def text_times(
    prog: Unrolled, start: array, end: array, sync: dict[int, int], warps: list[Warp]
) -> tuple[np.ndarray, np.ndarray, dict[int, int]]:
    """Start, end and sync times in text order for a program whose text lists every op:
    unrolled records go to their text index, skipped copies are shifted copies."""
    st = np.frombuffer(start, dtype=np.int64)
    en = np.frombuffer(end, dtype=np.int64)
    if prog.src is None:
        return st, en, sync
    assert prog.text_index is not None
    real = np.asarray(prog.text_index, dtype=np.int64)
    unrolled = np.arange(real.shape[0])
    for w in warps:
        run = prog.run_at(w.lo2)
        assert run is not None
        moved = (unrolled >= w.lo2) & (unrolled < run.unrolled_stop)
        real[moved] += w.periods * (w.lo2 - w.lo1)
    n = prog.cp.num_ops
    out_st = np.full(n, -1, dtype=np.int64)
    out_en = np.full(n, -1, dtype=np.int64)
    out_st[real] = st
    out_en[real] = en
    out_sync = {int(real[i]): v for i, v in sync.items()}
    for w in warps:
        block = np.arange(w.lo1, w.lo2)
        width = w.lo2 - w.lo1
        for j in range(1, w.periods + 1):
            shift = j * w.period_ps
            out_st[real[block] + j * width] = np.where(st[block] >= 0, st[block] + shift, -1)
            out_en[real[block] + j * width] = np.where(en[block] >= 0, en[block] + shift, -1)
            for i in range(w.lo1, w.lo2):
                v = sync.get(i)
                if v is not None:
                    out_sync[int(real[i]) + j * width] = v + shift
    return out_st, out_en, out_sync


def record_issue(prog: Unrolled, warps: list[Warp]) -> np.ndarray:
    """Host issue times (picoseconds) of a compressed program's records, in unrolled
    order: what the engine read, plus what skipped copies added to the records after
    them (every record from a skip's lo2 on was issued after the skipped copies)."""
    issue = np.asarray(prog.issue, dtype=np.int64).copy()
    for w in warps:
        issue[w.lo2 :] += w.host_ps
    return issue


def rank_timeline(
    rank: int,
    cols: dict[str, np.ndarray],
    start: np.ndarray,
    end: np.ndarray,
    sync: dict[int, int],
    issue_ps: np.ndarray | None = None,
) -> RankTimeline:
    """The RankTimeline of one simulated rank from its times (integer picoseconds);
    `issue_ps` replaces the program's host issue times where records are not in text
    order (see `record_issue`)."""
    st = start.astype(np.float64) / PS_PER_S
    en = end.astype(np.float64) / PS_PER_S
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
        issue_s=cols["issue_s"] if issue_ps is None else issue_ps.astype(np.float64) / PS_PER_S,
    )
