"""Proving a run periodic, so that the copies in the middle of repeated regions are skipped.

Why: a 1F1B pipeline never drains between its steady pairs, and ranks of two GCD classes
run the same microbatches offset in time, so no instant exists where every rank sits at a
quiet segment boundary. What repeats is the whole state, shifted.

The argument. The engine is deterministic and time-invariant: times are integer
picoseconds, and everything a run does next depends only on its state — per rank, which
ops are done, in flight or waiting and when the done ones ended; the rendezvous waiting
for participants; the network's scheduled events, active transfers (bytes left, rates)
and clock. Take a *cut* after all events of instant T1 and another after all events of
T2 = T1 + D. If the state at T2 equals the state at T1 with every time shifted by D and
every rank's op indices by the length of p copies of its region (the mapping `Cut.canon`
encodes), and every rank reads only region copies in between, then the run from T2 on
is the run from T1 on shifted — period after period, for as long as every rank is still
inside its region. The engine therefore skips n periods at once: it shifts the state at
T2 by n·D (`Engine._warp`), counts the skipped copies and continues. The skipped
records are copies of those of [T1, T2) (`Warp`), so iteration time, per-group and
per-kind times and link bytes come out as if every copy had been simulated.

What is compared, relative to the cut's instant and to each rank's window [lo, hi) (lo =
its first op not done or still running; hi = past the last op it has read): the start
and end of every op in the window; each stream's next op, in-flight op and free time
(only when later than the cut: earlier it cannot delay anything); ops waiting for
others; collective sync starts; partial rendezvous; the network's events in the order
simpy will run them, its active coflows and clock. Ops before lo have ended by the cut,
so nothing later can wait on them beyond the cut.

The host: an op cannot start before the CPU has issued it, and the CPU never waits, so
its issue times are not shifted by D but by the issue time of the skipped copies. The
shift is exact when that time is at most D and no op of the compared windows started
exactly at its issue time (unless they are equal): then the CPU is never the binding
constraint of a skipped copy (`host_slack_ok`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from simulator.engine.network import Activation, queued_events
from simulator.engine.ranks import Pending, RankState
from simulator.engine.unroll import RegionRun

if TYPE_CHECKING:
    import simpy

    from simulator.engine.network import AlphaBetaNetwork, ContentionNetwork, NetworkStats


class EngineState(Protocol):
    """What the prover reads of the engine (simulator/engine/core.py `Engine`)."""

    @property
    def env(self) -> simpy.Environment: ...
    @property
    def net(self) -> AlphaBetaNetwork | ContentionNetwork: ...
    @property
    def pending(self) -> dict[tuple[object, ...], Pending]: ...
    @property
    def ranks(self) -> list[RankState]: ...
    @property
    def stats(self) -> NetworkStats: ...


NONE = np.iinfo(np.int64).min  # "not yet" in a relative time array


@dataclass(eq=False)
class RankWindow:
    """One rank at a cut: its window of live ops and the region holding it."""

    lo: int
    hi: int
    run: RegionRun | None
    idle: bool  # nothing left to run and nothing running


@dataclass(eq=False)
class Cut:
    """The engine's state after every event of instant `time`, in canonical form."""

    time: int
    windows: list[RankWindow]
    canon: Hashable
    link_bytes: dict[tuple[int, int], float]  # NetworkStats.snapshot()


def _next_ops(r: RankState) -> tuple[int, int]:
    """(lo, hi) of the streams' next ops alone (lo -1: every stream is through)."""
    lo = hi = -1
    for s, ops in enumerate(r.prog.stream_ops):
        p = r.pos[s]
        if p < len(ops):
            i = ops[p]
            lo = i if lo < 0 else min(lo, i)
            hi = max(hi, i + 1)
        elif ops:
            hi = max(hi, ops[-1] + 1)
    return lo, hi


def _outside_copies(r: RankState) -> bool:
    """Whether rank r's window is surely not inside one region's unrolled copies, told
    from its streams' next ops (the window holds them: `_window` only widens it)."""
    lo, hi = _next_ops(r)
    if lo < 0:
        return False  # maybe idle: the whole window decides
    run = r.prog.run_at(lo)
    return run is None or not run.contains(lo, hi)


