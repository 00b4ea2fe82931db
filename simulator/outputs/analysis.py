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
from simulator.engine.timeline import COMM_KINDS, COMPUTE_KINDS, RankTimeline

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
    """Length of the intersection of two disjoint sorted interval sets (as `union` gives,
    or such sets clipped to a window: their intervals may then touch or be empty).

    The sum of the positive overlaps, taken in the order a two-pointer merge meets them
    (by a's index, then b's: the merge moves both indices forward only, and meets every
    overlapping pair) and added one after another from 0.0, so the float result is the
    merge loop's bit for bit; numpy finds the pairs instead of a Python loop."""
    (sa, ea), (sb, eb) = a, b
    if sa.size == 0 or sb.size == 0:
        return 0.0
    first = np.searchsorted(eb, sa, side="right")  # first b ending after a starts
    stop = np.searchsorted(sb, ea, side="left")  # first b starting at or after a's end
    count = np.maximum(stop - first, 0)
    total = int(count.sum())
    if total == 0:
        return 0.0
    i = np.repeat(np.arange(sa.size), count)
    j = np.arange(total) - np.repeat(np.cumsum(count) - count, count) + np.repeat(first, count)
    gain = np.minimum(ea[i], eb[j]) - np.maximum(sa[i], sb[j])
    gain = gain[gain > 0]
    # add.accumulate adds in order (a pairwise `sum` would round differently); a numpy
    # float like the loop's sum
    return np.add.accumulate(gain)[-1] if gain.size else 0.0


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


@dataclass(frozen=True)
class _Labels:
    """A rank's string columns as small integer codes, found once per rank: the breakdown
    masks and groups records by kind, group and stream many times (per skipped period,
    per clip), and comparing object arrays of strings each time cost more than the
    arithmetic. Codes index `kinds`/`groups`/`streams`, the distinct values' `str`s."""

    comp: np.ndarray
    comm: np.ndarray
    kind: np.ndarray
    group: np.ndarray
    stream: np.ndarray
    kinds: tuple[str, ...]
    groups: tuple[str, ...]
    streams: tuple[str, ...]

    @classmethod
    def of(cls, tl: RankTimeline) -> _Labels:
        kind, kinds = _codes(tl.kind)
        group, groups = _codes(tl.group)
        stream, streams = _codes(tl.stream)
        # `mask_compute`/`mask_comm` decided per distinct value (np.isin compares with ==)
        is_comp = np.array([k in COMPUTE_KINDS for k in kinds] + [False])
        is_comm = np.array([k in COMM_KINDS for k in kinds] + [False])
        return cls(
            comp=is_comp[kind],
            comm=is_comm[kind],
            kind=kind,
            group=group,
            stream=stream,
            kinds=kinds,
            groups=groups,
            streams=streams,
        )

    def select(self, mask: np.ndarray) -> _Labels:
        return replace(
            self,
            comp=self.comp[mask],
            comm=self.comm[mask],
            kind=self.kind[mask],
            group=self.group[mask],
            stream=self.stream[mask],
        )


