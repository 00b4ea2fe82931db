"""AxoNN's 4D workload: collective sizes, overlap semantics, special cases, memory, FLOPs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cost.model import CostModel, RooflineKernels
from simulator.engine.core import Engine
from simulator.network.params import NetworkParams
from simulator.network.pricing import CollectivePricer
from simulator.outputs.analysis import breakdown
from topologies.synthetic import build_full_mesh
from workloads.axonn.grid import axonn_groups, coordinates
from workloads.axonn.implementation import PRESETS, WeightPolicy
from workloads.axonn.memory import axonn_memory, shard_params
from workloads.axonn.params import AxonnParallel, Grid
from workloads.axonn.workload import TrainingSetup, build_axonn_workload
from workloads.errors import WorkloadError
from workloads.models import (
    TransformerSpec,
    model_flops_per_iteration,
    model_presets,
    published_gpt_flops,
)
from workloads.ops import CollectiveOp

SPEC = TransformerSpec(name="t", layers=2, hidden=64, heads=8, seq_len=32, vocab=128)
AX02 = PRESETS["axonn-0.2"]  # the algorithm as axonn-4d.md describes it (the PyPI release)


def _ops_by_name(graph):
    return {op.name: op for op in graph.programs[0].ops if isinstance(op, CollectiveOp)}


def test_rank_order_and_groups_follow_axonn() -> None:
    g = Grid(x=2, y=2, z=2, data=1)
    groups = axonn_groups(g)
    assert groups["x"].members.tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert groups["y"].members.tolist() == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert groups["z"].members.tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]
    x, _y, z, _d = coordinates(np.arange(8), g)
    assert x.tolist() == [0, 1, 0, 1, 0, 1, 0, 1] and z.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([2, 4]),
    st.sampled_from([1, 2]),
    st.sampled_from([1, 2]),
    st.sampled_from(["axonn-0.2", "sc24"]),
)
def test_collective_sizes_match_the_reference_formulas(
    gx: int, gy: int, gz: int, gd: int, mbs: int, implementation: str
) -> None:
    grid = Grid(x=gx, y=gy, z=gz, data=gd)
    batch = 8 * SPEC.seq_len * gz * gd * mbs
    params = AxonnParallel(grid=grid, implementation=implementation)  # type: ignore[arg-type]
    graph = build_axonn_workload(SPEC, params, grid, TrainingSetup(batch), mbs)
    ops = _ops_by_name(graph)
    m = mbs * SPEC.seq_len * gz  # tokens of one data replica per microbatch
    b = SPEC.dtype_bytes
    for name, k, n in SPEC.linear_shapes():
        transposed = name in ("attn_out", "mlp_down")
        # X splits k (and reduces the forward) in normal layers; transposed layers swap X and Y
        g_k, g_n = (gy, gx) if transposed else (gx, gy)
        fwd_group, bwd_group = ("y", "x") if transposed else ("x", "y")
        ag = ops[f"L0.{name}.ag_z"]
        assert (ag.group, ag.bytes) == ("z", k * n / (g_k * g_n) * b)  # eq. (1): out k·n/(Gx·Gy)
        ar = ops[f"L0.{name}.ar_{fwd_group}.fwd"]
        assert (ar.group, ar.bytes) == (
            fwd_group,
            m * n / (gz * g_n) * b,
        )  # eq. (3), x<->y named as the code
        ar_b = ops[f"L0.{name}.ar_{bwd_group}.bwd"]
        assert (ar_b.group, ar_b.bytes) == (bwd_group, m * k / (gz * g_k) * b)  # eq. (4)
        rs = ops[f"L0.{name}.rs_z"]
        assert (rs.group, rs.bytes) == ("z", k * n / (g_k * g_n) * b)  # eq. (2): in k·n/(Gx·Gy)
        if implementation == "axonn-0.2":
            dp = ops[f"L0.{name}.ar_data"]
            assert (dp.group, dp.bytes) == ("data", k * n / (g_k * g_n * gz) * b)  # eq. (5)
    if implementation == "sc24":  # eq. (5) for every parameter at once, in fp32
        dp = ops["grad_buffer.ar_data"]
        stored = shard_params(SPEC, grid, preset=PRESETS["sc24"])
        assert (dp.group, dp.bytes) == ("data", 4 * stored)


def _run(
    grid: Grid,
    overlap: tuple[str, ...],
    bw: float = 20e9,
    mbs: int = 1,
    network: str = "contention",
):
    params = AxonnParallel(grid=grid, overlap=overlap, implementation="axonn-0.2")  # type: ignore[arg-type]
    batch = 4 * SPEC.seq_len * grid.z * grid.data
    graph = build_axonn_workload(SPEC, params, grid, TrainingSetup(batch), mbs)
    topo = build_full_mesh(grid.size, bw, 1e-6)
    pricer = CollectivePricer(topo, NetworkParams.ideal(), "ring")
    cost = CostModel(RooflineKernels(50e12, 1e12, 2e-6), pricer, network)
    return Engine(graph, topo, cost, mode="symmetric").run()


def test_without_overlap_all_communication_is_exposed() -> None:
    res = _run(Grid(x=2, y=2, z=2, data=2), ())
    bd = breakdown(res.timeline.rank(0))
    assert bd.exposed_comm_s == pytest.approx(bd.comm_s, rel=1e-12)
    assert bd.overlapped_comm_s == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize("flag", ["oar", "ors", "oag"])
@pytest.mark.parametrize("network", ["alpha-beta", "contention"])
def test_each_overlap_flag_hides_communication(flag: str, network: str) -> None:
    grid = Grid(x=2, y=2, z=2, data=1)
    base = _run(grid, (), network=network)
    on = _run(grid, (flag,), network=network)
    exposed_base = breakdown(base.timeline.rank(0)).exposed_comm_s
    exposed_on = breakdown(on.timeline.rank(0)).exposed_comm_s
    assert exposed_on < exposed_base
    assert on.iteration_time_s <= base.iteration_time_s


def test_all_flags_together_beat_none() -> None:
    grid = Grid(x=2, y=2, z=2, data=1)
    assert _run(grid, ("oar", "ors", "oag")).iteration_time_s < _run(grid, ()).iteration_time_s


def _gpu_bytes_sent(res, topo) -> float:
    gpu = np.zeros(topo.num_devices, dtype=bool)
    gpu[topo.gpus] = True
    return float(res.link_bytes[gpu[topo.links.src]].sum())


def test_pure_data_parallel_moves_only_gradient_all_reduce_bytes() -> None:
    grid = Grid(x=1, y=1, z=1, data=4)
    res = _run(grid, ("oar", "ors", "oag"))
    topo = build_full_mesh(4, 20e9, 1e-6)
    params = shard_params(SPEC, grid)
    expected = 4 * 2 * (4 - 1) / 4 * params * SPEC.dtype_bytes  # ring all-reduce of every gradient
    # every parameter's gradient crosses the network once per iteration, nothing else does
    # (position embedding over 'world' = data here; LayerNorm/bias over data then z(size 1))
    assert _gpu_bytes_sent(res, topo) == pytest.approx(expected, rel=1e-9)


def test_z_only_is_fsdp_volume() -> None:
    grid = Grid(x=1, y=1, z=4, data=1)
    mbs = 1
    res = _run(grid, ("oar", "ors", "oag"), mbs=mbs)
    topo = build_full_mesh(4, 20e9, 1e-6)
    microbatches = 4  # 4 sequences per GPU, microbatch 1
    linear = sum(k * n for _, k, n in SPEC.linear_shapes()) * SPEC.layers + SPEC.hidden * SPEC.vocab
    b = SPEC.dtype_bytes
    # per microbatch: all-gather in forward, recompute and backward of every block layer; the
    # tied logits/embedding weight: embedding + logits forward + logits backward gathers
    blocks = sum(k * n for _, k, n in SPEC.linear_shapes()) * SPEC.layers
    gathers = 3 * blocks + 3 * SPEC.hidden * SPEC.vocab
    rs = linear
    per_gpu_fraction = (4 - 1) / 4
    collectives = microbatches * (gathers + rs) * b * per_gpu_fraction * 4
    small = 4 * 2 * 3 / 4 * b * (SPEC.seq_len * SPEC.hidden)  # position embedding over 'world'
    small += (
        4
        * 2
        * 3
        / 4
        * b
        * (
            SPEC.layers * (4 * SPEC.hidden + sum(n for _, _, n in SPEC.linear_shapes()))
            + 2 * SPEC.hidden
        )
    )
    assert _gpu_bytes_sent(res, topo) == pytest.approx(collectives + small, rel=1e-9)


def test_model_flops_equal_the_published_formula() -> None:
    for name, spec in model_presets().items():
        if not name.startswith("gpt-") or spec.ffn_hidden or spec.gated_mlp:
            continue
        t = 2**24
        assert model_flops_per_iteration(spec, t) == pytest.approx(
            published_gpt_flops(spec.layers, spec.hidden, spec.seq_len, spec.vocab, t), rel=1e-12
        )


def test_memory_model_against_hand_computation() -> None:
    spec = TransformerSpec(name="m", layers=4, hidden=1024, heads=16, seq_len=512, vocab=4096)
    grid = Grid(x=2, y=2, z=4, data=1)
    mem = axonn_memory(
        spec, grid, 2, preset=AX02, policy=WeightPolicy("regather", 0), checkpointing=True
    )
    per_layer = (1024 * 3072 + 1024 * 1024 + 1024 * 4096 + 4096 * 1024) / (2 * 2 * 4)
    # LayerNorms act on the residual stream's slice (hidden / X = 512 per GPU)
    small = 4 * 512 + (3072 / 2 + 1024 / 2 + 4096 / 2 + 1024 / 2)
    params = 4 * (per_layer + small) + 1024 * 4096 / 16 + 512 * 1024 + 2 * 512
    assert shard_params(spec, grid, preset=AX02) == pytest.approx(params)
    assert mem.weights == pytest.approx(2 * params)
    assert mem.optimizer == pytest.approx(12 * params)
    largest = 1024 * 4096 / 4  # mlp blocks and the logits layer after the Z gather
    assert mem.gathered_weights == pytest.approx(2 * 2 * largest)
    tokens = 2 * 512
    assert mem.activations > 4 * 2 * tokens * 1024 / 2  # stored block inputs plus one block
    assert mem.total == pytest.approx(sum(v for k, v in mem.as_dict().items() if k != "total"))


def test_bad_grids_name_the_field() -> None:
    with pytest.raises(WorkloadError, match="not divisible by X=3"):
        build_axonn_workload(
            SPEC, AxonnParallel(), Grid(x=3, y=1, z=1, data=1), TrainingSetup(3 * 32), 1
        )
    with pytest.raises(WorkloadError, match="not divisible by data\\*z"):
        build_axonn_workload(
            SPEC, AxonnParallel(), Grid(x=1, y=1, z=2, data=2), TrainingSetup(2 * 32), 1
        )
    with pytest.raises(WorkloadError, match="microbatch_sequences=3"):
        build_axonn_workload(
            SPEC, AxonnParallel(), Grid(x=1, y=1, z=1, data=1), TrainingSetup(4 * 32), 3
        )


def test_vocabulary_is_padded_to_its_split_not_rejected() -> None:
    """A Y split that does not divide the vocabulary pads it (as Megatron-LM does); the
    padded logits layer is what the GEMMs, collectives and memory see."""
    from workloads.axonn.layers import logits_layout, padded_vocab

    spec = TransformerSpec(name="v", layers=2, hidden=96, heads=6, seq_len=32, vocab=100)
    assert padded_vocab(100, 3) == 102 and padded_vocab(100, 4) == 100
    assert logits_layout(spec, Grid(x=1, y=3, z=1, data=1)).n_local == 34
    assert logits_layout(spec, Grid(x=1, y=4, z=1, data=1)).n_local == 25
    grid = Grid(x=1, y=3, z=2, data=1)
    params = AxonnParallel(grid=grid, implementation="axonn-0.2")
    graph = build_axonn_workload(spec, params, grid, TrainingSetup(64), 1)
    ops = {op.name: op for op in graph.programs[0].ops}
    assert ops["logits.fwd"].shape == (32, 34, 96)  # tokens x padded local vocabulary x h
    assert ops["logits.ag_z"].bytes == 96 * 34 * spec.dtype_bytes  # the gathered padded block


def test_unfused_attention_emits_megatron_kernels_and_stores_scores() -> None:
    grid = Grid(x=1, y=2, z=1, data=1)
    batch = 2 * SPEC.seq_len
    flash = build_axonn_workload(SPEC, AxonnParallel(grid=grid), grid, TrainingSetup(batch), 2)
    plain = build_axonn_workload(
        SPEC, AxonnParallel(grid=grid), grid, TrainingSetup(batch, flash_attention=False), 2
    )
    names = {op.name for op in plain.programs[0].ops}
    assert {"L0.attn.qk", "L0.attn.softmax.fwd", "L0.attn.dropout.fwd", "L0.attn.pv"} <= names
    assert {"L0.attn.dq", "L0.attn.dk", "L0.attn.dv", "L0.attn.dp"} <= names
    assert "L0.attn.fwd" in {op.name for op in flash.programs[0].ops} and "L0.attn.fwd" not in names
    qk = next(op for op in plain.programs[0].ops if op.name == "L0.attn.qk")
    heads = SPEC.heads // 2
    s, d = SPEC.seq_len, SPEC.head_dim
    assert qk.shape == (s, s, d, 2 * heads)  # batched over sequences x local heads
    assert qk.flops == 2.0 * s * s * d * 2 * heads  # the full (uncausal) s x s scores
    mem_flash = axonn_memory(SPEC, grid, 2)
    mem_plain = axonn_memory(SPEC, grid, 2, flash_attention=False)
    scores = 2 * s * s * heads * (4 * SPEC.dtype_bytes + 1)
    assert mem_plain.activations - mem_flash.activations == pytest.approx(scores)


def test_fragmentation_is_a_fraction_of_short_lived_memory() -> None:
    from workloads.memory import FRAGMENTATION_FRACTION

    mem = axonn_memory(SPEC, Grid(x=1, y=1, z=2, data=1), 2)
    d = mem.as_dict()
    assert d["fragmentation"] == pytest.approx(
        FRAGMENTATION_FRACTION * (mem.activations + mem.logits + mem.gathered_weights)
    )
    assert d["total"] == pytest.approx(sum(v for k, v in d.items() if k != "total"))
