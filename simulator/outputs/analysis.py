"""Interval arithmetic on a rank's timeline: busy time, overlap, exposed communication.

Used by the report and by validation (measured and simulated timelines share it).
Definitions for one rank:
- compute time: length of the union of compute-kernel intervals;
- communication time: length of the union of collective intervals (launch to end, so
  waiting for peers counts, as it does in a profiler trace);
- exposed communication: communication time not covered by compute;
- overlapped communication: communication time covered by compute;
- exposed time per group: the exposed intervals split equally among the groups whose
  collectives are in flight at each instant (so the groups add up to the exposed total);
- compute by kind: the kernels' own time per kind, and, for simulated timelines (which
  know them), the launch gaps and the interference stretch as rows of their own
  (`launch_gaps`, `interference`), so the rows add up to the compute records' total;
- host-bound time (simulated timelines): idle time of a stream before a compute op that
  started the moment the host issued it, i.e. the GPU waited for the host (launch-bound).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from simulator.cost.terms import INTERFERENCE, LAUNCH_GAPS
from simulator.engine.compiled import PS_PER_S
from simulator.outputs.timeline import RankTimeline

if TYPE_CHECKING:
    from simulator.engine.ranks import Warp


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into disjoint sorted ones."""
    if starts.size == 0:
        return starts.astype(np.float64), ends.astype(np.float64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    merged_start = s[idx]
    merged_end = np.maximum.reduceat(e, idx)
    return merged_start, merged_end


def length(starts: np.ndarray, ends: np.ndarray) -> float:
    s, e = union(starts, ends)
    return float((e - s).sum())


def intersection_length(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]
) -> float:
    """Length of the intersection of two disjoint sorted interval sets."""
    (sa, ea), (sb, eb) = a, b
    i = j = 0
    total = 0.0
    while i < sa.size and j < sb.size:
        lo = max(sa[i], sb[j])
        hi = min(ea[i], eb[j])
        if hi > lo:
            total += hi - lo
        if ea[i] < eb[j]:
            i += 1
        else:
            j += 1
    return total


@dataclass(frozen=True)
class RankBreakdown:
    """Where one rank's time went."""

    span_s: float
    compute_s: float
    comm_s: float
    exposed_comm_s: float
    overlapped_comm_s: float
    exposed_by_group_s: dict[str, float]
    comm_by_group_s: dict[str, float]
    compute_by_kind_s: dict[str, float]
    host_bound_s: float = 0.0


def breakdown(tl: RankTimeline) -> RankBreakdown:
    """Busy, overlapped and exposed time of one rank."""
    comp = tl.mask_compute()
    comm = tl.mask_comm()
    cu = union(tl.start_s[comp], tl.end_s[comp])
    mu = union(tl.start_s[comm], tl.end_s[comm])
    compute_s = float((cu[1] - cu[0]).sum())
    comm_s = float((mu[1] - mu[0]).sum())
    overlapped = intersection_length(cu, mu)
    span = float(tl.end_s.max(initial=0.0) - tl.start_s.min(initial=0.0)) if len(tl) else 0.0
    groups = sorted({str(g) for g in tl.group[comm]})
    comm_by_group = {
        g: length(tl.start_s[comm & (tl.group == g)], tl.end_s[comm & (tl.group == g)])
        for g in groups
    }
    return RankBreakdown(
        span_s=span,
        compute_s=compute_s,
        comm_s=comm_s,
        exposed_comm_s=comm_s - overlapped,
        overlapped_comm_s=overlapped,
        exposed_by_group_s=_exposed_by_group(tl, comm, cu, groups),
        comm_by_group_s=comm_by_group,
        compute_by_kind_s=compute_by_kind(tl, comp),
        host_bound_s=host_bound(tl),
    )


def compute_by_kind(tl: RankTimeline, comp: np.ndarray | None = None) -> dict[str, float]:
    """Seconds of compute records per kind (kernel time only), plus `launch_gaps` and
    `interference` rows where the timeline carries them (see module doc)."""
    comp = tl.mask_compute() if comp is None else comp
    own = tl.end_s - tl.start_s
    extra: dict[str, float] = {}
    for key, col in ((LAUNCH_GAPS, tl.launch_s), (INTERFERENCE, tl.interference_s)):
        if col is not None:
            part = np.where(comp, col, 0.0)
            own = own - part
            extra[key] = float(part.sum())
    kinds = sorted({str(k) for k in tl.kind[comp]})
    out = {k: float(own[comp & (tl.kind == k)].sum()) for k in kinds}
    out.update(extra)
    return out


