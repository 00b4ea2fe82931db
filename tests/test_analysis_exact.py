"""The report's interval arithmetic (simulator/outputs/analysis.py) against the plain
loops it replaced: coded labels, the vectorised sweep and overlap, and host waits found
once per frame must give the same floats bit for bit (same sums in the same order), on
random timelines with coinciding edges, several streams and groups, host waits and
skipped periods."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import numpy as np
import pytest

from simulator.cost.terms import INTERFERENCE, LAUNCH_GAPS
from simulator.engine.compiled import PS_PER_S
from simulator.engine.ranks import Warp
from simulator.engine.timeline import RankTimeline
from simulator.outputs import analysis
from simulator.outputs.analysis import RankBreakdown, union

# ------------------------------------------------------------------ the loops replaced


def _ref_intersection(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
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


def _ref_exposed(tl: RankTimeline, comm: np.ndarray, cu: tuple, groups: list[str]) -> dict:
    out = dict.fromkeys(groups, 0.0)
    if not groups:
        return out
    gidx = {g: i for i, g in enumerate(groups)}
    cs, ce = tl.start_s[comm], tl.end_s[comm]
    gi = np.array([gidx[str(g)] for g in tl.group[comm]], dtype=np.int64)
    keep = ce > cs
    cs, ce, gi = cs[keep], ce[keep], gi[keep]
    us, ue = cu
    times = np.concatenate([cs, ce, us, ue])
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


def _ref_waits(tl: RankTimeline) -> tuple | None:
    if tl.issue_s is None or len(tl) == 0:
        return None
    busy_mask = tl.mask_compute() | tl.mask_comm()
    ws, we = [], []
    for stream in {str(x) for x in tl.stream[busy_mask]}:
        idx = np.flatnonzero(busy_mask & (tl.stream == stream))
        idx = idx[np.argsort(tl.start_s[idx], kind="stable")]
        start, end, issue = tl.start_s[idx], tl.end_s[idx], tl.issue_s[idx]
        prev_end = np.concatenate([[start[0]], end[:-1]])
        tol = analysis.HOST_TOLERANCE_S + 1e-9 * start
        waited = (np.abs(start - issue) <= tol) & (start > prev_end)
        ws.append(prev_end[waited])
        we.append(start[waited])
    if not ws:
        return None
    wait = union(np.concatenate(ws), np.concatenate(we))
    return wait, union(tl.start_s[busy_mask], tl.end_s[busy_mask])


def _ref_host(got: tuple | None) -> float:
    if got is None:
        return 0.0
    wait, busy = got
    return float((wait[1] - wait[0]).sum()) - _ref_intersection(wait, busy)


def _ref_breakdown(tl: RankTimeline) -> RankBreakdown:
    comp, comm = tl.mask_compute(), tl.mask_comm()
    cu = union(tl.start_s[comp], tl.end_s[comp])
    mu = union(tl.start_s[comm], tl.end_s[comm])
    compute_s = float((cu[1] - cu[0]).sum())
    comm_s = float((mu[1] - mu[0]).sum())
    overlapped = _ref_intersection(cu, mu)
    span = float(tl.end_s.max(initial=0.0) - tl.start_s.min(initial=0.0)) if len(tl) else 0.0
    groups = sorted({str(g) for g in tl.group[comm]})
    by_group = {
        g: analysis.length(tl.start_s[comm & (tl.group == g)], tl.end_s[comm & (tl.group == g)])
        for g in groups
    }
    own = tl.end_s - tl.start_s
    extra = {}
    for key, col in ((LAUNCH_GAPS, tl.launch_s), (INTERFERENCE, tl.interference_s)):
        if col is not None:
            part = np.where(comp, col, 0.0)
            own = own - part
            extra[key] = float(part.sum())
    kinds = sorted({str(k) for k in tl.kind[comp]})
    by_kind = {k: float(own[comp & (tl.kind == k)].sum()) for k in kinds}
    by_kind.update(extra)
    return RankBreakdown(
        span_s=span,
        compute_s=compute_s,
        comm_s=comm_s,
        exposed_comm_s=comm_s - overlapped,
        overlapped_comm_s=overlapped,
        exposed_by_group_s=_ref_exposed(tl, comm, cu, groups),
        comm_by_group_s=by_group,
        compute_by_kind_s=by_kind,
        host_bound_s=_ref_host(_ref_waits(tl)),
    )


def _ref_skipped(tl: RankTimeline, warps: list[Warp]) -> RankBreakdown:
    if not warps:
        return _ref_breakdown(tl)
    issue0 = tl.issue_s if tl.issue_s is not None else np.zeros(len(tl))
    frames = [(tl.start_s.copy(), tl.end_s.copy(), issue0.copy())]
    index = np.arange(len(tl))
    for w in reversed(warps):
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

    def times(st: np.ndarray, en: np.ndarray, iss: np.ndarray) -> RankTimeline:
        return replace(tl, start_s=st, end_s=en, issue_s=iss if keep_issue else None)

    bd = _ref_breakdown(times(*frames[0]))
    for w, (st, en, iss) in zip(warps, frames[:-1], strict=True):
        t1, t2 = w.t1 / PS_PER_S, w.t2 / PS_PER_S
        cs, ce = np.clip(st, t1, t2), np.clip(en, t1, t2)
        keep = (en > t1) & (st < t2)
        dur = en - st
        share = np.divide(ce - cs, dur, out=np.ones_like(dur), where=dur > 0)
        clipped = replace(
            times(cs, ce, iss),
            launch_s=None if tl.launch_s is None else tl.launch_s * share,
            interference_s=None if tl.interference_s is None else tl.interference_s * share,
        )
        got = _ref_waits(times(st, en, iss))
        if got is not None:
            got = tuple((np.clip(x[0], t1, t2), np.clip(x[1], t1, t2)) for x in got)
        part = replace(_ref_breakdown(clipped.select(keep)), span_s=t2 - t1)
        part = replace(part, host_bound_s=_ref_host(got))
        bd = analysis._add(bd, part, w.periods)
    return replace(bd, span_s=float(tl.end_s.max(initial=0.0) - tl.start_s.min(initial=0.0)))


# ------------------------------------------------------------------------- timelines

KINDS = ["gemm", "attention", "elementwise", "all-reduce", "all-gather", "send-recv", "wait"]
GROUPS = ["tp", "dp", "pp", "x"]


def _timeline(seed: int, n: int, sim: bool) -> RankTimeline:
    """Records on a coarse picosecond grid (many coinciding edges), issued in order."""
    rng = np.random.default_rng(seed)
    kind = rng.choice(KINDS, n).astype(object)
    comm = np.isin(kind, list(analysis.COMM_KINDS))
    group = np.where(comm, rng.choice(GROUPS, n), "").astype(object)
    stream = rng.choice(["compute", "comm", "side"], n).astype(object)
    start_ps = np.sort(rng.integers(0, 40 * n, n)) * 1000
    dur_ps = rng.integers(0, 60, n) * 1000
    start = start_ps / PS_PER_S
    end = (start_ps + dur_ps) / PS_PER_S
    issue = np.where(rng.random(n) < 0.4, start, start - rng.integers(1, 9, n) * 1e-9)
    dur = end - start
    return RankTimeline(
        rank=0,
        stream=stream,
        name=np.array([f"op{i}" for i in range(n)], dtype=object),
        kind=kind,
        group=group,
        start_s=start,
        end_s=end,
        bytes=np.zeros(n),
        flops=np.zeros(n),
        phase=np.full(n, "fwd", dtype=object),
        launch_s=dur * 0.1 if sim else None,
        interference_s=dur * 0.05 if sim else None,
        issue_s=issue if sim else None,
    )


def _same(a: RankBreakdown, b: RankBreakdown) -> None:
    da, db = dataclasses.asdict(a), dataclasses.asdict(b)
    assert da.keys() == db.keys()
    for key, x in da.items():
        y = db[key]
        if isinstance(x, dict):
            assert sorted(x) == sorted(y), key
            for k in x:
                assert x[k] == y[k] and type(x[k]) is type(y[k]), (key, k, x[k], y[k])
        else:
            assert x == y and type(x) is type(y), (key, x, y)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("sim", [True, False])
def test_breakdown_matches_loops(seed: int, sim: bool) -> None:
    tl = _timeline(seed, 50 + 37 * seed, sim)
    _same(analysis.breakdown(tl), _ref_breakdown(tl))
    assert analysis.host_bound(tl) == _ref_host(_ref_waits(tl))
    assert analysis.compute_by_kind(tl) == _ref_breakdown(tl).compute_by_kind_s


@pytest.mark.parametrize("seed", range(12))
def test_skipped_periods_match_loops(seed: int) -> None:
    n = 120 + 11 * seed
    tl = _timeline(100 + seed, n, sim=seed % 3 != 0)
    ps = (tl.start_s * PS_PER_S).round().astype(np.int64)
    rng = np.random.default_rng(seed)
    warps = []
    lo = 5
    for _ in range(1 + seed % 3):  # one to three skips, later ones after earlier ones
        lo1 = int(rng.integers(lo, lo + n // 8))
        lo2 = int(rng.integers(lo1 + 1, lo1 + n // 6))
        if lo2 >= n - 2:
            break
        t1, t2 = int(ps[lo1]), int(ps[lo2])
        warps.append(Warp(lo1, lo2, int(rng.integers(1, 9)), max(t2 - t1, 1), t1, t2, 3000))
        lo = lo2 + 1
    _same(analysis.with_skipped_periods(tl, warps), _ref_skipped(tl, warps))


def test_intersection_of_clipped_unions() -> None:
    """Clipping makes touching and empty intervals: the pairs are still the merge's."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        a = union(*_pairs(rng))
        b = union(*_pairs(rng))
        lo, hi = sorted(rng.integers(0, 300, 2) / 7)
        for x, y in ((a, b), (analysis._clip(a, lo, hi), analysis._clip(b, lo, hi))):
            got, ref = analysis.intersection_length(x, y), _ref_intersection(x, y)
            assert got == ref and type(got) is type(ref)


def _pairs(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n = int(rng.integers(0, 30))
    s = rng.integers(0, 300, n) / 7
    return s, s + rng.integers(0, 20, n) / 7
