"""Search each strategy's configurations and compare the strategies' best runs.

For each strategy: enumerate its memory-feasible configurations
(simulator/strategy_candidates.py), simulate the first `max_candidates` of them in
symmetric mode, keep the fastest, and compute the largest batch its degrees fit.
Everything `axsim compare-strategies` prints comes from `compare_strategies(...)`.

    from simulator.strategy_search import compare_strategies
    outcomes = compare_strategies("dgx-h100", 64, "llama2-7b", ["fsdp", "fsdp-tp"])
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any

from simulator.api import Result, simulate
from simulator.build import build_topology
from simulator.config import ExperimentConfig, default_config_mapping, validate_config
from simulator.errors import SimulatorError
from simulator.plan import cluster_shape, training_setup
from simulator.strategy_candidates import Candidate, strategy_candidates
from simulator.strategy_plans import plan_max_batch_sequences
from topologies.errors import TopologyError
from topologies.hardware import gpu_spec
from workloads.errors import WorkloadError
from workloads.strategies import STRATEGY_NAMES

DEFAULT_STRATEGIES = ("axonn", "megatron", "zero3", "zeropp", "fsdp-tp", "fsdp-pp", "optimus")
DEFAULT_MAX_CANDIDATES = 4

Progress = Callable[[str, int, int], None]
"""progress(strategy, candidates simulated, candidates to simulate)."""


@dataclass
class StrategyOutcome:
    """The best configuration found for one strategy (or why there is none)."""

    strategy: str
    result: Result | None = None
    candidate: Candidate | None = None
    max_batch_sequences: int = 0
    feasible: int = 0
    tried: list[tuple[Candidate, float]] = field(default_factory=list)
    note: str | None = None
    wall_time_s: float = 0.0

    @property
    def config(self) -> dict[str, Any] | None:
        """The strategy's parameters that won, with the microbatch size."""
        if self.candidate is None:
            return None
        return {
            **self.candidate.parallel,
            "microbatch_sequences": self.candidate.microbatch_sequences,
        }


def base_mapping(
    machine: str,
    gpus: int,
    model: str,
    batch_tokens: int | None = None,
    network: str | None = None,
) -> dict[str, Any]:
    """The raw config every candidate starts from (the embedded default's training and
    engine sections, symmetric engine mode)."""
    data = default_config_mapping()
    data["cluster"] = {"machine": machine, "gpus": gpus}
    data["model"] = {"name": model}
    data["engine"] = {**data.get("engine", {}), "mode": "symmetric"}
    if network:
        data["engine"]["network"] = network
    if batch_tokens is not None:
        data["training"] = {**data.get("training", {}), "batch_tokens": batch_tokens}
    return data


def candidate_config(base: dict[str, Any], cand: Candidate) -> ExperimentConfig:
    """The experiment config of one candidate."""
    data = deepcopy(base)
    data["parallel"] = dict(cand.parallel)
    data["training"] = {
        **data.get("training", {}),
        "microbatch_sequences": cand.microbatch_sequences,
    }
    return validate_config(data)


def search_strategy(
    strategy: str,
    base: dict[str, Any],
    *,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    progress: Progress | None = None,
) -> StrategyOutcome:
    """Simulate up to `max_candidates` feasible configurations of `strategy`; keep the
    fastest. Invalid strategies for the machine become a note, not an error."""
    t0 = time.perf_counter()
    out = StrategyOutcome(strategy)
    try:
        probe = validate_config({**base, "parallel": {"strategy": strategy}})
        topology = build_topology(probe.cluster)
        gpu = gpu_spec(probe.cluster.gpu or topology.gpu_type)
        cands = strategy_candidates(
            strategy, probe, training_setup(probe), cluster_shape(probe, topology, gpu), gpu
        )
    except (WorkloadError, SimulatorError, TopologyError) as e:
        out.note = str(e)
        out.wall_time_s = time.perf_counter() - t0
        return out
    out.feasible = len(cands)
    if not cands:
        out.note = "no configuration fits in GPU memory"
    todo = cands[:max_candidates]
    for i, cand in enumerate(todo):
        if progress is not None:
            progress(strategy, i, len(todo))
        try:
            res = simulate(candidate_config(base, cand))
        except (WorkloadError, SimulatorError, TopologyError) as e:
            out.note = out.note or f"candidate {cand.parallel} failed: {e}"
            continue
        t = res.report.iteration_time_s
        out.tried.append((cand, t))
        if out.result is None or t < out.result.report.iteration_time_s:
            out.result, out.candidate = res, cand
    if progress is not None:
        progress(strategy, len(todo), len(todo))
    if out.result is not None:
        r = out.result
        out.max_batch_sequences = plan_max_batch_sequences(r.config, r.plan, r.topology, gpu)
        out.note = None
    out.wall_time_s = time.perf_counter() - t0
    return out