def _window(r: RankState, now: int) -> tuple[int, int, bool]:
    """(lo, hi, idle) of rank r at instant `now`."""
    prog = r.prog
    lo, hi = _next_ops(r)
    ends = np.frombuffer(r.end, dtype=np.int64)
    open_ = np.flatnonzero(ends > now)
    if open_.size:
        first = int(open_[0])
        lo = first if lo < 0 else min(lo, first)
        hi = max(hi, int(open_[-1]) + 1)
    idle = lo < 0 and prog.complete
    if lo < 0:
        lo = hi = max(hi, 0)
    return lo, hi, idle


def _relative(a: np.ndarray, now: int) -> bytes:
    return np.where(a >= 0, a - now, NONE).tobytes()


def _rank_canon(r: RankState, lo: int, hi: int, now: int) -> tuple[object, ...]:
    st = np.frombuffer(r.start, dtype=np.int64)[lo:hi]
    en = np.frombuffer(r.end, dtype=np.int64)[lo:hi]
    prog = r.prog
    nxt = tuple(
        ops[r.pos[s]] - lo if r.pos[s] < len(ops) else -1 for s, ops in enumerate(prog.stream_ops)
    )
    inflight = tuple(i - lo if i >= 0 else -1 for i in r.inflight)
    free = tuple(max(f - now, 0) for f in r.free)
    waiters = tuple(sorted((k - lo, tuple(v)) for k, v in r.waiters.items()))
    sync = tuple((i - lo, v - now) for i, v in sync_in(r.sync, lo, hi))
    return (_relative(st, now), _relative(en, now), nxt, inflight, free, waiters, sync)


def sync_in(sync: dict[int, int], lo: int, hi: int) -> list[tuple[int, int]]:
    """The (op, sync start) entries of ops [lo, hi), in op order. Why not a scan of the
    dict: it holds every collective the rank ran since the run began, and a run whose
    period is never proved (a straggler) cuts thousands of times, so scanning it made
    the prover quadratic (88% of 678 CPU-s for one straggler on 256 GPUs); the window
    holds a copy's ops or so."""
    if hi - lo < len(sync):
        get = sync.get
        return [(i, v) for i in range(lo, hi) if (v := get(i)) is not None]
    return sorted((i, v) for i, v in sync.items() if lo <= i < hi)


