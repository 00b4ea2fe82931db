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

import numpy as np
import simpy

from simulator.engine.compiled import PS_PER_S, to_ps
from simulator.network.maxmin import max_min_rates
from simulator.network.pricing import BoundPhase, Bundle, CollectivePricer, PhasePlan
from workloads.ops import CollectiveKind

LATE = 2  # simpy priority after NORMAL (1): runs after all other events of an instant

Tag = tuple[object, ...] | None
"""What a scheduled event does, for state comparison: ('begin', act), ('phase', act,
bundle, index), ('stage', act, bundle, index), ('reprice',), ('check', version),
('done', act); None for observers that change nothing."""


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
    return [(t, p, getattr(ev, "tag", None)) for t, p, _, ev in sorted(queue, key=_order)]


def _order(entry: tuple[int, int, int, object]) -> tuple[int, int, int]:
    return entry[0], entry[1], entry[2]


def shift_clock(env: simpy.Environment, delta_ps: int) -> None:
    """Move the simulated clock and every scheduled event `delta_ps` later (a uniform
    shift keeps simpy's heap order)."""
    env._queue[:] = [(t + delta_ps, p, e, ev) for t, p, e, ev in env._queue]
    env._now = env._now + delta_ps


@dataclass(eq=False)
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


@dataclass
class NetworkStats:
    """Counters for reports and benchmarks."""

    activations: int = 0
    reprices: int = 0
    rate_cache_hits: int = 0
    simpy_events: int = 0
    phase_bytes: dict[int, tuple[BoundPhase, float]] = field(default_factory=dict)

    def add_bytes(self, phase: BoundPhase, per_flow_bytes: float) -> None:
        key = id(phase)
        prev = self.phase_bytes.get(key)
        self.phase_bytes[key] = (phase, per_flow_bytes + (prev[1] if prev else 0.0))

    def link_bytes(self, num_links: int) -> np.ndarray:
        out = np.zeros(num_links)
        for phase, total in self.phase_bytes.values():
            np.add.at(out, phase.links, phase.counts * total)
        return out

    def snapshot(self) -> dict[int, float]:
        return {k: v[1] for k, v in self.phase_bytes.items()}

    def repeat_since(self, snap: dict[int, float], times: int) -> None:
        """Add `times` more copies of the bytes moved since `snap` (skipped periods)."""
        for k, (phase, total) in list(self.phase_bytes.items()):
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

    def submit(self, act: Activation, start_ps: int) -> None:
        act.start_ps = start_ps
        bundles = self.pricer.bundles(
            act.kind, act.instances, act.nbytes, act.root, act.algorithm, act.key
        )
        seconds = 0.0
        for b in bundles:
            seconds = max(seconds, self.pricer.alpha_beta_time_s(b, act.nbytes, act.kind))
            for ph in b.phases:
                self.stats.add_bytes(ph, ph.bytes_factor * act.nbytes)
        end = start_ps + to_ps(seconds)
        self.stats.activations += 1
        self.stats.simpy_events += 1
        env = self.env
        call_at(env, end - int(env.now), lambda: act.on_done(int(env.now)), tag=("done", act))

    def state(self, now: int) -> tuple[object, ...]:
        """Nothing beyond the scheduled events (their tags hold the activations)."""
        return ()

    def shift(self, delta_ps: int) -> None:
        """Move the runtime's own clock values `delta_ps` later (none here)."""


@dataclass(eq=False)
class _Coflow:
    act: Activation
    bundle: int  # index into act.bundles
    plan: PhasePlan
    index: int  # phase index in the bundle
    phase: BoundPhase
    remaining: float  # bytes per flow still to move
    initial: float
    rate: float = 0.0