def _codes(col: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
    """Codes of `col`'s values by their `str` (equal strings share a code, as `col == s`
    finds them), and the distinct strings."""
    values = col.tolist()
    names = sorted({str(v) for v in set(values)})
    index = {n: i for i, n in enumerate(names)}
    by_value = {v: index[str(v)] for v in set(values)}
    codes = np.array(list(map(by_value.__getitem__, values)), dtype=np.int64).reshape(-1)
    return codes, tuple(names)


def _present(codes: np.ndarray, names: tuple[str, ...]) -> list[tuple[str, int]]:
    """(name, code) of the codes that occur, by name (codes follow the sorted names)."""
    seen = np.flatnonzero(np.bincount(codes, minlength=len(names)))
    return [(names[int(c)], int(c)) for c in seen]


def breakdown(tl: RankTimeline) -> RankBreakdown:
    """Busy, overlapped and exposed time of one rank."""
    return _breakdown(tl, _Labels.of(tl))


def _breakdown(tl: RankTimeline, lab: _Labels, host_s: float | None = None) -> RankBreakdown:
    """`breakdown` with the rank's labels given (and its host-bound time, where known)."""
    comp, comm = lab.comp, lab.comm
    cu = union(tl.start_s[comp], tl.end_s[comp])
    mu = union(tl.start_s[comm], tl.end_s[comm])
    compute_s = float((cu[1] - cu[0]).sum())
    comm_s = float((mu[1] - mu[0]).sum())
    overlapped = intersection_length(cu, mu)
    span = float(tl.end_s.max(initial=0.0) - tl.start_s.min(initial=0.0)) if len(tl) else 0.0
    groups = _present(lab.group[comm], lab.groups)
    comm_by_group = {}
    for g, c in groups:
        m = comm & (lab.group == c)
        comm_by_group[g] = length(tl.start_s[m], tl.end_s[m])
    if host_s is None:
        host_s = _host_bound(_host_waits(tl, lab))
    return RankBreakdown(
        span_s=span,
        compute_s=compute_s,
        comm_s=comm_s,
        exposed_comm_s=comm_s - overlapped,
        overlapped_comm_s=overlapped,
        exposed_by_group_s=_exposed_by_group(tl, lab, cu, groups),
        comm_by_group_s=comm_by_group,
        compute_by_kind_s=_compute_by_kind(tl, lab),
        host_bound_s=host_s,
    )


def compute_by_kind(tl: RankTimeline, comp: np.ndarray | None = None) -> dict[str, float]:
    """Seconds of compute records per kind (kernel time only), plus `launch_gaps` and
    `interference` rows where the timeline carries them (see module doc)."""
    lab = _Labels.of(tl)
    return _compute_by_kind(tl, lab if comp is None else replace(lab, comp=comp))


def _compute_by_kind(tl: RankTimeline, lab: _Labels) -> dict[str, float]:
    comp = lab.comp
    own = tl.end_s - tl.start_s
    extra: dict[str, float] = {}
    for key, col in ((LAUNCH_GAPS, tl.launch_s), (INTERFERENCE, tl.interference_s)):
        if col is not None:
            part = np.where(comp, col, 0.0)
            own = own - part
            extra[key] = float(part.sum())
    out = {
        k: float(own[comp & (lab.kind == c)].sum()) for k, c in _present(lab.kind[comp], lab.kinds)
    }
    out.update(extra)
    return out


HOST_TOLERANCE_S = 1e-12


def host_bound(tl: RankTimeline) -> float:
    """Seconds the rank had nothing in flight because the host had not issued the next op:
    the idle time before an op (kernel or collective) that started the moment the host
    issued it, outside any compute or communication interval (a launch-bound step)."""
    return _host_bound(_host_waits(tl, _Labels.of(tl)))


Intervals = tuple[np.ndarray, np.ndarray]


def _host_bound(got: tuple[Intervals, Intervals] | None) -> float:
    if got is None:
        return 0.0
    wait, busy = got
    return float((wait[1] - wait[0]).sum()) - intersection_length(wait, busy)


def _host_waits(tl: RankTimeline, lab: _Labels) -> tuple[Intervals, Intervals] | None:
    """(host waits, busy intervals), both disjoint and sorted; None without issue times."""
    if tl.issue_s is None or len(tl) == 0:
        return None
    busy_mask = lab.comp | lab.comm
    waits_s: list[np.ndarray] = []
    waits_e: list[np.ndarray] = []
    # streams in any order: `union` sorts the waits, and its values do not depend on it
    for _, code in _present(lab.stream[busy_mask], lab.streams):
        idx = np.flatnonzero(busy_mask & (lab.stream == code))
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
    they are found on the whole timeline (found once per frame: the first period's frame
    is the unskipped one)."""
    lab = _Labels.of(tl)
    if not warps:
        return _breakdown(tl, lab)
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
    whole = _with_times(tl, *frames[0], keep_issue)
    waits = _host_waits(whole, lab)
    bd = _breakdown(whole, lab, _host_bound(waits))
    for k, (w, (st, en, iss)) in enumerate(zip(warps, frames[:-1], strict=True)):
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
        found = waits if k == 0 else _host_waits(_with_times(tl, st, en, iss, keep_issue), lab)
        host = _host_bound(
            None if found is None else (_clip(found[0], t1, t2), _clip(found[1], t1, t2))
        )
        part = _breakdown(clipped.select(keep), lab.select(keep), host)
        part = replace(part, span_s=t2 - t1)
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
    lab: _Labels,
    compute_union: tuple[np.ndarray, np.ndarray],
    groups: list[tuple[str, int]],
) -> dict[str, float]:
    """Sweep line over communication and compute edges; exposed instants are shared
    equally among the groups in flight.

    The sweep's state after each edge (groups in flight, compute depth) is a running
    integer count, so numpy finds it for every edge at once; each group's share is then
    added up gap after gap in time order from 0.0 (`add.accumulate`), the order of a
    loop over the edges, so the sums are that loop's bit for bit."""
    out = {g: 0.0 for g, _ in groups}
    if not groups:
        return out
    comm = lab.comm
    column = np.full(len(lab.groups), -1, dtype=np.int64)
    column[[c for _, c in groups]] = np.arange(len(groups))
    cs, ce = tl.start_s[comm], tl.end_s[comm]
    gi = column[lab.group[comm]]
    keep = ce > cs
    cs, ce, gi = cs[keep], ce[keep], gi[keep]
    us, ue = compute_union
    times = np.concatenate([cs, ce, us, ue])
    delta = np.concatenate(
        [np.ones(cs.size), -np.ones(ce.size), np.ones(us.size), -np.ones(ue.size)]
    )
    grp = np.concatenate([gi, gi, np.full(us.size + ue.size, -1)])
    order = np.lexsort((delta, times))  # at equal times, ends before starts
    t, d, g = times[order], delta[order].astype(np.int64), grp[order]
    # counts after each edge: compute depth, and edges of each group in flight
    computing = np.cumsum(np.where(g < 0, d, 0))
    steps = np.zeros((t.size, len(groups)), dtype=np.int64)
    on_edge = np.flatnonzero(g >= 0)
    steps[on_edge, g[on_edge]] = d[on_edge]
    on = np.cumsum(steps, axis=0) > 0
    n_on = on.sum(axis=1)
    # the gap before edge i is seen with the state after edge i - 1
    gap = (t[1:] > t[:-1]) & (computing[:-1] == 0) & (n_on[:-1] > 0)
    idx = np.flatnonzero(gap)
    share = (t[idx + 1] - t[idx]) / n_on[idx]
    for (name, _), col in zip(groups, range(len(groups)), strict=True):
        mine = share[on[idx, col]]
        if mine.size:
            out[name] = float(np.add.accumulate(mine)[-1])
    return out