def cut_points(length: int, per_copy: int) -> list[int]:
    """Body offsets of a region's cut points: `per_copy` evenly spaced ones (fewer in a
    shorter body), the first at the copy's start."""
    return sorted({length * j // per_copy for j in range(per_copy)})


def take_cut(
    engine: EngineState,
    now: int,
    hint: list[int] | None = None,
    ranks: list[RankState] | None = None,
    part: int = -1,
) -> Cut | None:
    """The engine's state now, relative to `now` and to each rank's window; None when a
    rank that is not idle has live ops outside its region's unrolled copies (such a cut
    matches no other: `periods_match`), which is told before any state is read. `hint`
    holds the index of the rank found outside last time, asked first (the ranks still
    in their warm-up or already in their cool-down stay there for many cuts).

    `ranks`: one prover component's ranks (simulator/engine/prover.py, its number
    `part`) instead of the whole engine: the cut then holds their state, their
    rendezvous, the scheduled events of their activations and the network components of
    their transfers, and is None while one of those also holds another component's
    transfers (their rates are shared: no period of one alone exists)."""
    whole = ranks is None
    ranks = engine.ranks if ranks is None else ranks
    if hint is not None and hint[0] < len(ranks) and _outside_copies(ranks[hint[0]]):
        return None
    for k, r in enumerate(ranks):
        if _outside_copies(r):
            if hint is not None:
                hint[0] = k
            return None
    windows: list[RankWindow] = []
    for r in ranks:
        lo, hi, idle = _window(r, now)
        run = None if idle else r.prog.run_at(lo)
        if not idle and (run is None or not run.contains(lo, hi)):
            return None
        windows.append(RankWindow(lo, hi, run, idle))
    index = {id(r): k for k, r in enumerate(ranks)}
    canons = [_rank_canon(r, w.lo, w.hi, now) for r, w in zip(ranks, windows, strict=True)]

    def locate(p: tuple[RankState, int, int]) -> tuple[int, int, int]:
        r, i, s = p
        k = index[id(r)]
        return (k, i - windows[k].lo, s)

    def mine(a: Activation) -> bool:
        return whole or id(a.owner.parts[0][0]) in index  # type: ignore[attr-defined]

    rendezvous = []
    for p in engine.pending.values():
        inside = [id(x[0]) in index for x in p.parts]
        if all(inside):
            rendezvous.append((p.count, max(p.ready - now, 0), tuple(locate(x) for x in p.parts)))
        elif any(inside):
            return None  # a rendezvous with ranks the cut does not hold
    pending = tuple(sorted(rendezvous))
    acts: dict[int, tuple[object, ...]] = {}

    def act(a: Activation) -> tuple[object, ...]:
        got = acts.get(id(a))
        if got is None:
            parts = tuple(locate(x) for x in a.owner.parts)  # type: ignore[attr-defined]
            got = (a.kind, a.nbytes, a.key, a.root, a.algorithm, a.start_ps - now, parts)
            acts[id(a)] = got
        return got

    net = engine.net
    own = None if whole else net.part_state(part, now)
    if not whole and own is None:
        return None  # its transfers share a network component with another's
    events: list[tuple[int, int, object]] = []
    for t, prio, tag in queued_events(engine.env):
        if tag is None:
            continue
        if tag[0] == "check":
            if not net.live_check(tag[1], tag[2]):
                continue
            if whole:
                events.append((t - now, prio, ("check", net.check_position(tag[1]))))
            elif net.part_of(tag[1]) == part:
                events.append((t - now, prio, ("check", net.part_position(tag[1]))))
            continue
        if not whole and not (len(tag) > 1 and isinstance(tag[1], Activation) and mine(tag[1])):
            continue
        events.append(
            (t - now, prio, tuple(act(x) if isinstance(x, Activation) else x for x in tag))
        )
    state = _canon_state(net.state(now) if whole else own, act)  # type: ignore[arg-type]
    canon = (tuple(canons), pending, tuple(events), state, tuple(w.idle for w in windows))
    return Cut(now, windows, canon, engine.stats.snapshot())


def _canon_state(state: tuple[object, ...], act: Callable[[Activation], object]) -> object:
    """Activations inside a network state replaced by what they stand for."""
    if isinstance(state, Activation):
        return act(state)
    if isinstance(state, tuple):
        return tuple(_canon_state(x, act) for x in state)  # type: ignore[arg-type]
    return state


def periods_match(a: Cut, b: Cut, copies: int) -> bool:
    """Whether cut b is cut a shifted by `copies` copies on every rank (b later)."""
    if b.time <= a.time or a.canon != b.canon:
        return False
    for wa, wb in zip(a.windows, b.windows, strict=True):
        if wa.idle and wb.idle:
            continue
        if wa.run is None or wa.run is not wb.run or wa.idle or wb.idle:
            return False
        shift = copies * wa.run.length
        if wb.lo - wa.lo != shift or wb.hi - wa.hi != shift:
            return False
        if not wa.run.contains(wa.lo, wa.hi) or not wb.run.contains(wb.lo, wb.hi):
            return False
    return True


def host_slack_ok(ranks: list[RankState], a: Cut, b: Cut, copies: int) -> bool:
    """The host never binds a skipped copy of `ranks` (see the module docstring)."""
    period = b.time - a.time
    for r, wa, wb in zip(ranks, a.windows, b.windows, strict=True):
        if wa.run is None:
            continue
        host = copies * wa.run.issue_ps
        if host > period:
            return False
        if host == period:
            continue
        st = np.frombuffer(r.start, dtype=np.int64)[wa.lo : wb.hi]
        issue = np.asarray(r.prog.issue[wa.lo : wb.hi], dtype=np.int64) + r.ish
        done = st >= 0
        if (st[done] <= issue[done]).any():
            return False
    return True
