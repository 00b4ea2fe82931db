"""Load-aware adaptive routing on dragonflies (UGAL-like), priced inside the max-min model.

Slingshot routes each packet minimally or through an intermediate group (Valiant) by the
queue depths it sees, so under an adversarial pattern (every ring edge between the same
two groups) traffic spills onto non-minimal paths, and under a uniform one it stays
minimal. At the granularity of the contention model a *flow bundle* (all flows of one
coflow, i.e. one phase of one bundle of group instances) has two link usages, one with
every flow on its minimal paths (spread like ecmp over the group pair's cables) and one
with every flow on its Valiant paths, and chooses the share x in [0, 1] it sends
minimally: usage(x) = x minimal + (1 - x) Valiant.

- Alone (`best_split`), a bundle takes the x that maximises its per-flow rate
  min over links of capacity / usage(x); the minimum of those ratios is a quasi-concave
  function of x, so a ternary search finds it (x = 0 and x = 1 are candidates, so the
  result is never slower than either pure policy).
- Among others (`solve`), each family of adaptive bundles (the same phase of the same
  collective, all its layout classes, one bundle per class in the symmetric mode or one
  per instance in the full mode) answers the load the others put on its links at their max-min rates
  (best response on the residual capacities), for two rounds, and the max-min
  allocation is recomputed, a family advancing as one coflow; of that allocation,
  all-minimal and all-Valiant, the one whose slowest adaptive bundle is fastest is kept.

All of it is numpy over the links a bundle uses; nothing loops over flows.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from simulator.network.maxmin import max_min_rates
from topologies.rows import link_index

SEARCH_STEPS = 48  # ternary-search iterations: (2/3)^48 ~ 4e-9 of the unit interval
ROUNDS = 2  # best-response rounds among concurrent bundles
TIE_WEIGHT = 1e-6  # weight of the fabric's own load: only breaks ties of the bottleneck


@dataclass(frozen=True, eq=False)
class SplitUsage:
    """A bundle phase's flow multiplicity per link (over the phase's `links`) with every
    flow routed minimally and with every flow routed through Valiant paths."""

    minimal: np.ndarray
    valiant: np.ndarray

    def mixture(self, x: float) -> np.ndarray:
        """Usage with a share `x` of every flow on its minimal paths."""
        return x * self.minimal + (1.0 - x) * self.valiant


class AdaptivePhase(Protocol):
    """What the solver reads of a bound phase."""

    @property
    def links(self) -> np.ndarray: ...
    @property
    def counts(self) -> np.ndarray: ...
    @property
    def split(self) -> SplitUsage | None: ...
    @property
    def split_x(self) -> float: ...
    @property
    def family(self) -> Hashable: ...


def best_split(usage: SplitUsage, capacity: np.ndarray) -> float:
    """The minimal share x maximising min(capacity / usage(x)); among shares that reach
    it (e.g. when a NIC binds whatever the fabric does), the one that loads the fabric's
    own links least, as a router steering around its busiest queues would."""
    cap = np.maximum(capacity, 1e-300)
    a = usage.valiant / cap  # load per unit rate at x = 0
    b = (usage.minimal - usage.valiant) / cap  # its change per unit x
    fabric = b != 0  # links the choice moves traffic on
    # only the lines that can be the maximum somewhere on [0, 1] matter: the search then
    # runs over a handful of links instead of every link of the phase (same values)
    top = _upper_lines(a, b)
    a_top, b_top = a[top], b[top]
    on_fabric = _upper_lines(a[fabric], b[fabric])
    a_fab, b_fab = a[fabric][on_fabric], b[fabric][on_fabric]

    def worst(x: float) -> float:
        spread = float((a_fab + b_fab * x).max()) if a_fab.size else 0.0
        return float((a_top + b_top * x).max()) + TIE_WEIGHT * spread

    lo, hi = 0.0, 1.0
    for _ in range(SEARCH_STEPS):
        m1, m2 = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        if worst(m1) < worst(m2):
            hi = m2
        else:
            lo = m1
    candidates = (1.0, 0.0, (lo + hi) / 2)
    return min(candidates, key=lambda x: worst(x) * (1 - 1e-12 * x))


def _upper_lines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Indices of the lines a + b x that are not below another line at both x = 0 and
    x = 1 (a line below another at both ends is below it on all of [0, 1], so it is never
    the maximum there): the Pareto front of (a, a + b), one sort."""
    if a.size <= 1:
        return np.arange(a.size)
    end = a + b
    # first, in O(n): a line whose highest point is below the minimum over [0, 1] of the
    # upper envelope of two lines (the highest at x = 0 and at x = 1; a lower bound of the
    # whole envelope's minimum) is never the maximum
    p, q = int(a.argmax()), int(end.argmax())
    points = [0.0, 1.0]
    if b[p] != b[q]:
        points.append(min(max((a[q] - a[p]) / (b[p] - b[q]), 0.0), 1.0))
    floor = min(max(a[p] + b[p] * x, a[q] + b[q] * x) for x in points)
    near = np.flatnonzero(np.maximum(a, end) >= floor - 1e-9 * abs(floor))
    a, end = a[near], end[near]
    order = np.lexsort((-end, -a))  # by a descending, ties by the end value descending
    ends = end[order]
    before = np.maximum.accumulate(np.concatenate([[-np.inf], ends[:-1]]))
    return near[order[ends > before]]


