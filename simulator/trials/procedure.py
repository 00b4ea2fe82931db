"""The paper's procedure run end to end: the published model's top K simulated, the
fastest kept (simulator/search/published.py has the ranking and its sources).

In trials/, apart from the ranking, because it simulates through the API (as
simulator/trials/simulated.py does); `axsim search --procedure paper` and `axsim validate`'s AxoNN cases
call it. A grid of the top K that does not fit in memory in axsim's model is reported and
not simulated (the authors could not have run it either).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from simulator.config import ExperimentConfig
from simulator.errors import ConfigError
from simulator.search.grids import Candidate, bandwidth_provider, feasible_candidate
from simulator.search.published import min_tensor_for, published_ranking
from simulator.trials.simulated import SearchOutcome, simulate_candidates
from workloads.axonn.params import AxonnParallel

PAPER_TOP = 10  # the paper takes the best measured of the model's top 10 (§V-B)


def paper_candidates(config: ExperimentConfig, top: int = PAPER_TOP) -> list[Candidate]:
    """The published model's top `top` grids that fit, in its order (model_rank is the
    rank in the published order; model_comm_time_s its modelled seconds)."""
    from simulator.plan import training_setup
    from topologies.hardware import gpu_spec
    from workloads.run import batch_sequences

    params = config.parallel
    if not isinstance(params, AxonnParallel):
        raise ConfigError(
            f"parallel.strategy: the paper's procedure ranks AxoNN grids, not {params.strategy}"
        )
    machine = config.cluster.machine
    n = config.cluster.num_gpus
    if n is None:
        raise ConfigError("the paper's procedure needs a machine preset with a GPU count")
    spec, training = config.model.spec(), training_setup(config)
    ranked = published_ranking(
        machine,
        n,
        spec.layers,
        spec.hidden,
        batch_sequences(spec, training),
        spec.seq_len,
        min_tensor_for(config.model.name),
    )
    gpu = gpu_spec(config.cluster.gpu_type)
    bw = bandwidth_provider(config, "paper", config.cluster.gpus_per_node)
    out: list[Candidate] = []
    for r in ranked[:top]:
        c = feasible_candidate(spec, r.grid, params, training, gpu, bw)
        if c is not None:
            out.append(replace(c, model_rank=r.rank, model_comm_time_s=r.comm_time_s))
    return out


def paper_procedure(
    config: ExperimentConfig,
    top: int = PAPER_TOP,
    on_done: Callable[[int, int], None] | None = None,
) -> SearchOutcome:
    """Simulate the published model's top `top` grids (those that fit); the fastest wins."""
    candidates = paper_candidates(config, top)
    if not candidates:
        raise ConfigError(
            f"none of the published model's top {top} grids for {config.model.name} on "
            f"{config.cluster.num_gpus} GPUs fits in memory"
        )
    done, best = simulate_candidates(config, candidates, len(candidates), on_done)
    return SearchOutcome(done, best, "paper", 0)
