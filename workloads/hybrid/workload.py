"""The OpGraph of a hybrid setup: one program per pipeline stage, stages as rank classes."""

from __future__ import annotations

import numpy as np

from workloads.graph import OpGraph
from workloads.hybrid.configure import check_setup
from workloads.hybrid.groups import hybrid_groups
from workloads.hybrid.iteration import build_stage_program
from workloads.hybrid.setup import HybridSetup
from workloads.models import TransformerSpec


def stage_of_rank(setup: HybridSetup) -> np.ndarray:
    """Pipeline stage of every rank (the outermost rank dimension)."""
    return np.arange(setup.world, dtype=np.int64) // (setup.world // setup.pp)


def build_hybrid_workload(spec: TransformerSpec, setup: HybridSetup) -> OpGraph:
    """The OpGraph of one training iteration. Ranks of one stage share a program and
    form one rank class (symmetric mode simulates one rank per stage)."""
    check_setup(spec, setup)
    programs = tuple(build_stage_program(spec, setup, s) for s in range(setup.pp))
    stage = stage_of_rank(setup)
    return OpGraph(
        world_size=setup.world,
        programs=programs,
        rank_program=stage.copy(),
        groups=hybrid_groups(setup),
        rank_class=stage.copy(),
        name=f"{setup.strategy}-{spec.name}-tp{setup.tp}-pp{setup.pp}-dp{setup.dp}"
        + (f"-cp{setup.cp}" if setup.cp > 1 else ""),
        metadata={
            "strategy": setup.strategy,
            "tp": setup.tp,
            "pp": setup.pp,
            "dp": setup.dp,
            "shard": setup.shard,
            "cp": setup.cp,
            "microbatches": setup.microbatches,
            "microbatch_sequences": setup.microbatch_sequences,
        },
    )
