"""`axsim simulate` without a grid: the static choice's best few simulated, the fastest kept.

Why simulate more than one: the static replay (simulator/search/estimate.py) ranks grids
well where its collective prices hold, but a single estimate is one model's opinion; a
grid whose collectives collide or latency piles up in ways the isolated price misses
would otherwise be chosen blind (it once chose a grid that simulated 7x slower than the
search's best on 32,768 Frontier GCDs). Simulating the top `DEFAULT_SIMULATED` of the
replay's order and keeping the fastest costs a few simulations and bounds such a miss by
the best of them; the report's grid choice lists each one's estimate and simulated time,
so a user sees why the grid won.

In trials/, apart from the static choice simulator/workload.py makes through search/
(which `simulate` itself uses, without the API), because it runs whole simulations
through the API, like simulator/trials/simulated.py.
"""

from __future__ import annotations

from collections.abc import Callable

from simulator.api import Result, simulate
from simulator.config import ExperimentConfig
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

DEFAULT_SIMULATED = 3  # the replay's best few simulated by `axsim simulate` without a grid


def chooses_grid(config: ExperimentConfig) -> bool:
    """Whether `simulate` would choose an AxoNN grid for this config (none given, a
    machine preset to measure bandwidths on)."""
    p = config.parallel
    return (
        isinstance(p, AxonnParallel)
        and p.grid is None
        and config.cluster.machine != "custom"
        and config.cluster.num_gpus is not None
    )


def _config_for(config: ExperimentConfig, c: Candidate) -> ExperimentConfig:
    base = config.parallel
    assert isinstance(base, AxonnParallel)
    return config.model_copy(
        update={
            "parallel": c.params(base),
            "training": config.training.model_copy(
                update={"microbatch_sequences": c.microbatch_sequences}
            ),
        }
    )


def simulate_best_of(
    config: ExperimentConfig,
    top: int = DEFAULT_SIMULATED,
    progress: Callable[..., None] | None = None,
) -> Result:
    """Simulate the static choice's `top` best grids and return the fastest one's Result,
    its grid choice explained by every simulated candidate's estimate and time. Configs
    that fix the grid (or cannot be ranked) are simulated as they are."""
    from topologies.hardware import gpu_spec

    if not chooses_grid(config) or top <= 1:
        return simulate(config, progress=progress)
    params = config.parallel
    assert isinstance(params, AxonnParallel)
    n = config.cluster.num_gpus
    assert n is not None
    gpu = gpu_spec(config.cluster.gpu_type)
    bw = bandwidth_provider(config, "topology", config.cluster.gpus_per_node)
    ranked = rank_grids(config.model.spec(), params, search_training(config), n, gpu, bw)
    if not ranked:
        return simulate(config, progress=progress)
    screened = screen_candidates(config, ranked, DEFAULT_SCREEN, bw, gpu, priced_comm(config))
    best: Result | None = None
    tried: list[tuple[Candidate, float]] = []
    for c in screened[:top]:
        result = simulate(_config_for(config, c), progress=progress)
        t = result.report.iteration_time_s
        tried.append((c, t))
        if best is None or t < best.report.iteration_time_s:
            best = result  # the others are dropped: one Result held at a time
    assert best is not None
    _explain(best, tried, len(ranked), min(DEFAULT_SCREEN, len(ranked)), params.weight_lifetime)
    return best


def _explain(
    best: Result,
    tried: list[tuple[Candidate, float]],
    valid: int,
    replayed: int,
    lifetime: str | None,
) -> None:
    """Put the best run's grid choice first with why it won: every simulated candidate's
    estimated and simulated time (the others were simulated and discarded); and, where
    the config left the weight lifetime open, that it was searched with the grid."""
    order = sorted(tried, key=lambda ct: ct[1])
    winner, _ = order[0]

    def line(c: Candidate, t: float) -> str:
        est = c.estimated_iteration_time_s
        return f"{c.label} simulated {t:.2f} s" + (f" (estimated {est:.2f} s)" if est else "")

    why = (
        f"the fastest simulated of the static replay's best {len(tried)} "
        f"({replayed} of {valid} valid, memory-feasible grids replayed, every collective "
        f"priced by axsim's collective model at its group's real size): "
        + "; ".join(line(c, t) for c, t in order)
    )
    choices = [c for c in best.report.choices if c.get("what") != "grid"]
    head = [{"what": "grid", "value": str(winner.grid), "reason": why}]
    if lifetime is None:
        cached = winner.cached_layers or 0
        head.append(
            {
                "what": "weight lifetime",
                "value": f"cache {cached} layer{'s' if cached != 1 else ''}"
                if cached
                else "the implementation's own",
                "reason": "searched with the grid under the memory limit",
            }
        )
    best.report.choices[:] = head + choices