def _max_min(
    phases: Sequence[AdaptivePhase], usages: Sequence[np.ndarray], capacity: np.ndarray
) -> np.ndarray:
    cf = np.concatenate([np.full(ph.links.size, i, dtype=np.int64) for i, ph in enumerate(phases)])
    links = np.concatenate([ph.links for ph in phases])
    counts = np.concatenate(list(usages))
    return max_min_rates(cf, links, counts, capacity, len(phases))


def _family_usage(
    phases: Sequence[AdaptivePhase], members: list[int], num_links: int
) -> tuple[np.ndarray, SplitUsage]:
    """The union of a family's links and its summed minimal / Valiant usages."""
    links = np.concatenate([phases[i].links for i in members])
    uniq, inverse = link_index(links, num_links)
    minimal = np.zeros(uniq.shape[0])
    valiant = np.zeros(uniq.shape[0])
    at = 0
    for i in members:
        split = phases[i].split
        assert split is not None
        n = phases[i].links.size
        np.add.at(minimal, inverse[at : at + n], split.minimal)
        np.add.at(valiant, inverse[at : at + n], split.valiant)
        at += n
    return uniq, SplitUsage(minimal, valiant)


def solve(phases: Sequence[AdaptivePhase], capacity: np.ndarray) -> np.ndarray:
    """Max-min per-flow rates of concurrent bundle phases, adaptive ones choosing their
    minimal share by load (see module doc). The choice is made per family (the same
    phase of the same collective, over all its layout classes) and a family advances at
    one rate, as one coflow, so it is the same whether instances arrive as one bundle per
    layout class (symmetric mode) or one per instance (full mode): load-aware routing
    could otherwise give the classes on different rails different rates, which lockstep
    rank classes cannot follow."""
    adaptive = [i for i, ph in enumerate(phases) if ph.split is not None]
    if not adaptive:
        return _max_min(phases, [ph.counts for ph in phases], capacity)
    by_family: dict[Hashable, list[int]] = {}
    for i in adaptive:
        fam = phases[i].family
        by_family.setdefault(("coflow", i) if fam is None else fam, []).append(i)
    families = list(by_family.values())
    usage = [_family_usage(phases, members, capacity.shape[0]) for members in families]
    fixed = [i for i, ph in enumerate(phases) if ph.split is None]
    links = [u[0] for u in usage] + [phases[i].links for i in fixed]

    # the entries' coflows and links (and the links' index) do not depend on the shares:
    # built once, not once per evaluation
    cf = np.concatenate([np.full(lk.size, g, dtype=np.int64) for g, lk in enumerate(links)])
    all_links = np.concatenate(links)
    index = link_index(all_links, capacity.shape[0]) if all_links.size else None
    fixed_counts = [phases[i].counts for i in fixed]
    evaluated: dict[tuple[float, ...], np.ndarray] = {}

    def rates_at(x: list[float]) -> np.ndarray:
        """Per-phase rates with family f at minimal share x[f] (families as one coflow).

        Memoised on the shares: the best responses often settle on the pure shares
        (1.0 or 0.0) that are tried again at the end, and equal shares give equal
        rates (the same computation on the same arrays)."""
        key = tuple(x)
        got = evaluated.get(key)
        if got is not None:
            return got
        counts = [u[1].mixture(xf) for u, xf in zip(usage, x, strict=True)]
        counts += fixed_counts
        group_rates = max_min_rates(
            cf, all_links, np.concatenate(counts), capacity, len(links), index
        )
        out = np.empty(len(phases))
        for f, members in enumerate(families):
            out[members] = group_rates[f]
        out[fixed] = group_rates[len(families) :]
        evaluated[key] = out
        return out

    x = [best_split(u[1], capacity[u[0]]) for u in usage]
    rates = rates_at(x)
    for _ in range(ROUNDS):
        finite = np.where(np.isfinite(rates), rates, 0.0)
        load = np.zeros(capacity.shape[0])
        for f, members in enumerate(families):
            np.add.at(load, usage[f][0], finite[members[0]] * usage[f][1].mixture(x[f]))
        for i in fixed:
            np.add.at(load, phases[i].links, finite[i] * phases[i].counts)
        for f, (lk, split) in enumerate(usage):
            other = load[lk] - finite[families[f][0]] * split.mixture(x[f])
            cap = capacity[lk]
            x[f] = best_split(split, np.maximum(cap - other, 1e-6 * cap))
        rates = rates_at(x)

    def slowest(r: np.ndarray) -> float:
        return float(r[adaptive].min())

    best = rates
    for pure in (1.0, 0.0):
        alt = rates_at([pure] * len(families))
        if slowest(alt) > slowest(best) * (1 + 1e-9):
            best = alt
    return best


