"""Search each strategy's configurations and compare the strategies' best runs.

For each strategy: enumerate its memory-feasible configurations
(simulator/search/candidates.py), simulate the first `max_candidates` of them in
symmetric mode, keep the fastest, and compute the largest batch its degrees fit.
Everything `axsim compare-strategies` prints comes from `compare_strategies(...)`.

All strategies run one global batch: when the requested one does not split evenly for
some strategy, the nearest batch every strategy accepts is used instead and each outcome
carries the note saying so (simulator/search/batches.py). Two strategies whose best
configurations are the same program (ZeRO++ and a hierarchical ZeRO++ assignment equal
to it) are reported as such, not as two results.

    from simulator.trials.strategies import compare_strategies
    outcomes = compare_strategies("dgx-h100", 64, "llama2-7b", ["fsdp", "fsdp-tp"])
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from copy import deepcopy
from dataclasses import dataclass, field, replace
from typing import Any

from simulator.api import Result, simulate
from simulator.build import build_topology
from simulator.config import ExperimentConfig, default_config_mapping, validate_config
from simulator.errors import SimulatorError
from simulator.outputs.report import Report
from simulator.plan import cluster_shape, training_setup
from simulator.search.batches import BatchChoice, batch_granularities, choose_batch
from simulator.search.candidates import Candidate, strategy_candidates
from simulator.search.plans import plan_max_batch_sequences, resolve_hybrid
from topologies.errors import TopologyError
from topologies.hardware import gpu_spec
from workloads.errors import WorkloadError
from workloads.hybrid.params import HybridParallel
from workloads.strategies import STRATEGY_NAMES

DEFAULT_STRATEGIES = ("axonn", "megatron", "zero3", "zeropp", "fsdp-tp", "fsdp-pp", "optimus")
DEFAULT_MAX_CANDIDATES = 4

Progress = Callable[[str, int, int], None]
"""progress(strategy, candidates simulated, candidates to simulate)."""


@dataclass
class StrategyOutcome:
    """The best configuration found for one strategy (or why there is none)."""

    strategy: str
    # the fastest configuration's report: an outcome keeps no simulation's state (the
    # engine, network caches and topology of each candidate are freed as soon as its
    # report is read), so comparing strategies costs the memory of one simulation
    report: Report | None = None
    candidate: Candidate | None = None
    max_batch_sequences: int = 0
    feasible: int = 0
    tried: list[tuple[Candidate, float]] = field(default_factory=list)
    note: str | None = None
    wall_time_s: float = 0.0
    batch_note: str | None = None  # the requested batch did not divide: what was used
    program_key: Any = None  # equal keys: the same program (hybrid setups, name aside)
    same_program_as: str | None = None  # an earlier strategy that ran this same program

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
    best: Result | None = None
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
        if best is None or t < best.report.iteration_time_s:
            best, out.candidate = res, cand
        del res
        gc.collect()  # a result's engine holds reference cycles (launches, activations)
    if progress is not None:
        progress(strategy, len(todo), len(todo))
    if best is not None:
        out.report = best.report
        out.max_batch_sequences = plan_max_batch_sequences(
            best.config, best.plan, best.topology, gpu
        )
        out.note = None
        if isinstance(best.config.parallel, HybridParallel):
            out.program_key = replace(resolve_hybrid(best.config, best.topology, gpu), strategy="")
    del best
    gc.collect()
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
    """Search every strategy on one machine, GPU count and model (same global batch: the
    requested one, or the nearest that every strategy can split; see `batch_note`)."""
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
    """Search every strategy from one raw base config (no parallel section); same global
    batch for all (see `compare_strategies`)."""
    unknown = [s for s in strategies if s not in STRATEGY_NAMES]
    if unknown:
        raise WorkloadError(
            f"--strategies: unknown strategy '{unknown[0]}' (known: {', '.join(STRATEGY_NAMES)})"
        )
    # machine, GPU count, model and batch problems fail here, once
    config = validate_config({**base, "parallel": base.get("parallel") or {"strategy": "axonn"}})
    base = deepcopy(base)
    batch = comparison_batch(config, strategies)
    if batch.adjusted:
        seq = config.model.spec().seq_len
        base["training"] = {**base.get("training", {}), "batch_tokens": batch.sequences * seq}
    outcomes = [
        search_strategy(s, base, max_candidates=max_candidates, progress=progress)
        for s in strategies
    ]
    for o in outcomes:
        o.batch_note = batch.note
    mark_same_programs(outcomes)
    return outcomes


def comparison_batch(config: ExperimentConfig, strategies: Sequence[str]) -> BatchChoice:
    """The batch every strategy runs: the config's, or the nearest one all of them accept
    (strategies with no valid configuration at any batch are left to report why)."""
    spec = config.model.spec()
    topology = build_topology(config.cluster)
    gpu = gpu_spec(config.cluster.gpu or topology.gpu_type)
    training = training_setup(config)
    cluster = cluster_shape(config, topology, gpu)
    tokens = config.training.batch_tokens
    requested = max(1, round(tokens / spec.seq_len))
    named = []
    for s in strategies:
        try:
            named.append((s, batch_granularities(s, config, training, cluster)))
        except (WorkloadError, SimulatorError, TopologyError):
            named.append((s, set()))
    choice = choose_batch(requested, named, spec.seq_len)
    if tokens % spec.seq_len and choice.note is None:
        note = (
            f"training.batch_tokens: {tokens:,} tokens is not a whole number of "
            f"{spec.seq_len}-token sequences; using {choice.sequences:,} sequences "
            f"({choice.sequences * spec.seq_len:,} tokens)"
        )
        return BatchChoice(tokens // spec.seq_len, choice.sequences, note)
    return choice


def mark_same_programs(outcomes: Sequence[StrategyOutcome]) -> None:
    """Point each outcome whose best configuration is the same program as an earlier
    strategy's (e.g. a hierarchical ZeRO++ assignment equal to ZeRO++) at that strategy."""
    seen: dict[Any, str] = {}
    for o in outcomes:
        if o.program_key is None:
            continue
        if o.program_key in seen:
            o.same_program_as = seen[o.program_key]
        else:
            seen[o.program_key] = o.strategy


