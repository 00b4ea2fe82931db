"""The network at run time: collective activations priced in simulated time.

Two models behind one protocol (`submit(activation, start_ps)`; completion is reported
through `activation.on_done(end_ps)` from a simpy callback):

- `AlphaBetaNetwork`: each bundle's time is its isolated alpha-beta time; no sharing.
- `ContentionNetwork`: phases of all active bundles share link bandwidth max-min fairly;
  rates are recomputed once per simulated instant in which the active set changed
  (a low-priority event runs after every other event of that instant) and cached by the
  active pattern, so a steady-state iteration re-uses a handful of allocations.

Every event a runtime schedules carries a `tag` saying what it will do, and no callback
holds an absolute time: the periodic prover (simulator/engine/periodic.py) compares two
states of a run by these tags, and moves a state forward in time (`shift`) when it skips
repeated periods.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import simpy

from simulator.engine.compiled import PS_PER_S, to_ps
from simulator.network.pricing import BoundPhase, Bundle, CollectivePricer, PhasePlan
from workloads.ops import CollectiveKind

LATE = 2  # simpy priority after NORMAL (1): runs after all other events of an instant

Tag = tuple[object, ...] | None
"""What a scheduled event does, for state comparison: ('begin', act), ('phase', act,
bundle, index), ('stage', act, bundle, index), ('reprice',), ('check', component,
version), ('checks', (component, version), ...) (checks due together, run in that
order), ('done', act); None for observers that change nothing."""


class _Call(simpy.Event):
    """A triggered, successful event (what Event.succeed() would set) that runs `fn`.

    Cheaper than Event + succeed + a closure: this is the engine's most frequent object."""

    __slots__ = ("fn", "tag")

    def __init__(self, env: simpy.Environment, fn: Callable[[], None], tag: Tag = None) -> None:
        self.env = env
        self.callbacks = [_fire]
        self._ok = True
        self._value = None
        self.fn = fn
        self.tag = tag


def _fire(ev: simpy.Event) -> None:
    ev.fn()  # type: ignore[attr-defined]


def call_at(
    env: simpy.Environment,
    delay_ps: int,
    fn: Callable[[], None],
    priority: int = 1,
    tag: Tag = None,
) -> None:
    """Run `fn` after `delay_ps` simulated picoseconds, via simpy's public `schedule`."""
    env.schedule(_Call(env, fn, tag), priority, delay_ps)  # type: ignore[arg-type]


def queued_events(env: simpy.Environment) -> list[tuple[int, int, Tag]]:
    """(time, priority, tag) of every scheduled event in the order simpy will run them."""
    queue: list[tuple[int, int, int, object]] = env._queue  # type: ignore[assignment] # simpy 4's heap (private)
    out: list[tuple[int, int, Tag]] = []
    for t, p, _, ev in sorted(queue, key=_order):
        tag = getattr(ev, "tag", None)
        if tag is not None and tag[0] == "checks":  # checks sharing one event, in order
            out.extend((t, p, ("check", *pair)) for pair in tag[1:])
        else:
            out.append((t, p, tag))
    return out


def _order(entry: tuple[int, int, int, object]) -> tuple[int, int, int]:
    return entry[0], entry[1], entry[2]


def shift_clock(env: simpy.Environment, delta_ps: int) -> None:
    """Move the simulated clock and every scheduled event `delta_ps` later (a uniform
    shift keeps simpy's heap order)."""
    env._queue[:] = [(t + delta_ps, p, e, ev) for t, p, e, ev in env._queue]
    env._now = env._now + delta_ps


@dataclass(eq=False, slots=True)
class Activation:
    """One collective (or send/recv) on a set of concurrent group instances.

    `start_ps` is when its participants have all arrived (the `sync` start of their
    records); `owner` is what the engine needs back on completion (for state comparison
    it exposes `parts`)."""

    kind: CollectiveKind
    nbytes: float
    instances: np.ndarray  # (instances, members) GPU indices; (n, 2) src/dst for p2p
    key: Hashable  # pricing cache key (stable across iterations)
    on_done: Callable[[int], None]
    root: int = 0
    algorithm: str | None = None
    start_ps: int = 0
    bundles: tuple[Bundle, ...] = ()
    open_bundles: int = 0
    owner: object = None
    part: int = -1  # the periodic prover's component of the ranks it serves (-1: none)


