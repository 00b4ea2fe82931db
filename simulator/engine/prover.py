"""The periodic prover at run time: where to cut, when two cuts prove a period, the skip.

What a cut holds and why a match proves a period is periodic.py's; this module decides
which ranks a proof covers and moves the state when one succeeds.

A *watch* covers a set of ranks and follows the region copies of its first rank (the
watcher), cutting at `CUTS_PER_COPY` points of each copy. The whole engine is one watch
(`whole`): a match shifts the entire state, the clock included (`Prover.warp_whole`).

Per component: ranks that meet in no collective inside a region (a straggler's
data-parallel replica and the other replicas, each running its microbatches at its own
pace) never reach one state shifted by one time, so the whole-engine proof fails for all
of them. When the run has such components (the refined view of a run whose ranks
differ), each gets a watch of its own and its own period; a match skips that
component's copies alone (`Prover.warp_part`): its ranks, rendezvous, scheduled events
and network components (moving transfers resume that much later) move later while the
clock and the other components stay. That is exact only if nothing else can change how
the component runs, so:

- a cut holds the component's network components and is refused while one of them also
  holds another component's transfers (`ContentionNetwork.part_state`);
- with the contention network, the component is solved apart from the others while its
  transfers keep to links no other component's traffic can take (`by_part`,
  `ContentionNetwork.coupled`): transfers on shared links (a fabric's switch-to-switch
  links, adaptive routing's Valiant paths, a NIC two components share) couple their
  rates, so a coupled component is never skipped alone. The alpha-beta network prices
  every activation alone, so its components are always independent.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from simulator.engine.modes import RankView
from simulator.engine.network import Activation, _Call, queued_events, shift_clock
from simulator.engine.periodic import (
    Cut,
    cut_points,
    host_slack_ok,
    periods_match,
    sync_in,
    take_cut,
)
from simulator.engine.ranks import Pending, RankState, Warp
from simulator.engine.unroll import RegionRun, ordinal_key
from topologies.types import Topology

if TYPE_CHECKING:
    import simpy

    from simulator.engine.network import AlphaBetaNetwork, ContentionNetwork, NetworkStats

CUT_PRIORITY = 3  # after LATE (2): a cut sees the state after every event of its instant
MAX_PERIOD_COPIES = 2  # periods of 1 or 2 copies are tried (contention may alternate)
# Cut points per copy of the watched region (evenly spaced body offsets). A period can be
# proved from any instant after the transient (periodic.py), so cutting inside copies
# proves it up to a copy earlier than cutting at copy starts only; cuts whose windows are
# not all inside region copies cost one window scan (take_cut returns None).
CUTS_PER_COPY = 8


class ProverEngine(Protocol):
    """What the prover reads and moves of the engine (simulator/engine/core.py)."""

    env: simpy.Environment
    net: AlphaBetaNetwork | ContentionNetwork
    pending: dict[tuple[object, ...], Pending]
    ranks: list[RankState]
    stats: NetworkStats
    skipped: int


@dataclass(eq=False)
class Watch:
    """The prover's watch over a set of ranks (all of them when `whole`)."""

    ranks: list[RankState]
    whole: bool
    part: int = -1  # the component's number (-1: the whole engine)
    run: RegionRun | None = None
    points: list[int] = field(default_factory=list)
    next: int = 0  # next cut point: copy * len(points) + point
    point: int = 0
    cuts: dict[int, list[Cut]] = field(default_factory=dict)  # per point, the last cuts
    hint: list[int] = field(default_factory=lambda: [0])  # the rank last found outside
    cut_at: int = -1

    @property
    def watcher(self) -> RankState:
        return self.ranks[0]


