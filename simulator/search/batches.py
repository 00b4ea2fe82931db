"""Which global batches a strategy can run, and the nearest one every strategy accepts.

Why: every strategy splits the global batch over its data-parallel ranks (AxoNN over
Z x data, ZeRO/FSDP over the shard group, Optimus over replicas and mesh rows), so a
batch that one of them cannot split evenly leaves it with no configuration at all.
`compare-strategies` compares strategies at one batch; when the requested one does not
divide, it runs the nearest batch that every strategy accepts and says so.

A strategy's *granularities* are the batch sizes g (in sequences) such that some valid
configuration of it runs any batch that is a multiple of g (memory aside): the
data-parallel size of each degree combination (hybrids), z x data of each grid (AxoNN),
replicas x q of each mesh (Optimus, whose per-mesh microbatch is a multiple of q). They
all divide the GPU count, so a batch that is a multiple of the GPU count always works.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from simulator.config import ExperimentConfig
from workloads.errors import WorkloadError
from workloads.models import TransformerSpec
from workloads.run import ClusterShape, TrainingSetup


@dataclass(frozen=True)
class BatchChoice:
    """The batch a comparison runs: requested and used, in sequences, and why."""

    requested_sequences: int
    sequences: int
    note: str | None = None

    @property
    def adjusted(self) -> bool:
        return self.sequences != self.requested_sequences


def _hybrid_granularities(
    strategy: str, spec: TransformerSpec, training: TrainingSetup, cluster: ClusterShape
) -> set[int]:
    from simulator.search.candidates import hybrid_variants
    from workloads.hybrid.configure import build_setup, candidate_degrees
    from workloads.hybrid.groups import level_groups, uses_levels

    out: set[int] = set()
    for params in hybrid_variants(strategy, cluster):
        for deg in candidate_degrees(spec, params, cluster):
            dp = cluster.gpus // (deg.tp * deg.pp)
            g = dp * (deg.pp if getattr(params, "virtual_stages", 1) > 1 else 1)
            probe = replace(training, batch_tokens=g * spec.seq_len, microbatch_sequences=None)
            try:  # the degrees must be valid in themselves (heads, layers, partition levels)
                setup = build_setup(spec, params, probe, cluster, deg, 1)
                if uses_levels(setup):
                    level_groups(setup)
            except WorkloadError:
                continue
            out.add(g)
    return out


def _optimus_granularities(spec: TransformerSpec, cluster: ClusterShape) -> set[int]:
    from workloads.optimus.workload import check_mesh

    out: set[int] = set()
    q = 2
    while q * q <= cluster.gpus:
        try:
            data = check_mesh(spec, q, cluster.gpus, None)
        except WorkloadError:
            q += 1
            continue
        out.add(data * q)
        q += 1
    return out


def _axonn_granularities(config: ExperimentConfig, spec: TransformerSpec, gpus: int) -> set[int]:
    from simulator.search.grids import all_grids
    from workloads.axonn.layers import block_layouts, logits_layout
    from workloads.axonn.params import AxonnParallel

    params = config.parallel if isinstance(config.parallel, AxonnParallel) else AxonnParallel()
    out: set[int] = set()
    for grid in all_grids(gpus):
        g = grid.z * grid.data
        if g in out:
            continue
        try:
            block_layouts(spec, grid, params.transpose_alternate)
            logits_layout(spec, grid)
        except WorkloadError:
            continue
        out.add(g)
    return out


def batch_granularities(
    strategy: str, config: ExperimentConfig, training: TrainingSetup, cluster: ClusterShape
) -> set[int]:
    """Batch granularities (sequences) of a strategy on the cluster; empty if it has no
    valid configuration at any batch."""
    spec = config.model.spec()
    if strategy == "axonn":
        return _axonn_granularities(config, spec, cluster.gpus)
    if strategy == "optimus":
        return _optimus_granularities(spec, cluster)
    return _hybrid_granularities(strategy, spec, training, cluster)


def accepts(sequences: int, granularities: set[int]) -> bool:
    """True if some configuration with these granularities splits `sequences` evenly."""
    return any(sequences % g == 0 for g in granularities)


def nearest_common_batch(requested: int, per_strategy: Sequence[set[int]]) -> int | None:
    """The batch (sequences) nearest `requested` that every non-empty granularity set
    accepts; ties go to the smaller batch. None if no set is non-empty."""
    sets = [s for s in per_strategy if s]
    if not sets:
        return None
    if all(accepts(requested, s) for s in sets):
        return requested
    # multiples of the lcm of each strategy's smallest granularity suit every strategy,
    # and one lies within that lcm of the request
    step = math.lcm(*(min(s) for s in sets))
    for d in range(1, step + 1):
        for n in (requested - d, requested + d):
            if n >= 1 and all(accepts(n, s) for s in sets):
                return n
    return None  # pragma: no cover - a multiple of `step` lies within `step`


def choose_batch(
    requested: int, named: Sequence[tuple[str, set[int]]], seq_len: int
) -> BatchChoice:
    """The batch a comparison of the named strategies runs, with a note when it differs
    from the requested one (or when no batch near it suits every strategy)."""
    chosen = nearest_common_batch(requested, [g for _, g in named])
    if chosen is None or chosen == requested:
        return BatchChoice(requested, requested)
    refusing = [s for s, g in named if g and not accepts(requested, g)]
    note = (
        f"training.batch_tokens: {requested:,} sequences ({requested * seq_len:,} tokens) do "
        f"not divide evenly for {', '.join(refusing)}; using the nearest batch every "
        f"strategy accepts, {chosen:,} sequences ({chosen * seq_len:,} tokens)"
    )
    return BatchChoice(requested, chosen, note)