@dataclass
class NetworkStats:
    """Counters for reports and benchmarks."""

    activations: int = 0
    reprices: int = 0
    rate_cache_hits: int = 0
    simpy_events: int = 0
    phase_bytes: dict[tuple[int, int], tuple[BoundPhase, float]] = field(default_factory=dict)

    def add_bytes(self, phase: BoundPhase, per_flow_bytes: float, part: int = -1) -> None:
        """Bytes per flow a phase moved, kept apart per prover component (`part`), whose
        skipped periods repeat their own bytes only."""
        key = (id(phase), part)
        prev = self.phase_bytes.get(key)
        self.phase_bytes[key] = (phase, per_flow_bytes + (prev[1] if prev else 0.0))

    def link_bytes(self, num_links: int) -> np.ndarray:
        out = np.zeros(num_links)
        for phase, total in self.phase_bytes.values():
            np.add.at(out, phase.links, phase.counts * total)
        return out

    def snapshot(self) -> dict[tuple[int, int], float]:
        return {k: v[1] for k, v in self.phase_bytes.items()}

    def repeat_since(
        self, snap: dict[tuple[int, int], float], times: int, part: int | None = None
    ) -> None:
        """Add `times` more copies of the bytes moved since `snap` (skipped periods), by
        one prover component (`part`) or by all (None)."""
        for k, (phase, total) in list(self.phase_bytes.items()):
            if part is not None and k[1] != part:
                continue
            delta = total - snap.get(k, 0.0)
            if delta:
                self.phase_bytes[k] = (phase, total + times * delta)


class AlphaBetaNetwork:
    """Isolated alpha-beta pricing: an activation lasts its slowest bundle's time."""

    name = "alpha-beta"

    def __init__(self, env: simpy.Environment, pricer: CollectivePricer, stats: NetworkStats):
        self.env = env
        self.pricer = pricer
        self.stats = stats
        self._priced: dict[tuple[object, ...], tuple[tuple[Bundle, ...], int]] = {}

    def submit(self, act: Activation, start_ps: int) -> None:
        act.start_ps = start_ps
        ck = (act.key, act.kind, act.nbytes, act.root, act.algorithm)
        got = self._priced.get(ck)
        if got is None:
            bundles = self.pricer.bundles(
                act.kind, act.instances, act.nbytes, act.root, act.algorithm, act.key
            )
            seconds = 0.0
            for b in bundles:
                seconds = max(seconds, self.pricer.alpha_beta_time_s(b, act.nbytes, act.kind))
            got = self._priced[ck] = (bundles, to_ps(seconds))
        bundles, duration = got
        for b in bundles:
            for ph in b.phases:
                self.stats.add_bytes(ph, ph.bytes_factor * act.nbytes, act.part)
        end = start_ps + duration
        self.stats.activations += 1
        self.stats.simpy_events += 1
        env = self.env
        call_at(env, end - int(env.now), lambda: act.on_done(int(env.now)), tag=("done", act))

    def state(self, now: int) -> tuple[object, ...]:
        """Nothing beyond the scheduled events (their tags hold the activations)."""
        return ()

    def live_check(self, comp: object, version: object) -> bool:
        return False  # schedules no checks

    def check_position(self, comp: object) -> int:
        return -1

    def shift(self, delta_ps: int) -> None:
        """Move the runtime's own clock values `delta_ps` later (none here)."""

    def part_state(self, part: int, now: int) -> tuple[object, ...] | None:
        """A prover component's own network state (none beyond its scheduled events)."""
        return ()

    def part_of(self, comp: object) -> int:
        return -1  # schedules no checks

    def part_position(self, comp: object) -> int:
        return -1

    def shift_part(self, part: int, delta_ps: int) -> None:
        """Move a prover component's network state `delta_ps` later (none here)."""


@dataclass(eq=False, slots=True)
class _Coflow:
    act: Activation
    bundle: int  # index into act.bundles
    plan: PhasePlan
    index: int  # phase index in the bundle
    phase: BoundPhase
    remaining: float  # bytes per flow still to move
    initial: float
    seq: int  # order of arrival (ties between coflows of one pattern)
    rate: float = 0.0


