"""The op lists of the engine's hot loop, unrolled lazily from a compiled program.

Why: a program's repeated regions (simulator/engine/regions.py) stand for many copies (a
512-microbatch pipeline stage holds its steady 1F1B pair once). The engine must not
build every copy: it unrolls one more copy when a rank's stream reaches the end of what
is unrolled, and when the periodic prover skips copies (simulator/engine/periodic.py)
they are never built. Ranks that run one program share its unrolled lists.

Indices: the engine works in *unrolled* indices (the order ops were unrolled). Copy k of
a region occupies [copy_starts[k], copy_starts[k] + length); ordinals of collectives and
host issue times count unrolled ops, and each rank adds what its skipped copies would
have added (`RankState.ish`, `RankState.oshift` in simulator/engine/ranks.py).
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from simulator.engine.compiled import COLL, CommInfo, CompiledProgram
from simulator.engine.regions import CONST, INSIDE, PREV, Region


class RankStreams(Protocol):
    """What unrolling reads of a rank (simulator/engine/ranks.py `RankState`): its op
    start and end times, to see whether a stream's next op is done."""

    @property
    def start(self) -> array: ...
    @property
    def end(self) -> array: ...


OrdinalKey = tuple[str, int, int]
"""(group, op kind code, peer): what one ordinal counter counts (collectives: peer -1)."""


def ordinal_key(info: CommInfo, kind: int) -> OrdinalKey:
    """The counter an op's ordinal comes from."""
    return (info.group, COLL, -1) if kind == COLL else (info.group, kind, info.peer)


@dataclass(frozen=True, eq=False)
class _Body:
    """A region's compiled body, as lists to extend the unrolled program with."""

    kind: list[int]
    stream: list[int]
    dur: list[int]
    issue: list[int]  # host issue time from the copy's start, cumulative
    comm: list[CommInfo | None]
    comm_at: list[int]
    keys: dict[int, OrdinalKey]
    stream_offsets: dict[int, list[int]]


@dataclass(eq=False)
class RegionRun:
    """A region as unrolled so far: where its copies are and how many were skipped."""

    region: Region
    index: int  # position of the region in the program
    issue_ps: int  # host issue time of one copy
    counts: dict[OrdinalKey, int]  # ordinals one copy advances, per counter
    copy_starts: list[int] = field(default_factory=list)
    skipped: int = 0
    done: bool = False  # every copy unrolled or skipped

    @property
    def length(self) -> int:
        return self.region.length

    @property
    def first(self) -> int:
        """Unrolled index of the first copy (-1 before it is unrolled)."""
        return self.copy_starts[0] if self.copy_starts else -1

    @property
    def unrolled_stop(self) -> int:
        """Unrolled index after the last unrolled copy."""
        return self.copy_starts[-1] + self.length if self.copy_starts else -1

    @property
    def copies_left(self) -> int:
        """Copies neither unrolled nor skipped."""
        return self.region.copies - self.skipped - len(self.copy_starts)

    def contains(self, lo: int, hi: int) -> bool:
        """Whether unrolled indices [lo, hi) lie inside the unrolled copies."""
        return bool(self.copy_starts) and self.first <= lo and hi <= self.unrolled_stop


