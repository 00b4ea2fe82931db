"""The configurations `compare-strategies` considers for each strategy, pruned by memory.

For every strategy: enumerate its valid degree combinations (and a few documented
variants, such as Megatron's distributed optimizer), keep only those whose memory fits
the GPU with some microbatch size, keep one microbatch size per combination (the largest
that fits; pipelines keep >= 4 microbatches per stage when they can) and order them,
most promising first: smallest model-parallel size first for most strategies, AxoNN's
grids by the paper's analytical communication model (simulator/search/grids.py, bandwidths
measured on the topology by axsim's collective model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.config import ExperimentConfig
from topologies.hardware import GpuSpec
from workloads.axonn.params import AxonnParallel
from workloads.errors import WorkloadError
from workloads.hybrid.configure import candidate_setups, pick_microbatch, sharding_of
from workloads.hybrid.memory import hybrid_memory
from workloads.hybrid.params import (
    FsdpPpParallel,
    FsdpTpParallel,
    HybridParallel,
    MegatronParallel,
    PartitionLevel,
    ShardedParallel,
    ZeroppHierParallel,
    ZeroppParallel,
)
from workloads.hybrid.setup import HybridSetup
from workloads.models import TransformerSpec
from workloads.optimus.memory import optimus_memory
from workloads.optimus.params import OptimusParallel
from workloads.optimus.workload import candidate_optimus_setups
from workloads.run import ClusterShape, TrainingSetup
from workloads.strategies import check_model_support

LEVELS: tuple[PartitionLevel, ...] = ("global", "node", "pair")


@dataclass(frozen=True)
class Candidate:
    """One configuration to simulate: the `parallel` section and the microbatch."""

    strategy: str
    parallel: dict[str, Any]
    microbatch_sequences: int
    memory_bytes: float
    rank: tuple[float, ...]


def _powers_of_two(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


# ------------------------------------------------------------------ hybrids
def hybrid_variants(strategy: str, cluster: ClusterShape) -> list[HybridParallel]:
    """The parameter variants searched per hybrid strategy (degrees are left open)."""
    if strategy == "megatron":
        return [
            MegatronParallel(sequence_parallel=True),
            MegatronParallel(sequence_parallel=True, distributed_optimizer=True),
        ]
    if strategy in ("zero3", "fsdp"):
        return [ShardedParallel(strategy=strategy)]  # type: ignore[arg-type]
    if strategy == "hsdp":
        sizes = [s for s in _powers_of_two(cluster.gpus // 2) if s >= cluster.gpus_per_node]
        return [ShardedParallel(strategy="hsdp", shard=s) for s in sizes]
    if strategy == "zeropp":
        return [ZeroppParallel()]
    if strategy == "zeropp-hier":
        # the paper's hierarchy first; the assignment that is ZeRO++ itself is left out
        default = ZeroppHierParallel()
        zeropp = sharding_of(ZeroppParallel())
        others = [
            ZeroppHierParallel(forward_partition=f, backward_partition=b, gradient_partition=g)
            for f in LEVELS
            for b in LEVELS
            for g in LEVELS
        ]
        return [default, *[o for o in others if o != default and sharding_of(o) != zeropp]]
    if strategy == "fsdp-tp":
        return [FsdpTpParallel(sequence_parallel=True)]
    if strategy == "fsdp-pp":  # weights kept for the iteration (torchtitan) or re-gathered
        return [FsdpPpParallel(), FsdpPpParallel(reshard_after_forward=True)]
    raise WorkloadError(f"unknown strategy '{strategy}'")


def _hybrid_parallel(params: HybridParallel, setup: HybridSetup) -> dict[str, Any]:
    out = params.model_dump(mode="json")
    if "tp" in out:
        out["tp"] = setup.tp
    if "pp" in out:
        out["pp"] = setup.pp
    if "shard" in out:
        out["shard"] = setup.shard
    return out


def _microbatch_choices(
    fitting: list[tuple[HybridSetup, float]],
) -> list[tuple[HybridSetup, float]]:
    """The microbatch sizes worth simulating for one degree combination: the default pick
    and, for pipelines, also the next smaller size (more microbatches, smaller bubble)."""
    best = pick_microbatch([s for s, _ in fitting])
    out = [next(sm for sm in fitting if sm[0] is best)]
    if best.pp > 1:
        smaller = [sm for sm in fitting if sm[0].microbatch_sequences < best.microbatch_sequences]
        if smaller:
            out.append(max(smaller, key=lambda sm: sm[0].microbatch_sequences))
    return out


def hybrid_candidates(
    strategy: str, spec: TransformerSpec, training: TrainingSetup, cluster: ClusterShape
) -> list[Candidate]:
    """Memory-feasible configurations of a hybrid strategy, smallest model-parallel size
    first; raises WorkloadError when the strategy has no valid configuration at all."""
    out = []
    valid = 0
    for vi, params in enumerate(hybrid_variants(strategy, cluster)):
        try:
            setups = candidate_setups(spec, params, training, cluster)
        except WorkloadError:
            continue
        valid += len(setups)
        groups: dict[tuple[int, int, int], list[tuple[HybridSetup, float]]] = {}
        for s in setups:
            try:
                mem = hybrid_memory(spec, s).total
            except WorkloadError:
                continue
            if mem <= cluster.capacity_bytes:
                groups.setdefault((s.tp, s.pp, s.shard), []).append((s, mem))
        for fitting in groups.values():
            for k, (setup, mem) in enumerate(_microbatch_choices(fitting)):
                intra = setup.tp <= cluster.gpus_per_node
                rank = (float(setup.tp * setup.pp), float(not intra), float(setup.pp), float(vi))
                parallel = _hybrid_parallel(params, setup)
                out.append(
                    Candidate(strategy, parallel, setup.microbatch_sequences, mem, (*rank, k))
                )
    if not valid:
        raise WorkloadError(
            f"no valid {strategy} configuration for {cluster.gpus} GPUs ({cluster.gpus_per_node} "
            f"per node), {spec.layers} layers, {spec.heads} heads and this batch"
        )
    return sorted(out, key=lambda c: c.rank)


# ------------------------------------------------------------------ optimus
def optimus_candidates(
    spec: TransformerSpec, training: TrainingSetup, cluster: ClusterShape
) -> list[Candidate]:
    """One candidate per feasible mesh (q >= 2, largest fitting microbatch), smallest first."""
    out = []
    by_q: dict[int, list[tuple[Any, float]]] = {}
    setups = [
        s for s in candidate_optimus_setups(spec, OptimusParallel(), training, cluster) if s.q > 1
    ]
    if not setups:
        raise WorkloadError(
            f"no valid Optimus mesh (q >= 2, q^2 dividing {cluster.gpus} GPUs, q dividing the "
            f"model and the batch)"
        )
    for s in setups:
        mem = optimus_memory(spec, s).total
        if mem <= cluster.capacity_bytes:
            by_q.setdefault(s.q, []).append((s, mem))
    for q, fitting in by_q.items():  # q = 1 left out: plain data parallelism, not Optimus
        best, mem = max(fitting, key=lambda sm: sm[0].microbatch_sequences)
        parallel = {"strategy": "optimus", "q": q, "data": best.data}
        out.append(Candidate("optimus", parallel, best.microbatch_sequences, mem, (float(q),)))
    return sorted(out, key=lambda c: c.rank)


# ------------------------------------------------------------------- axonn
def axonn_candidates(
    config: ExperimentConfig, training: TrainingSetup, cluster: ClusterShape, gpu: GpuSpec
) -> list[Candidate]:
    """AxoNN grids ranked by the paper's analytical model (simulator/search/grids.py)."""
    from simulator.search.grids import bandwidth_provider, rank_grids

    spec = config.model.spec()
    bandwidth = bandwidth_provider(config, "topology", cluster.gpus_per_node)
    out = []
    for c in rank_grids(spec, AxonnParallel(), training, cluster.gpus, gpu, bandwidth):
        if c.memory_bytes > cluster.capacity_bytes:
            continue
        g = c.grid
        parallel: dict[str, object] = {
            "strategy": "axonn",
            "grid": {"x": g.x, "y": g.y, "z": g.z, "data": g.data},
        }
        if c.cached_layers:
            parallel.update(weight_lifetime="cache", cached_layers=c.cached_layers)
        out.append(
            Candidate(
                "axonn", parallel, c.microbatch_sequences, c.memory_bytes, (c.model_comm_time_s,)
            )
        )
    return out


def strategy_candidates(
    strategy: str,
    config: ExperimentConfig,
    training: TrainingSetup,
    cluster: ClusterShape,
    gpu: GpuSpec,
) -> list[Candidate]:
    """All memory-feasible candidates of a strategy, most promising first."""
    spec = config.model.spec()
    check_model_support(spec, strategy)
    if strategy == "axonn":
        return axonn_candidates(config, training, cluster, gpu)
    if strategy == "optimus":
        return optimus_candidates(spec, training, cluster)
    return hybrid_candidates(strategy, spec, training, cluster)
