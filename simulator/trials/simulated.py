"""The search's last stage: the best candidates simulated, the fastest chosen.

In trials/, apart from the ranking (simulator/search/grids.py), because it runs whole
simulations through the API, while `simulate` itself uses the ranking to pick a grid when
the config gives none: keeping the two in different rooms keeps the imports one-way.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, replace

from simulator.api import Result, simulate
from simulator.config import ExperimentConfig
from simulator.errors import ConfigError
from simulator.search.grids import (
    DEFAULT_SCREEN,
    Candidate,
    bandwidth_provider,
    priced_comm,
    rank_grids,
    screen_candidates,
    search_training,
)
from workloads.axonn.params import AxonnParallel


def simulate_candidates(
    config: ExperimentConfig,
    candidates: list[Candidate],
    top: int,
    on_done: Callable[[int, int], None] | None = None,
) -> tuple[list[Candidate], Result | None]:
    """Simulate the first `top` candidates; returns all candidates (simulated ranks set)
    and the Result of the best simulated one."""
    base = config.parallel
    assert isinstance(base, AxonnParallel)
    chosen = candidates[:top]
    times: list[float] = []
    best: Result | None = None
    for i, c in enumerate(chosen):
        cfg = config.model_copy(
            update={
                "parallel": c.params(base),
                "training": config.training.model_copy(
                    update={"microbatch_sequences": c.microbatch_sequences}
                ),
            }
        )
        result = simulate(cfg)
        t = result.report.iteration_time_s
        times.append(t)
        # only the fastest so far is kept: the others' state (topology, engine, network
        # caches) is freed before the next candidate, so the search's memory is that of
        # its largest simulation plus one result (1.18 GB for 10 candidates at 32,768
        # GCDs when every result stayed alive)
        if best is None or t < best.report.iteration_time_s:
            best = result
        del result
        gc.collect()  # a result's engine holds reference cycles (launches, activations)
        if on_done:
            on_done(i + 1, len(chosen))
    order = sorted(range(len(chosen)), key=lambda i: times[i])
    sim_rank = {i: r + 1 for r, i in enumerate(order)}
    updated = [
        replace(c, simulated_iteration_time_s=times[i], simulated_rank=sim_rank[i])
        if i < len(chosen)
        else c
        for i, c in enumerate(candidates)
    ]
    return updated, best


@dataclass(frozen=True)
class SearchOutcome:
    """What a search did: every candidate in its final order, and the best simulation."""

    candidates: list[Candidate]
    best: Result | None
    bandwidths: str
    screened: int

    @property
    def best_candidate(self) -> Candidate | None:
        done = [c for c in self.candidates if c.simulated_rank == 1]
        return done[0] if done else None


def search(
    config: ExperimentConfig,
    top: int = 10,
    screen: int = DEFAULT_SCREEN,
    bandwidths: str = "topology",
    on_done: Callable[[int, int], None] | None = None,
) -> SearchOutcome:
    """`axsim search`: rank, screen, simulate (see the module docstring)."""
    from topologies.hardware import gpu_spec

    params = config.parallel
    if not isinstance(params, AxonnParallel):
        raise ConfigError(
            f"parallel.strategy: axsim search ranks AxoNN grids, not {params.strategy}; "
            "use axsim compare-strategies for the other strategies"
        )
    n = config.cluster.num_gpus
    if n is None:
        raise ConfigError("axsim search needs a machine preset with a GPU count")
    gpu = gpu_spec(config.cluster.gpu_type)
    bw = bandwidth_provider(config, bandwidths, config.cluster.gpus_per_node)
    ranked = rank_grids(config.model.spec(), params, search_training(config), n, gpu, bw)
    if not ranked:
        raise ConfigError(
            f"no valid, memory-feasible AxoNN grid for {config.model.name} on {n} GPUs"
        )
    # the priced screen's collective pricer (a machine-sized topology and its caches) is
    # dropped before the simulations: held, it doubled the 32,768-GCD search's peak
    priced = priced_comm(config) if bandwidths == "topology" and screen > 0 else None
    screened = screen_candidates(config, ranked, max(screen, 0), bw, gpu, priced)
    del priced
    done, best = simulate_candidates(config, screened, top, on_done)
    return SearchOutcome(done, best, bandwidths, min(max(screen, 0), len(ranked)))