class Unrolled:
    """What the hot loop reads: kind, stream, deps, duration, issue time and
    communication info per unrolled op, and each stream's op list."""

    def __init__(self, cp: CompiledProgram, regions: list[Region]):
        self.cp = cp
        self.program = cp.program
        self.stream_names = cp.stream_names
        self.runs: list[RegionRun] = []
        self.users: list[Any] = []
        self.parked: dict[int, list[Any]] = {}
        self.work: deque[tuple[Any, int]] = (
            deque()
        )  # the engine's (RankState),: woken streams go here
        if not regions:  # nothing repeats: the compiled text is the unrolled program
            self.kind, self.stream, self.deps = cp.kind, cp.stream, cp.deps
            self.dur, self.issue, self.comm = cp.dur_ps, cp.issue_ps, cp.comm
            self.stream_ops = cp.stream_ops
            self.src: list[int] | None = None
            self.text_index: list[int] | None = None
            self.complete = True
            return
        self.kind, self.stream, self.deps = [], [], []
        self.dur, self.issue, self.comm = [], [], []
        self.stream_ops = [[] for _ in cp.stream_names]
        self.src = []
        self.text_index = []
        self.complete = False
        self._bodies: dict[int, _Body] = {}
        self._later: dict[int, tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]] = {}
        self._tmap = [-1] * cp.num_ops
        self._cpu = 0
        self._ordinals: dict[OrdinalKey, int] = {}
        self._pieces: list[tuple[int, int] | RegionRun] = []
        pos = 0
        for i, reg in enumerate(regions):
            if reg.start > pos:
                self._pieces.append((pos, reg.start))
            run = RegionRun(reg, i, *self._copy_constants(reg))
            self.runs.append(run)
            self._pieces.append(run)
            pos = reg.stop
        if pos < cp.num_ops:
            self._pieces.append((pos, cp.num_ops))
        self._piece = 0
        # the plain ops before the first region and its first copy
        while not self.complete and not (self.runs and self.runs[0].copy_starts):
            self.grow()

    def _copy_constants(self, reg: Region) -> tuple[int, dict[OrdinalKey, int]]:
        cp = self.cp
        before = cp.issue_ps[reg.start - 1] if reg.start > 0 else 0
        issue = cp.issue_ps[reg.start + reg.length - 1] - before
        counts: dict[OrdinalKey, int] = {}
        for t in range(reg.start, reg.start + reg.length):
            info = cp.comm[t]
            if info is not None:
                key = ordinal_key(info, cp.kind[t])
                counts[key] = counts.get(key, 0) + 1
        return issue, counts

    @property
    def num_ops(self) -> int:
        return len(self.kind)

    # --------------------------------------------------------------- growing
    def grow(self) -> set[int]:
        """Unroll the next piece (plain ops, or one copy of the current region); return
        the streams that received ops."""
        if self.complete:
            return set()
        piece = self._pieces[self._piece]
        if isinstance(piece, RegionRun):
            if piece.copies_left > 0:
                return self._add_copy(piece)
            self._finish_region(piece)
            self._piece += 1
        else:
            self._piece += 1
            return self._add_plain(*piece)
        if self._piece >= len(self._pieces):
            self.complete = True
        return set()

    def _emit(self, t: int, deps: tuple[int, ...], text_index: int) -> int:
        cp = self.cp
        m = len(self.kind)
        k = cp.kind[t]
        s = cp.stream[t]
        self.kind.append(k)
        self.stream.append(s)
        self.deps.append(deps)
        self.dur.append(cp.dur_ps[t])
        self._cpu += cp.issue_ps[t] - (cp.issue_ps[t - 1] if t > 0 else 0)
        self.issue.append(self._cpu)
        info = cp.comm[t]
        if info is not None:
            key = ordinal_key(info, k)
            o = self._ordinals.get(key, 0)
            self._ordinals[key] = o + 1
            if o != info.ordinal:
                info = CommInfo(
                    info.group,
                    o,
                    info.kind,
                    info.nbytes,
                    info.root,
                    info.algorithm,
                    info.peer,
                    info.sms,
                )
        self.comm.append(info)
        self.stream_ops[s].append(m)
        assert self.src is not None and self.text_index is not None
        self.src.append(t)
        self.text_index.append(text_index)
        return m

    def _add_plain(self, a: int, b: int) -> set[int]:
        tmap, deps, streams = self._tmap, self.cp.deps, self.cp.stream
        before = len(self.kind)
        for t in range(a, b):
            tmap[t] = self._emit(t, tuple(tmap[d] for d in deps[t]), t)
        self._after_growth(before)
        if self._piece >= len(self._pieces):
            self.complete = True
        return {streams[t] for t in range(a, b)}

    def _add_copy(self, run: RegionRun) -> set[int]:
        reg = run.region
        k = len(run.copy_starts)
        base = len(self.kind)
        prev = run.copy_starts[-1] if k else -1
        run.copy_starts.append(base)
        body = self._body(run)
        if prev < 0:  # the first copy: what precedes it is the text's
            tmap = self._tmap
            deps = [
                tuple(base + value if kind == INSIDE else tmap[value] for kind, value, _ in rules)
                for rules in reg.rules
            ]
        else:
            assert prev == base - reg.length  # copies are unrolled back to back
            deps = self._later_deps(run, base)
        self.deps.extend(deps)
        self.kind.extend(body.kind)
        self.stream.extend(body.stream)
        self.dur.extend(body.dur)
        cpu = self._cpu
        self.issue.extend([cpu + c for c in body.issue])
        self._cpu = cpu + body.issue[-1]
        comm: list[CommInfo | None] = list(body.comm)
        ordinals = self._ordinals
        for x in body.comm_at:
            info = comm[x]
            assert info is not None
            key = body.keys[x]
            o = ordinals.get(key, 0)
            ordinals[key] = o + 1
            comm[x] = CommInfo(
                info.group,
                o,
                info.kind,
                info.nbytes,
                info.root,
                info.algorithm,
                info.peer,
                info.sms,
            )
        self.comm.extend(comm)
        for s, offsets in body.stream_offsets.items():
            self.stream_ops[s].extend([base + x for x in offsets])
        assert self.src is not None and self.text_index is not None
        self.src.extend(range(reg.start, reg.start + reg.length))
        first = reg.start + k * reg.length
        self.text_index.extend(range(first, first + reg.length))
        self._after_growth(base)
        return set(body.stream_offsets)

    def _later_deps(self, run: RegionRun, base: int) -> list[tuple[int, ...]]:
        """Dependencies of a copy after the first, at unrolled index `base`. Copies are
        unrolled back to back (the previous one starts at base - length), so every
        dependency is base + a constant (inside the copy, or in the previous one) or a
        fixed op before the region (unrolled before its first copy): one vector sum."""
        got = self._later.get(run.index)
        if got is None:
            reg, tmap = run.region, self._tmap
            flat: list[int] = []
            rel: list[int] = []
            bounds: list[tuple[int, int]] = []
            for rules in reg.rules:
                a = len(flat)
                for kind, value, offset in rules:
                    if kind == INSIDE:
                        flat.append(value)
                    elif kind == PREV:
                        flat.append(offset - reg.length)
                    else:
                        flat.append(tmap[value])
                    rel.append(kind != CONST)
                bounds.append((a, len(flat)))
            got = (np.array(flat, dtype=np.int64), np.array(rel, dtype=np.int64), bounds)
            self._later[run.index] = got
        flat_a, rel_a, bounds = got
        vals = (flat_a + rel_a * base).tolist()
        return [tuple(vals[a:b]) for a, b in bounds]

    def _body(self, run: RegionRun) -> _Body:
        """The compiled body of a region, sliced once for bulk unrolling."""
        got = self._bodies.get(run.index)
        if got is not None:
            return got
        cp, reg = self.cp, run.region
        lo, hi = reg.start, reg.start + reg.length
        before = cp.issue_ps[lo - 1] if lo > 0 else 0
        streams: dict[int, list[int]] = {}
        for x, s in enumerate(cp.stream[lo:hi]):
            streams.setdefault(s, []).append(x)
        comm = cp.comm[lo:hi]
        kinds = cp.kind[lo:hi]
        got = _Body(
            kind=kinds,
            stream=cp.stream[lo:hi],
            dur=cp.dur_ps[lo:hi],
            issue=[c - before for c in cp.issue_ps[lo:hi]],
            comm=comm,
            comm_at=[x for x, c in enumerate(comm) if c is not None],
            keys={x: ordinal_key(c, kinds[x]) for x, c in enumerate(comm) if c is not None},
            stream_offsets=streams,
        )
        self._bodies[run.index] = got
        return got

    def _finish_region(self, run: RegionRun) -> None:
        """Later ops that name the region's last text copy depend on the last unrolled
        copy."""
        reg = run.region
        last = run.copy_starts[-1]
        for x in range(reg.length):
            self._tmap[reg.last + x] = last + x
        run.done = True

    def _after_growth(self, before: int) -> None:
        added = len(self.kind) - before
        if added <= 0:
            return
        neg = [-1] * added
        for r in self.users:
            r.start.extend(neg)
            r.end.extend(neg)

    # --------------------------------------------------------------- parking
    def need(self, r: RankStreams, s: int) -> bool:
        """Rank r's stream s has run out of unrolled ops: unroll more. True if the stream
        got new ops (continue); else it waits until some do (parked)."""
        n = len(self.stream_ops[s])
        while not self.complete:
            got = self.grow()
            if len(self.stream_ops[s]) > n:
                self._wake(got, r, s)
                return True
            if got:
                self._wake(got, None, -1)
                break
        if len(self.stream_ops[s]) > n:
            return True
        if not self.complete:
            self.parked.setdefault(s, []).append(r)
        return False

    def _wake(self, streams: set[int], skip: RankStreams | None, skip_s: int) -> None:
        for s in streams:
            waiting = self.parked.pop(s, None)
            if waiting:
                for r in waiting:
                    if r is not skip or s != skip_s:
                        self.work.append((r, s))

    def run_at(self, index: int) -> RegionRun | None:
        """The region whose unrolled copies hold `index`."""
        for run in self.runs:
            if run.copy_starts and run.first <= index < run.unrolled_stop:
                return run
        return None