class ContentionNetwork:
    """Max-min fair sharing among all concurrently active bundle phases."""

    name = "contention"

    def __init__(self, env: simpy.Environment, pricer: CollectivePricer, stats: NetworkStats):
        self.env = env
        self.pricer = pricer
        self.stats = stats
        self.capacity = pricer.bandwidth_Bps
        self.active: list[_Coflow] = []
        self.last_ps = 0
        self.version = 0
        self.reprice_pending = False
        self._rate_cache: dict[tuple[int, ...], np.ndarray] = {}

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
        act.bundles = self.pricer.bundles(
            act.kind, act.instances, act.nbytes, act.root, act.algorithm, act.key
        )
        act.open_bundles = len(act.bundles)
        if not act.bundles:
            act.on_done(int(self.env.now))
            return
        for bi, b in enumerate(act.bundles):
            plan = self.pricer.plan(b, act.kind, act.nbytes, shared=True)
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
        phase = bundle.phases[index]
        per_flow = plan.bytes_per_flow[index]
        delay = to_ps(plan.latency_s[index] + extra_s)

        def go() -> None:
            if per_flow <= 0 or phase.links.size == 0:
                self._start_phase(act, bi, plan, index + 1)
                return
            self._advance_progress()
            self.active.append(_Coflow(act, bi, plan, index, phase, per_flow, per_flow))
            self._mark_dirty()

        if delay > 0:
            self._after(delay, go, tag=("phase", act, bi, index))
        else:
            go()

    # --------------------------------------------------------------- sharing
    def _mark_dirty(self) -> None:
        self.version += 1
        if not self.reprice_pending:
            self.reprice_pending = True
            self._after(0, self._reprice, LATE, tag=("reprice",))

    def _advance_progress(self) -> None:
        now = int(self.env.now)
        dt = now - self.last_ps
        if dt > 0:
            secs = dt / PS_PER_S
            for c in self.active:
                c.remaining -= c.rate * secs
        self.last_ps = now

    def _reprice(self) -> None:
        self.reprice_pending = False
        self._advance_progress()
        if not self.active:
            return
        self.active.sort(key=lambda c: id(c.phase))
        key = tuple(id(c.phase) for c in self.active)
        rates = self._rate_cache.get(key)
        if rates is None:
            rates = self._solve()
            self._rate_cache[key] = rates
        else:
            self.stats.rate_cache_hits += 1
        self.stats.reprices += 1
        next_dt: float = math.inf
        for c, r in zip(self.active, rates.tolist(), strict=True):
            c.rate = r
            if r > 0:
                next_dt = min(next_dt, c.remaining / r)
        if next_dt is math.inf:
            return
        dt_ps = max(0, math.ceil(next_dt * PS_PER_S - 1e-6))
        version = self.version
        self._after(dt_ps, lambda: self._check(version), tag=("check", version))

    def _solve(self) -> np.ndarray:
        cf = np.concatenate(
            [np.full(c.phase.links.size, i, dtype=np.int64) for i, c in enumerate(self.active)]
        )
        links = np.concatenate([c.phase.links for c in self.active])
        counts = np.concatenate([c.phase.counts for c in self.active])
        return max_min_rates(cf, links, counts, self.capacity, len(self.active))

    @staticmethod
    def _finished(c: _Coflow) -> bool:
        """Done when (almost) no bytes are left or they would take under half a ps."""
        if c.remaining <= 1e-9 * c.initial + 1e-6:
            return True
        return c.rate > 0 and c.remaining / c.rate * PS_PER_S < 0.5

    def _check(self, version: int) -> None:
        if version != self.version:
            return
        self._advance_progress()
        finished = [self._finished(c) for c in self.active]
        done = [c for c, f in zip(self.active, finished, strict=True) if f]
        if not done:
            self._mark_dirty()
            return
        self.active = [c for c, f in zip(self.active, finished, strict=True) if not f]
        self._mark_dirty()
        for c in done:
            self.stats.add_bytes(c.phase, c.phase.bytes_factor * c.act.nbytes)
            self._start_phase(c.act, c.bundle, c.plan, c.index + 1)

    # ------------------------------------------------------- state comparison
    def state(self, now: int) -> tuple[object, ...]:
        """The runtime's own state relative to `now` (activations as themselves; the
        prover maps them to what they stand for)."""
        return (
            self.last_ps - now,
            self.reprice_pending,
            tuple((c.act, c.bundle, c.index, c.remaining, c.initial, c.rate) for c in self.active),
        )

    def live_check(self, version: int) -> bool:
        """Whether a scheduled ('check', version) event will do anything."""
        return version == self.version

    def shift(self, delta_ps: int) -> None:
        """Move the runtime's own clock values `delta_ps` later."""
        self.last_ps += delta_ps


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