@dataclass(eq=False, slots=True)
class _Component:
    """Active coflows connected by shared links: their rates depend on each other only.

    Why: a pipeline or a full-mode run keeps hundreds of transfers in flight on disjoint
    parts of the machine; sharing is computed per component, so one transfer starting or
    ending re-solves only the transfers it shares links with, and each component's
    allocation is cached by its own pattern (which recurs) instead of by the whole
    machine's (which hardly does)."""

    cid: int
    members: list[_Coflow]
    links: np.ndarray  # unique link ids of the members (in no particular order)
    last_ps: int  # progress of the members accounted up to here
    version: int = 0
    solved: bool = False


JOINT = -3
"""`ContentionNetwork._world` of coflows solved together (components coupled by shared
links, and runs without prover components)."""

SPANNING_SHARE = 1 / 32
"""A coflow whose phase alone uses at least this share of the machine's links switches
to whole-machine solving until the network is idle. Why: keeping components costs passes
over a joining coflow's links and over a splitting component's links (ownership,
union-find), which only pays when it keeps most of the machine out of each solve. Measured with
bench/distinct_work.py: a symmetric AxoNN run's bundle phases span 5-30% of the links
(GPT-320B on 32,768 Frontier GCDs: 16,000-97,000 of 324,392), where per-component
bookkeeping made the run 1.5x slower than whole-machine pricing; pipeline transfers and
full-mode instances use under 2% (Megatron 175B on 64 A100: at most 17 of 832), where
components keep each solve small. Results do not depend on it but for float rounding
(max-min allocations of independent components are their separate allocations; the
order of progress updates differs, tests/test_contention_components.py bounds it at
1e-12 relative)."""

SPANNING_GPUS = 1 / 3
"""A coflow whose activation covers at least this share of the run's GPUs switches to
whole-machine solving too. Why: the link share above is of the whole fabric, and a run
on part of a large machine leaves most of the fabric idle (1,024 Frontier GCDs come with
102,184 links, 16,384 with 209,704), so a symmetric AxoNN activation there, one GCD
class of two (512 of 1,024 GCDs), uses 512-768 links, 0.5-0.75% of the links, and kept
per-component bookkeeping: 24,802 component splits for 25,806 phase starts. Measured
with bench/distinct_work.py (CPU s, components / whole, identical iteration times):
GPT-320B on 1,024 Frontier GCDs (activations on 1/2 of the GPUs) 1.15 / 0.70; Megatron
175B on 64 A100, where the tied-embedding all-reduce of the first and last stage covers
1/4 and switched at a threshold of 1/4, 1.86 / 1.93 (3 rounds each: 3-5% slower, 9%
more events), so the threshold lies between 1/4 and 1/2; Megatron 1T on 3,072 A100 (at
most 48 GPUs, 1.6%) and full mode (one instance per activation) never switch, and
forcing whole-machine solving on 1T costs 45x (226 s)."""