class SolveMemo:
    """`solve`, memoised on what it reads of its phases (links, counts or adaptive split,
    and which adaptive phases share a family) and the capacity, by object identity.

    Why: different bound phases share their usage arrays (a phase bound for the tuner and
    for the run, a ring of 15 steps and of 30 reuse one cached usage), so the runtime and
    the tuner solve the same components again (a third of the solves of GPT-320B on
    32,768 Frontier GCDs). Each entry holds the objects of its key, so no id in it can be
    reused by another object while it is cached; equal inputs give the same computation,
    hence the same rates. The rates returned are read-only (shared between hits).
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[object, ...], tuple[list[object], np.ndarray]] = {}

    def solve(self, phases: Sequence[AdaptivePhase], capacity: np.ndarray) -> np.ndarray:
        families: dict[Hashable, int] = {}
        held: list[object] = [capacity]
        key: list[object] = [id(capacity)]
        for i, ph in enumerate(phases):
            if ph.split is None:
                held += (ph.links, ph.counts)
                key.append((id(ph.links), id(ph.counts), None))
            else:
                fam = ("coflow", i) if ph.family is None else ph.family
                held += (ph.links, ph.split)
                key.append((id(ph.links), id(ph.split), families.setdefault(fam, len(families))))
        k = tuple(key)
        got = self._entries.get(k)
        if got is None:
            rates = solve(phases, capacity)
            rates.flags.writeable = False
            got = self._entries[k] = (held, rates)
        return got[1]