def speedups(outcomes: Sequence[StrategyOutcome]) -> list[float | None]:
    """Iteration-time speedup of each strategy over the first one that ran (same batch,
    so also the throughput ratio); None for strategies without a result of their own."""
    ref = next((o.report.iteration_time_s for o in outcomes if o.report), None)
    return [
        None
        if o.report is None or ref is None or o.same_program_as
        else ref / o.report.iteration_time_s
        for o in outcomes
    ]


def outcomes_json(outcomes: Sequence[StrategyOutcome]) -> list[dict[str, Any]]:
    """The `--json` contract: one object per strategy with `strategy`, `config`,
    `max_batch_sequences`, `speedup_vs_first` and every key of the simulate report
    (skipped strategies carry `skipped` with the reason instead of the report; a strategy
    whose best run is the same program as an earlier one carries `same_program_as` and no
    report; `batch_note` says when the requested batch was replaced by the nearest one
    every strategy accepts)."""
    out = []
    for o, sp in zip(outcomes, speedups(outcomes), strict=True):
        entry: dict[str, Any] = {}
        if o.report is not None and not o.same_program_as:
            entry.update(o.report.to_json())
        entry.update(
            strategy=o.strategy,
            config=o.config,
            max_batch_sequences=o.max_batch_sequences,
            speedup_vs_first=sp,
            candidates_feasible=o.feasible,
            candidates_simulated=len(o.tried),
            search_wall_time_s=o.wall_time_s,
            batch_note=o.batch_note,
        )
        if o.same_program_as:
            entry["same_program_as"] = o.same_program_as
        if o.report is None:
            entry["skipped"] = o.note or "no result"
        out.append(entry)
    return out