class ContentionNetwork:
    """Max-min fair sharing among all concurrently active bundle phases, solved per
    connected component of the links they use (the max-min allocation of independent
    components is their separate allocations), or as one whole while a coflow spans much
    of the machine (`SPANNING_SHARE`) or an adaptive-routed phase is active
    (its family spans layout classes and the adaptive solver's choice is machine-wide,
    simulator/network/adaptive.py)."""

    name = "contention"

    def __init__(self, env: simpy.Environment, pricer: CollectivePricer, stats: NetworkStats):
        self.env = env
        self.pricer = pricer
        self.stats = stats
        self.capacity = pricer.bandwidth_Bps
        self.gpus = pricer.topology.num_gpus
        self.owner = np.full(self.capacity.shape[0], -1, dtype=np.int64)  # link -> component
        self._last = np.full(self.capacity.shape[0], -1, dtype=np.int64)  # scratch (_split)
        self.comps: dict[int, _Component] = {}
        self.dirty: dict[int, _Component] = {}
        self.whole: _Component | None = None  # set while every coflow is one component
        # prover components (simulator/engine/prover.py) solved apart: whole-machine
        # solving per component (`_join_part`), so that one whose traffic is on links of
        # its own runs alike, to the last bit, whatever the others do at the same time
        self.by_part = False
        self.wholes: dict[int, _Component] = {}
        # per prover component, the links only its traffic can take (set with by_part); a
        # component whose coflow leaves them is coupled: solved with the others from then
        self.private: list[np.ndarray] = []
        self.coupled: set[int] = set()
        self._private_phase: dict[tuple[int, int], bool] = {}
        self.lazy: _Component | None = None  # the only component, links not in `owner`
        self.next_cid = 0
        self.seq = 0
        self.reprice_pending = False
        # rates per active pattern, as Python floats (the hot loop reads them one by one)
        self._rate_lists: dict[tuple[int, ...], list[float]] = {}
        # bundles and plans of an activation pattern: the pricer's, looked up once
        self._priced: dict[
            tuple[object, ...], tuple[tuple[Bundle, ...], tuple[PhasePlan, ...]]
        ] = {}

    @property
    def active(self) -> list[_Coflow]:
        """Every active coflow (component by component)."""
        return [c for comp in self.comps.values() for c in comp.members]

    # ------------------------------------------------------------ activation
    def submit(self, act: Activation, start_ps: int) -> None:
        act.start_ps = start_ps
        self.stats.activations += 1
        self._after(start_ps - int(self.env.now), lambda: self._begin(act), tag=("begin", act))

    def _after(
        self, delay_ps: int, fn: Callable[[], None], priority: int = 1, tag: Tag = None
    ) -> None:
        self.stats.simpy_events += 1
        self.env.schedule(_Call(self.env, fn, tag), priority, delay_ps)  # type: ignore[arg-type]

    def _begin(self, act: Activation) -> None:
        ck = (act.key, act.kind, act.nbytes, act.root, act.algorithm)
        got = self._priced.get(ck)
        if got is None:
            bundles = self.pricer.bundles(
                act.kind, act.instances, act.nbytes, act.root, act.algorithm, act.key
            )
            plans = tuple(self.pricer.plan(b, act.kind, act.nbytes, shared=True) for b in bundles)
            got = self._priced[ck] = (bundles, plans)
        act.bundles, plans = got
        act.open_bundles = len(act.bundles)
        if not act.bundles:
            act.on_done(int(self.env.now))
            return
        for bi, plan in enumerate(plans):
            self._start_phase(act, bi, plan, 0, plan.overhead_s)

    def _start_phase(
        self, act: Activation, bi: int, plan: PhasePlan, index: int, extra_s: float = 0.0
    ) -> None:
        bundle = act.bundles[bi]
        if index >= len(bundle.phases):
            if extra_s > 0:  # a bundle without phases (size-1 group) still pays the overhead
                self._after(
                    to_ps(extra_s),
                    lambda: self._start_phase(act, bi, plan, index),
                    tag=("stage", act, bi, index),
                )
                return
            act.open_bundles -= 1
            if act.open_bundles == 0:
                act.on_done(int(self.env.now))
            return
        delay = to_ps(plan.latency_s[index] + extra_s)
        if delay > 0:
            self._after(
                delay, lambda: self._go(act, bi, plan, index), tag=("phase", act, bi, index)
            )
        else:  # at once: no closure (most phases of a full-mode run)
            self._go(act, bi, plan, index)

    def _go(self, act: Activation, bi: int, plan: PhasePlan, index: int) -> None:
        """Phase `index` of bundle `bi` starts moving its bytes (after its latency)."""
        phase = act.bundles[bi].phases[index]
        per_flow = plan.bytes_per_flow[index]
        if per_flow <= 0 or phase.links.size == 0:
            self._start_phase(act, bi, plan, index + 1)
            return
        self.seq += 1
        self._join(_Coflow(act, bi, plan, index, phase, per_flow, per_flow, self.seq))

    # ------------------------------------------------------------ components
    def _progress(self, comp: _Component) -> None:
        """Account the members' transfer since the component's last update."""
        now = int(self.env.now)
        dt = now - comp.last_ps
        if dt > 0:
            secs = dt / PS_PER_S
            for c in comp.members:
                c.remaining -= c.rate * secs
        comp.last_ps = now

    def _new_component(self, members: list[_Coflow], links: np.ndarray) -> _Component:
        """A component; its links are owned (written to `owner`) only once another
        component exists: collectives that run one at a time then cost no pass over their
        links on start and end."""
        comp = _Component(self.next_cid, members, links, int(self.env.now))
        self.next_cid += 1
        if self.comps:
            self._own_lazy()
            self.owner[links] = comp.cid
        else:
            self.lazy = comp
        self.comps[comp.cid] = comp
        self._mark_dirty(comp)
        return comp

    def _own_lazy(self) -> None:
        """Write the lone unowned component's links to `owner` (another is coming)."""
        lazy = self.lazy
        if lazy is not None:
            self.owner[lazy.links] = lazy.cid
            self.lazy = None

    def _drop(self, comp: _Component) -> None:
        if comp is self.lazy:
            self.lazy = None
        del self.comps[comp.cid]
        self.dirty.pop(comp.cid, None)

    def _go_whole(self) -> _Component:
        """Every active coflow becomes one component, solved as a whole from now until
        the network is idle (its links stay owned, to be released then)."""
        comps = list(self.comps.values())
        for comp in comps:
            self._progress(comp)
            self._drop(comp)
        members = [m for comp in comps for m in comp.members]
        links = [comp.links for comp in comps]
        whole = _Component(
            self.next_cid,
            members,
            np.concatenate(links) if links else np.empty(0, dtype=np.int64),
            int(self.env.now),
        )
        self.next_cid += 1
        self.comps[whole.cid] = whole
        self.whole = whole
        return whole

    def _spans(self, c: _Coflow) -> bool:
        """Whether a coflow switches its network to whole-machine solving."""
        return (
            c.phase.split is not None
            or c.phase.links.size >= SPANNING_SHARE * self.capacity.shape[0]
            or c.act.instances.size >= SPANNING_GPUS * self.gpus
        )

    def _world(self, c: _Coflow) -> int:
        """Where a coflow is solved with `by_part`: its prover component while all of that
        component's coflows kept to its own links, else the shared world (JOINT)."""
        p = c.act.part
        return JOINT if p < 0 or p in self.coupled else p

    def _keeps_apart(self, c: _Coflow) -> bool:
        """Whether a coflow uses only links its prover component alone can take (and so
        no adaptive routing, whose Valiant paths cross everyone's switches)."""
        p = c.act.part
        key = (id(c.phase), p)
        got = self._private_phase.get(key)
        if got is None:
            got = c.phase.split is None and bool(self.private[p][c.phase.links].all())
            self._private_phase[key] = got
        return got

    def _join_part(self, c: _Coflow) -> None:
        """`_join` with each prover component solved apart while its coflows keep to its
        own links (`_keeps_apart`; one that does not couples its component with the rest
        for good), and whole-machine solving per world: a spanning coflow merges its
        world's coflows (and whatever shares links with them) into a whole, which its
        world's later coflows join; other worlds' coflows join it only through links they
        share. Links are always owned here."""
        p = c.act.part
        if p >= 0 and p not in self.coupled and not self._keeps_apart(c):
            self.coupled.add(p)
            self.wholes.pop(p, None)  # its coflows are the shared world's from now
        part = self._world(c)
        whole = self.wholes.get(part)
        if whole is None and not self._spans(c):
            self._join_components(c)  # the common case: no whole in its world
            return
        self._own_lazy()
        if whole is None:
            mine = [
                k for k in self.comps.values() if any(self._world(m) == part for m in k.members)
            ]
            for k in mine:
                self._progress(k)
                self._drop(k)
            links = [k.links for k in mine]
            whole = _Component(
                self.next_cid,
                [m for k in mine for m in k.members],
                np.concatenate(links) if links else np.empty(0, dtype=np.int64),
                int(self.env.now),
            )
            self.next_cid += 1
            self.comps[whole.cid] = whole
            self.owner[whole.links] = whole.cid
            self._rehome(mine, whole)
            self.wholes[part] = whole
        touched = self.owner[c.phase.links]
        others = np.unique(touched[(touched >= 0) & (touched != whole.cid)]).tolist()
        self._progress(whole)
        self._rehome([self.comps[cid] for cid in others], whole)
        for cid in others:  # another component sharing links with this one's coflow
            k = self.comps[cid]
            self._progress(k)
            self._drop(k)
            whole.members += k.members
            whole.links = np.concatenate([whole.links, k.links])
            self.owner[k.links] = whole.cid
        whole.members.append(c)
        free = c.phase.links[touched < 0]
        if free.size:
            self.owner[free] = whole.cid
            whole.links = np.concatenate([whole.links, free])
        self._mark_dirty(whole)

    def _rehome(self, comps: list[_Component], into: _Component) -> None:
        """Prover components whose whole is among `comps` (merged into `into`) now have
        `into` as their whole."""
        for p, w in list(self.wholes.items()):
            if any(w is k for k in comps):
                self.wholes[p] = into

    def _join(self, c: _Coflow) -> None:
        """A coflow starts: it joins (and merges) the components whose links it uses."""
        if self.by_part:
            self._join_part(c)
            return
        whole = self.whole
        if whole is None and (
            c.phase.split is not None
            or c.phase.links.size >= SPANNING_SHARE * self.capacity.shape[0]
            or c.act.instances.size >= SPANNING_GPUS * self.gpus
        ):
            whole = self._go_whole()
        if whole is not None:
            self._progress(whole)
            whole.members.append(c)
            self._mark_dirty(whole)
            return
        self._join_components(c)

    def _join_components(self, c: _Coflow) -> None:
        """A coflow joins (and merges) the components whose links it uses."""
        if not self.comps:
            self._new_component([c], c.phase.links)
            return
        self._own_lazy()
        touched = self.owner[c.phase.links]
        if touched.max() < 0:  # on free links: a component of its own
            self._new_component([c], c.phase.links)
            return
        owned = touched[touched >= 0]
        first = int(owned[0])
        ids = [first] if (owned == first).all() else np.unique(owned).tolist()
        comps = [self.comps[i] for i in ids]
        # The largest component absorbs the others and the coflow's free links, in place:
        # a symmetric run's components span most of the machine, and re-building (sorting,
        # re-owning) their link sets on every join cost more than the events themselves.
        # Components own disjoint links, so the union needs no de-duplication but the
        # coflow's own new links'.
        big = max(comps, key=lambda k: k.links.size)
        held = [k for k in comps if k in self.wholes.values()] if self.wholes else []
        if held:  # a prover component's whole absorbs what shares its links
            big = held[0]
            self._rehome(comps, big)
        for comp in comps:
            self._progress(comp)
        added = [k.links for k in comps if k is not big]
        free = c.phase.links[touched < 0]  # a phase's links are unique already
        if free.size:
            added.append(free)
        big.members = [m for comp in comps for m in comp.members] + [c]  # order as before
        for comp in comps:
            if comp is not big:
                self._drop(comp)
        self._drop(big)  # re-entered last, as a new component would be
        self.comps[big.cid] = big
        if added:
            extra = np.concatenate(added)
            self.owner[extra] = big.cid
            big.links = np.concatenate([big.links, extra])
        self._mark_dirty(big)

    def _split(self, comp: _Component, keep: list[_Coflow]) -> None:
        """Replace `comp` by the connected components of the coflows it keeps (in order of
        their first member; members and links keep their order)."""
        if comp is not self.lazy:
            self.owner[comp.links] = -1
        self._drop(comp)
        if not keep:
            return
        if len(keep) == 1:
            self._new_component(keep, keep[0].phase.links)
            return
        # union-find over the coflows: a dense link -> last coflow table instead of sorting
        # or hashing the links (components span most of the machine in symmetric runs)
        last = self._last
        parent = list(range(len(keep)))

        def find(j: int) -> int:
            while parent[j] != j:
                parent[j] = parent[parent[j]]
                j = parent[j]
            return j

        for j, c in enumerate(keep):
            seen = last[c.phase.links]
            seen = seen[seen >= 0]
            if seen.size:
                first = int(seen[0])
                others = [first] if (seen == first).all() else np.unique(seen).tolist()
                for o in others:
                    root = find(int(o))
                    if root != j:
                        parent[root] = j
            last[c.phase.links] = j
        roots = [find(j) for j in range(len(keep))]
        used = last[comp.links]
        last[comp.links] = -1
        if len(set(roots)) == 1:
            self._new_component(keep, comp.links[used >= 0])
            return
        link_root = np.asarray(roots, dtype=np.int64)[used]
        link_root[used < 0] = -1
        groups: dict[int, list[_Coflow]] = {}
        for c, r in zip(keep, roots, strict=True):
            groups.setdefault(r, []).append(c)
        for r, part in groups.items():  # dict order: by first member
            self._new_component(part, comp.links[link_root == r])

    # --------------------------------------------------------------- sharing
    def _mark_dirty(self, comp: _Component) -> None:
        comp.version += 1
        comp.solved = False
        self.dirty[comp.cid] = comp
        if not self.reprice_pending:
            self.reprice_pending = True
            self._after(0, self._reprice, LATE, tag=("reprice",))

    def _reprice(self) -> None:
        self.reprice_pending = False
        dirty, self.dirty = self.dirty, {}
        due: dict[int, list[tuple[_Component, int]]] = {}
        for comp in dirty.values():
            dt_ps = self._solve_component(comp)
            if dt_ps >= 0:
                got = due.get(dt_ps)
                if got is None:
                    due[dt_ps] = [(comp, comp.version)]
                else:
                    got.append((comp, comp.version))
        # One event per due time for the components' checks, run in solve order. Why: a
        # full-mode run solves many like components at one instant (every instance of a
        # collective starting together) whose checks fall due together. Exact: checks
        # scheduled here would take consecutive simpy ids, so checks due at one time
        # would run one after the other with nothing between (the engine schedules no
        # urgent events); queued_events lists them one by one, as separate events.
        env = self.env
        for dt_ps, checks in due.items():
            self.stats.simpy_events += 1
            if len(checks) == 1:
                comp, version = checks[0]
                fn: Callable[[], None] = partial(self._check, comp, version)
                tag: Tag = ("check", comp, version)
            else:
                fn = partial(self._checks, checks)
                tag = ("checks", *checks)
            env.schedule(_Call(env, fn, tag), 1, dt_ps)  # type: ignore[arg-type]

    def _checks(self, checks: list[tuple[_Component, int]]) -> None:
        for comp, version in checks:
            self._check(comp, version)

    def _solve_component(self, comp: _Component) -> int:
        """Solve the component's rates; the delay (ps) of its next check, -1 for none."""
        self._progress(comp)
        members = comp.members
        if len(members) == 1:  # most components of a full-mode run: no sort, no generator
            key: tuple[int, ...] = (id(members[0].phase),)
        else:
            members.sort(key=_pattern_order)
            key = tuple(id(c.phase) for c in members)
        got = self._rate_lists.get(key)
        if got is None:
            got = self._rate_lists[key] = self._solve(members).tolist()
        else:
            self.stats.rate_cache_hits += 1
        self.stats.reprices += 1
        comp.solved = True
        next_dt: float = math.inf
        for c, r in zip(members, got, strict=True):
            c.rate = r
            if r > 0:
                next_dt = min(next_dt, c.remaining / r)
        if next_dt is math.inf:
            return -1
        return max(0, math.ceil(next_dt * PS_PER_S - 1e-6))

    def _solve(self, members: list[_Coflow]) -> np.ndarray:
        # adaptive-routed phases choose their minimal share by load (network/adaptive.py)
        return self.pricer.solves.solve([c.phase for c in members], self.capacity)

    @staticmethod
    def _finished(c: _Coflow) -> bool:
        """Done when (almost) no bytes are left or they would take under half a ps."""
        if c.remaining <= 1e-9 * c.initial + 1e-6:
            return True
        return c.rate > 0 and c.remaining / c.rate * PS_PER_S < 0.5

    def _check(self, comp: _Component, version: int) -> None:
        if not self.live_check(comp, version):
            return
        self._progress(comp)
        finished = self._finished
        done: list[_Coflow] = []
        keep: list[_Coflow] = []
        for c in comp.members:
            (done if finished(c) else keep).append(c)
        if not done:
            self._mark_dirty(comp)
            return
        parts = [p for p, w in self.wholes.items() if w is comp]
        if parts:  # a prover component's whole: kept until it is idle
            if keep:
                comp.members = keep
                self._mark_dirty(comp)
            else:
                self._drop(comp)
                self.owner[comp.links] = -1
                for p in parts:
                    del self.wholes[p]
        elif comp is not self.whole:
            self._split(comp, keep)
        elif keep:
            comp.members = keep
            self._mark_dirty(comp)
        else:  # idle: back to components
            self._drop(comp)
            self.owner[comp.links] = -1
            self.whole = None
        for c in done:
            self.stats.add_bytes(c.phase, c.phase.bytes_factor * c.act.nbytes, c.act.part)
            self._start_phase(c.act, c.bundle, c.plan, c.index + 1)

    # ------------------------------------------------------- state comparison
    def state(self, now: int) -> tuple[object, ...]:
        """The runtime's own state relative to `now`: components in creation order with
        their members (activations as themselves; the prover maps them)."""
        return (
            self.reprice_pending,
            tuple(
                (
                    comp is self.whole or comp in self.wholes.values(),
                    comp.last_ps - now,
                    comp.solved,
                    comp.cid in self.dirty,
                    tuple(
                        (c.act, c.bundle, c.index, c.remaining, c.initial, c.rate)
                        for c in comp.members
                    ),
                )
                for comp in self.comps.values()
            ),
        )

    def live_check(self, comp: object, version: object) -> bool:
        """Whether a scheduled ('check', component, version) event will do anything."""
        assert isinstance(comp, _Component)
        return self.comps.get(comp.cid) is comp and comp.version == version

    def check_position(self, comp: object) -> int:
        """Where a component stands among the live ones (for state comparison)."""
        assert isinstance(comp, _Component)
        return list(self.comps).index(comp.cid)

    def shift(self, delta_ps: int) -> None:
        """Move the runtime's own clock values `delta_ps` later."""
        for comp in self.comps.values():
            comp.last_ps += delta_ps

    # ------------------------------------------------ per prover component
    def part_of(self, comp: object) -> int:
        """The prover component of a network component's coflows (-2: several)."""
        assert isinstance(comp, _Component)
        parts = {c.act.part for c in comp.members}
        return parts.pop() if len(parts) == 1 else -2

    def _part_comps(self, part: int) -> list[_Component] | None:
        """The network components holding a prover component's coflows, in creation
        order; None if one of them also holds another's (their rates are shared)."""
        out = []
        for comp in self.comps.values():
            p = self.part_of(comp)
            if p == part:
                out.append(comp)
            elif p == -2 and any(c.act.part == part for c in comp.members):
                return None
        return out

    def part_state(self, part: int, now: int) -> tuple[object, ...] | None:
        """`state` restricted to one prover component's network components (None when
        it is coupled with the others, shares a network component with another, or a
        re-pricing is pending)."""
        comps = None if part in self.coupled else self._part_comps(part)
        if comps is None or self.reprice_pending:
            return None
        return tuple(
            (
                comp in self.wholes.values(),
                comp.last_ps - now,
                comp.solved,
                comp.cid in self.dirty,
                tuple(
                    (c.act, c.bundle, c.index, c.remaining, c.initial, c.rate) for c in comp.members
                ),
            )
            for comp in comps
        )

    def part_position(self, comp: object) -> int:
        """Where a component stands among its prover component's live ones."""
        assert isinstance(comp, _Component)
        part = self.part_of(comp)
        mine = [k.cid for k in self.comps.values() if self.part_of(k) == part]
        return mine.index(comp.cid)

    def shift_part(self, part: int, delta_ps: int) -> None:
        """Move one prover component's network components `delta_ps` later: their
        progress resumes then (nothing else touches them: `part_state` found them its
        own), and their checks move with them (`Prover.warp_part` moves the events)."""
        for comp in self._part_comps(part) or ():
            comp.last_ps += delta_ps


def _pattern_order(c: _Coflow) -> tuple[int, int]:
    """Coflows of one phase together, phases in creation order (not by address: the
    order of float sums over coflows must not depend on the memory layout)."""
    return c.phase.serial, c.seq


def build_network(
    model: str, env: simpy.Environment, pricer: CollectivePricer, stats: NetworkStats
) -> AlphaBetaNetwork | ContentionNetwork:
    """The runtime for a network model name ('alpha-beta' or 'contention')."""
    if model == "alpha-beta":
        return AlphaBetaNetwork(env, pricer, stats)
    if model == "contention":
        return ContentionNetwork(env, pricer, stats)
    from simulator.errors import CostModelError

    raise CostModelError(f"unknown network model '{model}' (use alpha-beta or contention)")