class Prover:
    """Cuts, matches and skips for the engine's watches (see the module doc)."""

    def __init__(self, engine: ProverEngine, watches: list[Watch]):
        self.engine = engine
        self.watches = watches
        for w in watches:
            w.watcher.watch = w
            self.watch_next(w, None)

    # ---------------------------------------------------------------- watching
    def watch_next(self, w: Watch, after: RegionRun | None) -> None:
        """Watch the watcher's next region (after `after`) for copies to compare."""
        runs = w.watcher.prog.runs
        k = 0 if after is None else runs.index(after) + 1
        w.run = runs[k] if k < len(runs) and not self.coupled(w) else None
        w.points = cut_points(w.run.length, CUTS_PER_COPY) if w.run else []
        w.next = 0
        w.point = 0
        w.cuts = {}

    def poll(self, w: Watch) -> None:
        """The watcher advanced: once it has started the op of the next cut point (any
        copy), cut after every event of this instant."""
        run = w.run
        assert run is not None
        points = w.points
        k, j = divmod(w.next, len(points))
        if k >= len(run.copy_starts):
            if run.copies_left <= 0 and run.done:
                self.watch_next(w, run)
            return
        start = w.watcher.start
        if start[run.copy_starts[k] + points[j]] < 0:
            return
        while True:  # every point the watcher has passed by now: cut once, as the last
            w.point = j
            w.next += 1
            k, j = divmod(w.next, len(points))
            if k >= len(run.copy_starts) or start[run.copy_starts[k] + points[j]] < 0:
                break
        env = self.engine.env
        now = int(env.now)
        if w.cut_at != now:
            w.cut_at = now
            env.schedule(_Call(env, partial(self.cut, w)), CUT_PRIORITY, 0)  # type: ignore[arg-type]

    def cut(self, w: Watch) -> None:
        run = w.run
        if run is None:
            return
        engine = self.engine
        if self.coupled(w):
            w.run = None  # no region of these ranks will be skipped alone
            return
        cut = take_cut(engine, int(engine.env.now), w.hint, None if w.whole else w.ranks, w.part)
        earlier = w.cuts.get(w.point, [])
        for back in range(1, MAX_PERIOD_COPIES + 1):
            if cut is None or back > len(earlier):
                break  # (None: some rank is outside region copies, no cut matches it)
            prev = earlier[-back]
            if not periods_match(prev, cut, back) or not host_slack_ok(w.ranks, prev, cut, back):
                continue
            copies = min(x.run.copies_left for x in cut.windows if x.run is not None)
            copies -= copies % back
            if copies > 0:
                if w.whole:
                    self.warp_whole(prev, cut, copies, back)
                else:
                    self.warp_part(w, prev, cut, copies, back)
                self.watch_next(w, run)
                return
        if cut is not None:
            w.cuts[w.point] = [*earlier[-(MAX_PERIOD_COPIES - 1) :], cut]
        if run.copies_left <= 0:
            self.watch_next(w, run)

    def coupled(self, w: Watch) -> bool:
        """Whether a component's traffic left its own links (`ContentionNetwork.coupled`):
        its rates then depend on the others', so it is never skipped alone."""
        return not w.whole and w.part in getattr(self.engine.net, "coupled", ())

    # ---------------------------------------------------------------- skipping
    def _shift_ranks(
        self, ranks: list[RankState], a: Cut, b: Cut, copies: int, back: int
    ) -> tuple[dict[int, RegionRun], int]:
        """Move the ranks' windows at cut b `copies` copies later; (run per rank, delta)."""
        periods = copies // back
        period = b.time - a.time
        delta = periods * period
        runs = {id(x.run): x.run for x in b.windows if x.run is not None}
        for run in runs.values():
            run.skipped += copies
        run_of: dict[int, RegionRun] = {}
        for r, wa, wb in zip(ranks, a.windows, b.windows, strict=True):
            if wb.run is None:
                continue
            run_of[id(r)] = wb.run
            for arr in (r.start, r.end):
                v = np.frombuffer(arr, dtype=np.int64)[wb.lo : wb.hi]
                v[v >= 0] += delta
            for i, t in sync_in(r.sync, wb.lo, wb.hi):
                r.sync[i] = t + delta
            r.free = [f + delta for f in r.free]
            host = copies * wb.run.issue_ps
            r.ish += host
            for okey, c in wb.run.counts.items():
                r.oshift[okey] = r.oshift.get(okey, 0) + copies * c
            r.warps.append(Warp(wa.lo, wb.lo, periods, period, a.time, b.time, host))
        self.engine.skipped += copies
        return run_of, delta

    def _shift_pending(
        self, run_of: dict[int, RegionRun], delta: int, copies: int, ranks: set[int] | None
    ) -> None:
        """Move the rendezvous of `ranks` (None: all) later, their ordinals past the
        skipped copies' collectives."""
        engine = self.engine
        pending: dict[tuple[object, ...], Pending] = {}
        for key, p in engine.pending.items():
            r0, i0, _ = p.parts[0]
            if ranks is not None and id(r0) not in ranks:
                pending[key] = p
                continue
            p.ready += delta
            info = r0.prog.comm[i0]
            assert info is not None
            extra = copies * run_of[id(r0)].counts.get(ordinal_key(info, r0.prog.kind[i0]), 0)
            ordinal = key[-1]
            assert isinstance(ordinal, int)
            pending[(*key[:-1], ordinal + extra)] = p
        engine.pending = pending

    def warp_whole(self, a: Cut, b: Cut, copies: int, back: int) -> None:
        """Skip `copies` copies of every rank's region (`copies` / `back` periods of
        b.time - a.time): shift the state at cut b that much later (see periodic.py)."""
        engine = self.engine
        run_of, delta = self._shift_ranks(engine.ranks, a, b, copies, back)
        self._shift_pending(run_of, delta, copies, None)
        acts: dict[int, Activation] = {}
        for _, _, tag in queued_events(engine.env):
            for x in tag or ():
                if isinstance(x, Activation):
                    acts[id(x)] = x
        for c in getattr(engine.net, "active", ()):
            acts[id(c.act)] = c.act
        for act in acts.values():
            act.start_ps += delta
        engine.net.shift(delta)
        shift_clock(engine.env, delta)
        engine.stats.repeat_since(a.link_bytes, copies // back)

    def warp_part(self, w: Watch, a: Cut, b: Cut, copies: int, back: int) -> None:
        """Skip `copies` copies of one component's region: its ranks, rendezvous,
        scheduled events and network components (moving transfers resume `delta` later)
        move later; the clock and every other rank stay (`take_cut` found its network
        components its own)."""
        engine = self.engine
        net = engine.net
        run_of, delta = self._shift_ranks(w.ranks, a, b, copies, back)
        mine = {id(r) for r in w.ranks}
        self._shift_pending(run_of, delta, copies, mine)
        env = engine.env
        queue: list[tuple[int, int, int, object]] = env._queue  # type: ignore[assignment]
        moved: dict[int, Activation] = {}
        split: list[tuple[int, int, int, list[tuple[Any, Any]]]] = []
        for n, (t, prio, eid, ev) in enumerate(queue):
            tag = getattr(ev, "tag", None)
            if tag is None:
                continue
            if tag[0] == "check":
                if net.part_of(tag[1]) == w.part:
                    queue[n] = (t + delta, prio, eid, ev)
                continue
            if tag[0] == "checks":  # checks due together: this component's move apart
                ours = [x for x in tag[1:] if net.part_of(x[0]) == w.part]
                if ours:
                    rest = [x for x in tag[1:] if net.part_of(x[0]) != w.part]
                    ev.tag = ("checks", *rest)  # type: ignore[attr-defined]
                    ev.fn = partial(net._checks, rest)  # type: ignore[attr-defined,union-attr]
                    split.append((t + delta, prio, eid, ours))
                continue
            act = tag[1] if len(tag) > 1 else None
            if isinstance(act, Activation) and id(act.owner.parts[0][0]) in mine:  # type: ignore[attr-defined]
                queue[n] = (t + delta, prio, eid, ev)
                moved[id(act)] = act
        for c in getattr(net, "active", ()):
            if id(c.act.owner.parts[0][0]) in mine:
                moved[id(c.act)] = c.act
        for act in moved.values():
            act.start_ps += delta
        for t, prio, eid, ours in split:  # the bundle's id: its place among equal times
            fn = partial(net._checks, ours)  # type: ignore[union-attr]
            queue.append((t, prio, eid, _Call(env, fn, ("checks", *ours))))
        heapq.heapify(queue)
        net.shift_part(w.part, delta)
        engine.stats.repeat_since(a.link_bytes, copies // back, w.part)


def rank_components(view: RankView, groups: set[str]) -> list[int]:
    """Per simulated rank (in `view.reps` order), its component: ranks joined by a
    collective of one of `groups` (those issued inside regions), numbered by first rank.
    A class stands for its members: a signature's instances join the classes in it."""
    reps = view.reps
    index = np.full(int(view.representative.max(initial=-1)) + 1, -1, dtype=np.int64)
    index[reps] = np.arange(reps.size)
    parent = list(range(reps.size))

    def find(j: int) -> int:
        while parent[j] != j:
            parent[j] = parent[parent[j]]
            j = parent[j]
        return j

    for name in sorted(groups):
        gv = view.groups[name]
        firsts = np.array([rows[0] for rows in gv.rows], dtype=np.int64)
        if firsts.size == 0:
            continue
        table = index[view.representative[gv.members[firsts]]]
        for row in table.tolist():
            root = find(row[0])
            for x in row[1:]:
                other = find(x)
                if other != root:
                    parent[other] = root
    roots = [find(j) for j in range(reps.size)]
    number: dict[int, int] = {}
    return [number.setdefault(r, len(number)) for r in roots]


def private_links(
    topology: Topology, placement: np.ndarray, view: RankView, parts: list[int]
) -> list[np.ndarray]:
    """Per component, a mask over the links only its traffic can take: links from or to
    one of its GPUs, or from or to a device of a node whose GPUs are all its own (a NIC,
    a node's switch). A transfer between two other GPUs never passes there: routes leave
    a node through its own NICs (PXN hops to a GPU of the same node) and cross the
    fabric's switches, which are nobody's."""
    part_of_rep = np.full(int(view.representative.max(initial=-1)) + 1, -1, dtype=np.int64)
    part_of_rep[view.reps] = parts
    part_of_rank = part_of_rep[view.representative]  # every rank, by its class
    devices = topology.devices
    owner = np.full(len(devices), -1, dtype=np.int64)  # device -> component, -2 shared
    gpu_dev = topology.gpus[placement]
    owner[gpu_dev] = part_of_rank
    node = devices.node
    nodes = int(node.max(initial=-1)) + 1
    if nodes:
        # a node is one component's when every GPU on it is (GPUs no rank runs on: none's)
        first = np.full(nodes, -1, dtype=np.int64)
        mixed = np.zeros(nodes, dtype=bool)
        all_gpus = topology.gpus
        gpu_owner = owner[all_gpus]
        gnode = node[all_gpus]
        first[gnode] = gpu_owner
        mixed[gnode[gpu_owner != first[gnode]]] = True
        node_owner = np.where(mixed, -2, first)
        others = np.flatnonzero((owner == -1) & (node >= 0))
        owner[others] = node_owner[node[others]]
    src = owner[topology.links.src]
    dst = owner[topology.links.dst]
    return [(src == p) | (dst == p) for p in range(max(parts) + 1)]