HOST_TOLERANCE_S = 1e-12


def host_bound(tl: RankTimeline) -> float:
    """Seconds the rank had nothing in flight because the host had not issued the next op:
    the idle time before an op (kernel or collective) that started the moment the host
    issued it, outside any compute or communication interval (a launch-bound step)."""
    got = _host_waits(tl)
    if got is None:
        return 0.0
    wait, busy = got
    return float((wait[1] - wait[0]).sum()) - intersection_length(wait, busy)


Intervals = tuple[np.ndarray, np.ndarray]


def _host_waits(tl: RankTimeline) -> tuple[Intervals, Intervals] | None:
    """(host waits, busy intervals), both disjoint and sorted; None without issue times."""
    if tl.issue_s is None or len(tl) == 0:
        return None
    busy_mask = tl.mask_compute() | tl.mask_comm()
    waits_s: list[np.ndarray] = []
    waits_e: list[np.ndarray] = []
    for stream in {str(x) for x in tl.stream[busy_mask]}:
        idx = np.flatnonzero(busy_mask & (tl.stream == stream))
        idx = idx[np.argsort(tl.start_s[idx], kind="stable")]
        start, end, issue = tl.start_s[idx], tl.end_s[idx], tl.issue_s[idx]
        prev_end = np.concatenate([[start[0]], end[:-1]])
        waited = (np.abs(start - issue) <= HOST_TOLERANCE_S + 1e-9 * start) & (start > prev_end)
        waits_s.append(prev_end[waited])
        waits_e.append(start[waited])
    if not waits_s:
        return None
    wait = union(np.concatenate(waits_s), np.concatenate(waits_e))
    busy = union(tl.start_s[busy_mask], tl.end_s[busy_mask])
    return wait, busy


def _host_bound_within(tl: RankTimeline, t1: float, t2: float) -> float:
    """The part of `host_bound(tl)` that falls in [t1, t2) (waits are decided on the whole
    timeline: a wait can start before t1)."""
    got = _host_waits(tl)
    if got is None:
        return 0.0
    wait, busy = (_clip(x, t1, t2) for x in got)
    return float((wait[1] - wait[0]).sum()) - intersection_length(wait, busy)


def _clip(x: Intervals, t1: float, t2: float) -> Intervals:
    return np.clip(x[0], t1, t2), np.clip(x[1], t1, t2)


def with_skipped_periods(tl: RankTimeline, warps: Sequence[Warp]) -> RankBreakdown:
    """The breakdown of a rank whose records stand for skipped periods (the engine's
    `warps` metadata, simulator/engine/ranks.py `Warp`), as if every copy were there.

    Every quantity here is an integral over time of what is running at each instant, or a
    sum over records of their own time, and the skipped periods repeat the compared period
    [t1, t2) exactly, so: undo the skips (records from lo2 on move back, in time and in
    host issue time), take the breakdown, and add each compared period `periods` times,
    clipped to its interval, on the clock it was compared on. A record cut by the clip
    keeps the same share of its launch gap and interference stretch as of its duration
    (its pieces in consecutive copies add up to one record); host waits are clipped after
    they are found on the whole timeline."""
    if not warps:
        return breakdown(tl)
    issue0 = tl.issue_s if tl.issue_s is not None else np.zeros(len(tl))
    frames = [(tl.start_s.copy(), tl.end_s.copy(), issue0.copy())]
    index = np.arange(len(tl))
    for w in reversed(warps):  # frame k-1 = frame k with skip k undone
        st, en, iss = frames[0]
        back = w.periods * w.period_ps / PS_PER_S
        moved = index >= w.lo2
        frames.insert(
            0,
            (
                np.where(moved, st - back, st),
                np.where(moved, en - back, en),
                np.where(moved, iss - w.host_ps / PS_PER_S, iss),
            ),
        )
    keep_issue = tl.issue_s is not None
    bd = breakdown(_with_times(tl, *frames[0], keep_issue))
    for w, (st, en, iss) in zip(warps, frames[:-1], strict=True):
        t1, t2 = w.t1 / PS_PER_S, w.t2 / PS_PER_S
        cs, ce = np.clip(st, t1, t2), np.clip(en, t1, t2)
        keep = (en > t1) & (st < t2)
        dur = en - st
        share = np.divide(ce - cs, dur, out=np.ones_like(dur), where=dur > 0)
        clipped = replace(
            _with_times(tl, cs, ce, iss, keep_issue),
            launch_s=None if tl.launch_s is None else tl.launch_s * share,
            interference_s=None if tl.interference_s is None else tl.interference_s * share,
        )
        part = breakdown(clipped.select(keep))
        host = _host_bound_within(_with_times(tl, st, en, iss, keep_issue), t1, t2)
        part = replace(part, span_s=t2 - t1, host_bound_s=host)
        bd = _add(bd, part, w.periods)
    return replace(bd, span_s=float(tl.end_s.max(initial=0.0) - tl.start_s.min(initial=0.0)))


