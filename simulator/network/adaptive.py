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
- Among others (`solve`), each adaptive bundle answers the load the others put on its
  links at their max-min rates (best response on the residual capacities), for two
  rounds, and the max-min allocation is recomputed; of that allocation, all-minimal and
  all-Valiant, the one whose slowest adaptive bundle is fastest is kept.

All of it is numpy over the links a bundle uses; nothing loops over flows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from simulator.network.maxmin import max_min_rates

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


def best_split(usage: SplitUsage, capacity: np.ndarray) -> float:
    """The minimal share x maximising min(capacity / usage(x)); among shares that reach
    it (e.g. when a NIC binds whatever the fabric does), the one that loads the fabric's
    own links least, as a router steering around its busiest queues would."""
    cap = np.maximum(capacity, 1e-300)
    a = usage.valiant / cap  # load per unit rate at x = 0
    b = (usage.minimal - usage.valiant) / cap  # its change per unit x
    fabric = b != 0  # links the choice moves traffic on

    def worst(x: float) -> float:
        load = a + b * x
        spread = float(load[fabric].max()) if fabric.any() else 0.0
        return float(load.max()) + TIE_WEIGHT * spread

    lo, hi = 0.0, 1.0
    for _ in range(SEARCH_STEPS):
        m1, m2 = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        if worst(m1) < worst(m2):
            hi = m2
        else:
            lo = m1
    candidates = (1.0, 0.0, (lo + hi) / 2)
    return min(candidates, key=lambda x: worst(x) * (1 - 1e-12 * x))


def _max_min(
    phases: Sequence[AdaptivePhase], usages: Sequence[np.ndarray], capacity: np.ndarray
) -> np.ndarray:
    cf = np.concatenate([np.full(ph.links.size, i, dtype=np.int64) for i, ph in enumerate(phases)])
    links = np.concatenate([ph.links for ph in phases])
    counts = np.concatenate(list(usages))
    return max_min_rates(cf, links, counts, capacity, len(phases))


def solve(phases: Sequence[AdaptivePhase], capacity: np.ndarray) -> np.ndarray:
    """Max-min per-flow rates of concurrent bundle phases, adaptive ones choosing their
    minimal share by load (see module doc)."""
    adaptive = [i for i, ph in enumerate(phases) if ph.split is not None]
    fixed = [ph.counts for ph in phases]
    if not adaptive:
        return _max_min(phases, fixed, capacity)
    x = {i: phases[i].split_x for i in adaptive}

    def usages(share: dict[int, float]) -> list[np.ndarray]:
        out = list(fixed)
        for i, xi in share.items():
            split = phases[i].split
            assert split is not None
            out[i] = split.mixture(xi)
        return out

    rates = _max_min(phases, usages(x), capacity)
    for _ in range(ROUNDS):
        use = usages(x)
        finite = np.where(np.isfinite(rates), rates, 0.0)
        load = np.zeros(capacity.shape[0])
        for i, ph in enumerate(phases):
            np.add.at(load, ph.links, finite[i] * use[i])
        for i in adaptive:
            ph = phases[i]
            split = ph.split
            assert split is not None
            other = load[ph.links] - finite[i] * use[i]
            cap = capacity[ph.links]
            x[i] = best_split(split, np.maximum(cap - other, 1e-6 * cap))
        rates = _max_min(phases, usages(x), capacity)

    def slowest(r: np.ndarray) -> float:
        return float(r[adaptive].min())

    best = rates
    for pure in (1.0, 0.0):
        alt = _max_min(phases, usages(dict.fromkeys(adaptive, pure)), capacity)
        if slowest(alt) > slowest(best) * (1 + 1e-9):
            best = alt
    return best
