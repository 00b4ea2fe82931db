"""Max-min fair sharing of link bandwidth among coflows (weighted progressive filling).

A coflow is the set of flows of one phase of a collective bundle; its flows advance at one
common rate r (bytes/s per flow), because ring-like steps are synchronous and the slowest
flow sets the pace. Coflow f puts `count[f, l]` flows on link l, so link l is feasible when
sum_f count[f, l] * r_f <= capacity_l. Progressive filling raises every unfrozen coflow's
rate together until some link saturates, freezes the coflows crossing it, and repeats: the
result is the max-min fair allocation. Vectorised with numpy over links; the number of
iterations is the number of distinct bottleneck levels (a handful for real patterns).

Sums of counts are exact for integer and dyadic route weights, so an allocation computed
over many per-instance coflows equals the one computed over their aggregate bundle.
"""

from __future__ import annotations

import numpy as np

from topologies.rows import link_index

REL_TOL = 1e-12


def max_min_rates(
    coflow: np.ndarray,
    link: np.ndarray,
    count: np.ndarray,
    capacity: np.ndarray,
    num_coflows: int,
    index: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Max-min fair per-flow rate of each coflow.

    Parameters
    ----------
    coflow, link, count: one entry per (coflow, link) pair: the coflow's flow multiplicity
        on the link (entries for the same pair are summed).
    capacity: bandwidth of every link id (B/s), indexed by `link`.
    num_coflows: number of coflows (coflows without entries get rate inf).
    index: `link_index(link, capacity.shape[0])` if the caller has it already (a solver
        that re-solves the same entries with other counts): it is a function of `link`
        alone, so passing it changes nothing but the work.
    """
    rates = np.zeros(num_coflows, dtype=np.float64)
    if coflow.size == 0:
        rates[:] = np.inf
        return rates
    links_u, link_idx = link_index(link, capacity.shape[0]) if index is None else index
    cap0 = capacity[links_u].astype(np.float64)
    cap = cap0.copy()
    has_links = np.zeros(num_coflows, dtype=bool)
    has_links[coflow] = True
    frozen = ~has_links
    rates[~has_links] = np.inf
    nlinks = links_u.shape[0]
    # the entries of unfrozen coflows, dropped as their coflows freeze (kept in order, so
    # every load is the same sum in the same order as over all entries masked)
    cf, li, ct = coflow, link_idx, count
    while not frozen.all():
        live = ~frozen[cf]
        if not live.all():
            cf, li, ct = cf[live], li[live], ct[live]
        load = np.bincount(li, weights=ct, minlength=nlinks)
        used = load > 0
        if not used.any():
            break
        inc = float((cap[used] / load[used]).min())
        rates[~frozen] += inc
        cap -= inc * load
        saturated = used & (cap <= REL_TOL * cap0)
        frozen[cf[saturated[li]]] = True
    return rates