def record_weights(length: int, warps: Sequence[Warp]) -> np.ndarray:
    """How many ops of the iteration each record stands for (1, or more for the records
    of a compared period)."""
    w = np.ones(length)
    for warp in warps:
        w[warp.lo1 : warp.lo2] += warp.periods
    return w


def _with_times(
    tl: RankTimeline, start: np.ndarray, end: np.ndarray, issue: np.ndarray, keep_issue: bool
) -> RankTimeline:
    return replace(tl, start_s=start, end_s=end, issue_s=issue if keep_issue else None)


def _add(a: RankBreakdown, b: RankBreakdown, k: float) -> RankBreakdown:
    def merged(x: dict[str, float], y: dict[str, float]) -> dict[str, float]:
        return {key: x.get(key, 0.0) + k * y.get(key, 0.0) for key in x.keys() | y.keys()}

    return RankBreakdown(
        span_s=a.span_s + k * b.span_s,
        compute_s=a.compute_s + k * b.compute_s,
        comm_s=a.comm_s + k * b.comm_s,
        exposed_comm_s=a.exposed_comm_s + k * b.exposed_comm_s,
        overlapped_comm_s=a.overlapped_comm_s + k * b.overlapped_comm_s,
        exposed_by_group_s=merged(a.exposed_by_group_s, b.exposed_by_group_s),
        comm_by_group_s=merged(a.comm_by_group_s, b.comm_by_group_s),
        compute_by_kind_s=merged(a.compute_by_kind_s, b.compute_by_kind_s),
        host_bound_s=a.host_bound_s + k * b.host_bound_s,
    )


def _exposed_by_group(
    tl: RankTimeline,
    comm: np.ndarray,
    compute_union: tuple[np.ndarray, np.ndarray],
    groups: list[str],
) -> dict[str, float]:
    """Sweep line over communication and compute edges; exposed instants are shared
    equally among the groups in flight."""
    out = dict.fromkeys(groups, 0.0)
    if not groups:
        return out
    gidx = {g: i for i, g in enumerate(groups)}
    cs, ce = tl.start_s[comm], tl.end_s[comm]
    gi = np.array([gidx[str(g)] for g in tl.group[comm]], dtype=np.int64)
    keep = ce > cs
    cs, ce, gi = cs[keep], ce[keep], gi[keep]
    us, ue = compute_union
    times = np.concatenate([cs, ce, us, ue])
    # event deltas: comm counts per group, compute counter
    kind = np.concatenate(
        [np.zeros(cs.size), np.zeros(ce.size), np.ones(us.size), np.ones(ue.size)]
    ).astype(np.int8)
    delta = np.concatenate(
        [np.ones(cs.size), -np.ones(ce.size), np.ones(us.size), -np.ones(ue.size)]
    )
    grp = np.concatenate([gi, gi, np.full(us.size + ue.size, -1)])
    order = np.lexsort((delta, times))
    active = np.zeros(len(groups), dtype=np.int64)
    computing = 0
    acc = np.zeros(len(groups))
    prev = None
    for t, k, d, g in zip(times[order], kind[order], delta[order], grp[order], strict=True):
        if prev is not None and t > prev and computing == 0:
            on = active > 0
            n_on = int(on.sum())
            if n_on:
                acc[on] += (t - prev) / n_on
        if k == 1:
            computing += int(d)
        else:
            active[g] += int(d)
        prev = t
    return {g: float(acc[i]) for g, i in gidx.items()}
