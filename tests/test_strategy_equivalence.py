"""AxoNN's special cases against the strategies they reduce to (reference/axonn-4d.md):
Z only is ZeRO-3, and one tensor dimension with transposed layers is Megatron-LM 1D
tensor parallelism. Same compute kernels, same (non-trivial) collectives, same time.

Naming: the reference (the paper's naming) calls the Megatron case "X only"; axsim follows
AxoNN's code, where a normal layer's *output* features are split over Y, so the case is
Y only here (grid 1 x t x 1 x 1). X only would split the residual stream instead and is
not Megatron's layout. Size-1 collectives (AxoNN issues them, Megatron and DeepSpeed do
not) take no time on an ideal network, which is what these comparisons use.
"""

from __future__ import annotations

import pytest

from tests.strategy_helpers import SPEC, compute_ops, hybrid, run, signature
from workloads.axonn.params import AxonnParallel, Grid
from workloads.axonn.workload import build_axonn_workload
from workloads.hybrid.params import MegatronParallel, ShardedParallel
from workloads.run import TrainingSetup


def _sizes(graph) -> dict[str, int]:  # type: ignore[no-untyped-def]
    return {name: kind.size for name, kind in graph.groups.items()}


def _axonn(grid: Grid, checkpointing: bool, sequences: int, overlap=("oar", "ors", "oag")):  # type: ignore[no-untyped-def]
    # both sides run the same loss code (workloads/loss.py): PyTorch's eager cross entropy
    training = TrainingSetup(
        sequences * SPEC.seq_len, activation_checkpointing=checkpointing, cross_entropy="eager"
    )
    # the algorithm itself (the PyPI release re-gathers in backward, as ZeRO-3 does)
    params = AxonnParallel(grid=grid, implementation="axonn-0.2", overlap=overlap)
    g = build_axonn_workload(SPEC, params, grid, training, 1)
    g.validate()
    return g


@pytest.mark.parametrize("checkpointing", [True, False])
def test_axonn_z_only_equals_zero3(checkpointing: bool) -> None:
    """Without prefetching, exactly equal. (With OAG the two prefetch differently in the
    recompute: axonn issues a checkpointed block's first gather on entering the block,
    before its LayerNorm; same ops, a little earlier.)"""
    n = 4
    ax = _axonn(Grid(x=1, y=1, z=n, data=1), checkpointing, 2 * n, ("oar", "ors"))
    params = ShardedParallel(strategy="zero3", forward_prefetch=False, backward_prefetch=False)
    _, z3 = hybrid(params, n, sequences=2 * n, checkpointing=checkpointing)
    canon = {"z": "all", "world": "all", "shard": "all", "dp": "all"}
    assert signature(ax.programs[0], _sizes(ax), canon) == signature(
        z3.programs[0], _sizes(z3), canon
    )
    assert compute_ops(ax.programs[0]) == compute_ops(z3.programs[0])
    t_ax = run(ax)[0].iteration_time_s
    t_z3 = run(z3)[0].iteration_time_s
    assert t_ax == t_z3


@pytest.mark.parametrize("checkpointing", [True, False])
def test_axonn_one_tensor_dimension_equals_megatron_tp(checkpointing: bool) -> None:
    t = 4
    ax = _axonn(Grid(x=1, y=t, z=1, data=1), checkpointing, 2)
    recompute = "full" if checkpointing else "none"
    _, meg = hybrid(
        MegatronParallel(tp=t, recompute=recompute), t, tp=t, sequences=2, cross_entropy="eager"
    )
    assert compute_ops(ax.programs[0]) == compute_ops(meg.programs[0])
    sig_ax = signature(ax.programs[0], _sizes(ax), {"y": "tp", "world": "tp"})
    sig_meg = signature(meg.programs[0], _sizes(meg), {})
    pos = ("all-reduce", "tp", float(SPEC.seq_len * SPEC.hidden * SPEC.dtype_bytes))
    # AxoNN all-reduces the replicated position embedding over the world; Megatron's
    # copies get identical gradients and need none
    assert sig_ax - sig_meg == {pos: 1} and not sig_meg - sig_ax
    res_ax, res_meg = run(ax)[0], run(meg)[0]
    tl = res_ax.timeline.rank(0)
    i = list(tl.name).index("pos_embedding.ar_world")
    assert res_ax.iteration_time_s - res_meg.iteration_time_s == pytest.approx(
        tl.end_s[i] - tl.start_s[i], abs=1e-12
    )
