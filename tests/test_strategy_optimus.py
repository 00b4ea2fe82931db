"""Optimus (SUMMA 2D tensor parallelism): collectives per linear, the per-layer volume
3·(7·b·s·h + 12·h²)/q of baselines.md, LayerNorm statistics, memory scaling."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.strategy_helpers import SPEC, collectives, run
from workloads.errors import WorkloadError
from workloads.ops import CollectiveKind as K
from workloads.ops import CollectiveOp, WaitOp
from workloads.optimus.memory import optimus_max_batch_sequences, optimus_memory
from workloads.optimus.params import OptimusParallel
from workloads.optimus.workload import build_optimus_workload, optimus_setup
from workloads.run import TrainingSetup

DB = SPEC.dtype_bytes


def _build(q: int, data: int = 1, mbs: int | None = None, checkpointing: bool = True):  # type: ignore[no-untyped-def]
    mbs = mbs or q
    training = TrainingSetup(mbs * data * SPEC.seq_len, activation_checkpointing=checkpointing)
    setup = optimus_setup(SPEC, OptimusParallel(), training, q * q * data, q, mbs)
    graph = build_optimus_workload(SPEC, setup)
    graph.validate()
    return setup, graph


def test_six_q_broadcasts_and_reduces_per_linear() -> None:
    q = 2
    _, g = _build(q, checkpointing=False)
    ops = [op for op in collectives(g.programs[0], "L0.mlp_up.") if ".bias" not in op.name]
    kinds = Counter((op.kind.value, op.group) for op in ops)
    assert kinds == Counter(
        {
            ("broadcast", "row"): 2 * q,  # X blocks: forward and dW
            ("broadcast", "col"): 2 * q,  # A blocks: forward and dX
            ("reduce", "row"): q,  # dX partials
            ("reduce", "col"): q,  # dW partials
        }
    )
    assert sorted({op.root for op in ops}) == list(range(q))


@pytest.mark.parametrize("q", [2, 4])
def test_layer_volume_matches_the_optimus_formula(q: int) -> None:
    mbs = 2 * q
    _, g = _build(q, mbs=mbs, checkpointing=False)
    summa = [
        op
        for op in collectives(g.programs[0], "L1.")
        if op.kind in (K.BROADCAST, K.REDUCE)
        and ".bias" not in op.name
        and ".affine" not in op.name
    ]
    elems = sum(op.bytes for op in summa) / DB
    bsh = mbs * SPEC.seq_len * SPEC.hidden
    h2 = SPEC.hidden**2
    assert elems == pytest.approx(3 * (7 * bsh + 12 * h2) / q, rel=1e-12)


def test_layernorm_statistics_are_all_reduced_along_the_row() -> None:
    """The released LayerNorm_summa all-reduces the sum and the sum of squares along the
    row (forward), the gradient sums in backward; gamma and beta live on mesh row 0,
    broadcast down the column in forward and reduced there in backward."""
    q, mbs = 2, 4
    _, g = _build(q, mbs=mbs, checkpointing=False)
    ln = collectives(g.programs[0], "L0.ln")
    stats = [op for op in ln if op.kind is K.ALL_REDUCE]
    assert {op.group for op in stats} == {"row"}
    assert len(stats) == 8  # two LayerNorms x (2 forward + 2 backward)
    assert {op.bytes for op in stats} == {mbs * SPEC.seq_len / q * DB}
    affine = Counter((op.kind, op.group, op.root) for op in ln if ".affine" in op.name)
    assert affine == {(K.BROADCAST, "col", 0): 4, (K.REDUCE, "col", 0): 4}


def test_biases_and_collectives_block_as_the_released_code() -> None:
    """SUMMAbias: a bias broadcast down the column per forward and reduced per backward
    (not on QKV, which has no bias); every broadcast and reduce is blocking."""
    _, g = _build(2, checkpointing=False)
    prog = g.programs[0]
    bias = [op for op in collectives(prog, "L0.") if ".bias" in op.name]
    assert sorted((op.name.split(".")[1], op.kind.value) for op in bias) == sorted(
        (n, k) for n in ("attn_out", "mlp_up", "mlp_down") for k in ("broadcast", "reduce")
    )
    waits = {op.target: i for i, op in enumerate(prog.ops) if isinstance(op, WaitOp)}
    summa = [
        i
        for i, op in enumerate(prog.ops)
        if isinstance(op, CollectiveOp) and op.kind in (K.BROADCAST, K.REDUCE)
    ]
    assert summa and all(waits.get(i) == i + 1 for i in summa)  # waited right away


def test_embedding_broadcasts_vocabulary_blocks_q_times() -> None:
    q = 2
    _, g = _build(q, checkpointing=False)
    emb = collectives(g.programs[0], "embedding.")
    block = (SPEC.vocab // q) * (SPEC.hidden // q) * DB
    kinds = Counter((op.kind, op.group, op.bytes) for op in emb)
    assert kinds == {(K.BROADCAST, "col", block): 2 * q, (K.REDUCE, "col", block): q}


def test_full_and_symmetric_agree() -> None:
    _, g = _build(2, data=2)
    full, _ = run(g, mode="full")
    sym, _ = run(g, mode="symmetric")
    assert full.iteration_time_s == sym.iteration_time_s


def test_activation_memory_falls_as_one_over_q_squared() -> None:
    mbs = 16
    acts = {}
    for q in (1, 2, 4):
        setup, _ = _build(q, mbs=mbs, checkpointing=False)
        acts[q] = optimus_memory(SPEC, setup).activations
    assert acts[1] / acts[2] == pytest.approx(4, rel=1e-9)
    assert acts[2] / acts[4] == pytest.approx(4, rel=1e-9)


def test_max_batch_is_the_largest_that_fits() -> None:
    setup, _ = _build(2, data=2)
    cap = 3.0e9
    best = optimus_max_batch_sequences(SPEC, setup, cap)
    per_mesh = best // setup.data
    assert best > 0 and per_mesh % setup.q == 0
    fit = optimus_memory(SPEC, _replace(setup, per_mesh)).total
    over = optimus_memory(SPEC, _replace(setup, per_mesh + setup.q)).total
    assert fit <= cap < over


def _replace(setup, mbs: int):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    return replace(setup, microbatch_sequences=mbs, microbatches=1)


def test_bad_meshes_name_the_field() -> None:
    training = TrainingSetup(8 * SPEC.seq_len)
    with pytest.raises(WorkloadError, match=r"parallel\.q=3 does not divide"):
        optimus_setup(SPEC, OptimusParallel(), training, 9, 3, 3)
    with pytest.raises(WorkloadError, match=r"q\^2 = 4 does not divide the 6 GPUs"):
        optimus_setup(SPEC, OptimusParallel(), training, 6, 2, 2)
    with pytest.raises(WorkloadError, match="multiple of q=2"):
        optimus_setup(SPEC, OptimusParallel(), training, 4, 2, 1)


def _rank_rearrange(rank: int, q: int) -> int:
    """The released code's rank_rearrange (xuqifan897/Optimus summa/arguments.py, commit
    79c67d8), transcribed: SLURM rank -> the logical rank whose mesh position it serves."""
    mp = q * q
    intra, ddp = rank % mp, rank // mp
    block = intra // 4
    block_row, block_col = block // (q // 2), block % (q // 2)
    local = intra - block * 4
    row, col = block_row * 2 + local // 2, block_col * 2 + local % 2
    return row * q + col + mp * ddp


@pytest.mark.parametrize(("q", "data"), [(4, 1), (8, 1), (4, 2)])
def test_node_blocks_layout_is_the_released_rank_rearrange(q: int, data: int) -> None:
    from workloads.optimus.workload import mesh_ranks

    ranks = mesh_ranks(q, data, "node-blocks")
    served = {_rank_rearrange(r, q): r for r in range(q * q * data)}
    for rep in range(data):
        for i in range(q):
            for j in range(q):
                assert ranks[rep, i, j] == served[rep * q * q + i * q + j]
    # every row and every column: 2 GPUs on each of q/2 four-GPU nodes
    for line in (*ranks[0], *ranks[0].T):
        assert sorted(Counter(int(r) // 4 for r in line).values()) == [2] * (q // 2)
    assert (mesh_ranks(q, data, "rows").ravel() == range(q * q * data)).all()


def test_node_blocks_needs_four_gpu_nodes_and_an_even_mesh() -> None:
    from dataclasses import replace

    from workloads.optimus.workload import candidate_optimus_setups
    from workloads.run import ClusterShape

    params = OptimusParallel(q=3, mesh_layout="node-blocks")
    training = TrainingSetup(3 * SPEC.seq_len)
    spec3 = replace(SPEC, hidden=96, heads=6)
    with pytest.raises(WorkloadError, match=r"mesh_layout=node-blocks.*odd"):
        optimus_setup(spec3, params, training, 9, 3, 3)
    with pytest.raises(WorkloadError, match=r"mesh_layout=node-blocks.*4-GPU nodes"):
        candidate_optimus_setups(
            SPEC,
            OptimusParallel(q=2, mesh_layout="node-blocks"),
            training,
            ClusterShape(4, 8, 1e12),
        )