def compare_strategies(
    machine: str,
    gpus: int,
    model: str,
    strategies: Sequence[str] = DEFAULT_STRATEGIES,
    *,
    batch_tokens: int | None = None,
    network: str | None = None,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    progress: Progress | None = None,
) -> list[StrategyOutcome]:
    """Search every strategy on one machine, GPU count and model (same global batch)."""
    base = base_mapping(machine, gpus, model, batch_tokens, network)
    return compare_from_mapping(base, strategies, max_candidates=max_candidates, progress=progress)


def config_base(config: ExperimentConfig) -> dict[str, Any]:
    """The raw mapping every candidate of `config` starts from: its cluster, model,
    training and engine sections (a chosen microbatch and the parallel section are the
    candidates'), in symmetric mode where the config leaves the mode to axsim."""
    data = config.model_dump(mode="json", exclude_none=True)
    data.pop("parallel", None)
    data["training"].pop("microbatch_sequences", None)
    if data["engine"].get("mode") == "auto":
        data["engine"]["mode"] = "symmetric"
    return data


def compare_from_mapping(
    base: dict[str, Any],
    strategies: Sequence[str] = DEFAULT_STRATEGIES,
    *,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    progress: Progress | None = None,
) -> list[StrategyOutcome]:
    """Search every strategy from one raw base config (no parallel section)."""
    unknown = [s for s in strategies if s not in STRATEGY_NAMES]
    if unknown:
        raise WorkloadError(
            f"--strategies: unknown strategy '{unknown[0]}' (known: {', '.join(STRATEGY_NAMES)})"
        )
    # machine, GPU count, model and batch problems fail here, once
    validate_config({**base, "parallel": base.get("parallel") or {"strategy": "axonn"}})
    return [
        search_strategy(s, base, max_candidates=max_candidates, progress=progress)
        for s in strategies
    ]


def speedups(outcomes: Sequence[StrategyOutcome]) -> list[float | None]:
    """Iteration-time speedup of each strategy over the first one that ran (same batch,
    so also the throughput ratio); None for strategies without a result."""
    ref = next((o.result.report.iteration_time_s for o in outcomes if o.result), None)
    return [
        None if o.result is None or ref is None else ref / o.result.report.iteration_time_s
        for o in outcomes
    ]


def outcomes_json(outcomes: Sequence[StrategyOutcome]) -> list[dict[str, Any]]:
    """The `--json` contract: one object per strategy with `strategy`, `config`,
    `max_batch_sequences`, `speedup_vs_first` and every key of the simulate report
    (skipped strategies carry `skipped` with the reason instead of the report)."""
    out = []
    for o, sp in zip(outcomes, speedups(outcomes), strict=True):
        entry: dict[str, Any] = {}
        if o.result is not None:
            entry.update(o.result.report.to_json())
        entry.update(
            strategy=o.strategy,
            config=o.config,
            max_batch_sequences=o.max_batch_sequences,
            speedup_vs_first=sp,
            candidates_feasible=o.feasible,
            candidates_simulated=len(o.tried),
            search_wall_time_s=o.wall_time_s,
        )
        if o.result is None:
            entry["skipped"] = o.note or "no result"
        out.append(entry)
    return out
