"""AxoNN's schedule per implementation and weight lifetime (workloads/axonn/schedule.py):
one count of what is sent, shared by the simulated program and the analytical model;
what each lifetime gathers; what the memory model charges for it."""

from __future__ import annotations

import pytest

from simulator.cost.model import CostModel, RooflineKernels
from simulator.engine.core import Engine
from simulator.network.params import NetworkParams
from simulator.network.pricing import CollectivePricer
from simulator.outputs.analysis import record_weights
from simulator.search.analytical import axonn_comm_bytes
from topologies.synthetic import build_full_mesh
from workloads.axonn.implementation import PRESETS, WeightPolicy, weight_policy
from workloads.axonn.memory import axonn_memory
from workloads.axonn.params import AxonnParallel, Grid
from workloads.axonn.workload import TrainingSetup, axonn_calls, build_axonn_workload
from workloads.models import TransformerSpec
from workloads.ops import CollectiveKind, CollectiveOp, WaitOp

SPEC = TransformerSpec(name="s", layers=3, hidden=64, heads=8, seq_len=32, vocab=128)
GRID = Grid(x=2, y=2, z=2, data=2)
MICROBATCHES = 4  # compressed to first / middle x2 / last: the copies must be counted

LIFETIMES: list[dict[str, object]] = [
    {},
    {"weight_lifetime": "regather"},
    {"weight_lifetime": "keep"},
    {"weight_lifetime": "cache"},
    {"weight_lifetime": "cache", "cached_layers": 1},
]


def _params(implementation: str, **kw: object) -> AxonnParallel:
    return AxonnParallel(grid=GRID, implementation=implementation, **kw)  # type: ignore[arg-type]


def _training(checkpointing: bool = True) -> TrainingSetup:
    batch = MICROBATCHES * SPEC.seq_len * GRID.z * GRID.data
    return TrainingSetup(batch, activation_checkpointing=checkpointing)


def _simulated_bytes_by_group(params: AxonnParallel, training: TrainingSetup) -> dict[str, float]:
    graph = build_axonn_workload(SPEC, params, GRID, training, 1)
    topo = build_full_mesh(GRID.size, 20e9, 1e-6)
    pricer = CollectivePricer(topo, NetworkParams.ideal(), "ring")
    res = Engine(graph, topo, CostModel(RooflineKernels(50e12, 1e12, 2e-6), pricer)).run()
    tl = res.timeline.rank(0)
    warps = res.timeline.metadata["warps"]
    weight = record_weights(len(tl), warps.get(0, []))  # type: ignore[union-attr]
    comm = tl.mask_comm()
    out: dict[str, float] = {}
    for g, nbytes, w in zip(tl.group[comm], tl.bytes[comm], weight[comm], strict=True):
        out[str(g)] = out.get(str(g), 0.0) + float(nbytes) * w
    return out


@pytest.mark.parametrize(
    "lifetime", LIFETIMES, ids=lambda d: "-".join(map(str, d.values())) or "default"
)
@pytest.mark.parametrize("implementation", ["sc24", "litgpt", "axonn-0.2"])
@pytest.mark.parametrize("checkpointing", [True, False])
def test_simulated_bytes_per_group_equal_the_analytical_count(
    implementation: str, lifetime: dict[str, object], checkpointing: bool
) -> None:
    params = _params(implementation, **lifetime)
    training = _training(checkpointing)
    calls = axonn_calls(SPEC, GRID, params, training, 1)
    counted = axonn_comm_bytes(calls, MICROBATCHES)
    simulated = _simulated_bytes_by_group(params, training)
    assert simulated.keys() == counted.keys()
    for g in counted:
        assert simulated[g] == pytest.approx(counted[g], rel=1e-12), g


def _ops(params: AxonnParallel, checkpointing: bool = True) -> list[object]:
    graph = build_axonn_workload(SPEC, params, GRID, _training(checkpointing), 1)
    return list(graph.programs[0].ops)


def _z_gathers(ops: list[object], phase: str) -> list[str]:
    return [
        op.name
        for op in ops
        if isinstance(op, CollectiveOp)
        and op.kind is CollectiveKind.ALL_GATHER
        and op.group == "z"
        and op.phase == phase
    ]


def test_cache_preset_recompute_issues_no_all_gathers() -> None:
    """Cached blocks gather once per iteration, in the first microbatch's forward: their
    recompute and the later microbatches use the cache (the old cache_weights flag still
    gathered in the recompute)."""
    cached = _ops(_params("sc24", weight_lifetime="cache"))
    assert _z_gathers(cached, "recompute") == []
    assert _z_gathers(cached, "bwd") == []
    per_block = 4 * SPEC.layers
    assert len(_z_gathers(cached, "fwd")) == per_block  # the first microbatch only
    one = _ops(_params("sc24", weight_lifetime="cache", cached_layers=1))
    recomputed = _z_gathers(one, "recompute")
    assert recomputed and not any(n.startswith("L0.") for n in recomputed)


@pytest.mark.parametrize(
    ("implementation", "lifetime", "backward_gathers"),
    [("sc24", None, False), ("sc24", "regather", True), ("axonn-0.2", None, True)],
)
def test_only_regather_gathers_in_backward(
    implementation: str, lifetime: str | None, backward_gathers: bool
) -> None:
    ops = _ops(_params(implementation, weight_lifetime=lifetime))
    blocks = [n for n in _z_gathers(ops, "bwd") if n.startswith("L")]
    assert bool(blocks) is backward_gathers


def test_sc24_forward_gathers_block_and_axonn_02_prefetches() -> None:
    """The SC'24 code runs the forward outside optimize_communication: each forward gather
    is waited at once. axonn 0.2 prefetches the next linear's gather in the forward."""

    def waited_at_once(ops: list[object]) -> bool:
        out = []
        for i, op in enumerate(ops):
            if isinstance(op, CollectiveOp) and op.phase == "fwd" and op.group == "z":
                nxt = ops[i + 1]
                out.append(isinstance(nxt, WaitOp) and nxt.target == i)
        return all(out) and bool(out)

    assert waited_at_once(_ops(_params("sc24")))
    assert not waited_at_once(_ops(_params("axonn-0.2")))


def test_first_microbatch_is_its_own_segment_when_blocks_cache() -> None:
    graph = build_axonn_workload(
        SPEC, _params("sc24", weight_lifetime="cache"), GRID, _training(), 1
    )
    keys = [s.key for s in graph.programs[0].segments]
    assert keys[0] == "microbatch.first" and set(keys[1:]) == {"microbatch"}


def _memory(implementation: str, policy: WeightPolicy, oag: bool = True) -> float:
    overlap = ("oar", "ors", "oag") if oag else ("oar", "ors")
    return axonn_memory(
        SPEC,
        GRID,
        1,
        preset=PRESETS[implementation],
        policy=policy,
        overlap=overlap,  # type: ignore[arg-type]
    ).gathered_weights


def test_memory_charged_matches_what_is_kept() -> None:
    b = SPEC.dtype_bytes
    calls = axonn_calls(SPEC, GRID, _params("sc24"), _training(), 1)
    per_block = sum(lay.gathered_elems for lay in calls.blocks)
    largest = max(lay.gathered_elems for lay in calls.blocks)
    # regather: the linear in use and one prefetched
    assert _memory("sc24", WeightPolicy("regather", 0)) == b * 2 * largest
    assert _memory("sc24", WeightPolicy("regather", 0), oag=False) == b * largest
    # keep: the recompute saves a whole block for its backward, beside one prefetch
    assert _memory("sc24", WeightPolicy("keep", 0)) == b * (per_block + largest)
    # cache: every block for the iteration; K blocks plus what the others keep
    assert _memory("sc24", WeightPolicy("keep", SPEC.layers)) == b * SPEC.layers * per_block
    assert _memory("sc24", WeightPolicy("keep", 1)) == b * (2 * per_block + largest)


def test_sc24_gradients_are_fp32_main_grads() -> None:
    """Megatron's fp32 main_grad (4 B per parameter) plus, with ORS, the bf16 shard
    gradients axonn holds until the backward ends; axonn 0.2 keeps bf16 gradients."""
    for impl, per_param in (("sc24", 4), ("axonn-0.2", 2)):
        preset = PRESETS[impl]
        mem = axonn_memory(SPEC, GRID, 1, preset=preset, policy=WeightPolicy("keep", 0))
        calls = axonn_calls(SPEC, GRID, _params(impl), _training(), 1)
        params = calls.params_per_gpu()
        shards = SPEC.layers * sum(lay.shard_elems for lay in calls.blocks)
        full_grad = SPEC.dtype_bytes * max(lay.gathered_elems for lay in calls.blocks)
        pending = SPEC.dtype_bytes * shards if impl == "sc24" else 0.0
        assert mem.gradients == pytest.approx(per_param * params + pending + full_grad)


def test_weight_policy_defaults_follow_the_implementation() -> None:
    assert weight_policy(_params("sc24"), 4) == WeightPolicy("keep", 0)
    assert weight_policy(_params("axonn-0.2"), 4) == WeightPolicy("regather", 0)
    assert weight_policy(_params("sc24", weight_lifetime="cache"), 4) == WeightPolicy("keep", 4)
    assert weight_policy(
        _params("axonn-0.2", weight_lifetime="cache", cached_layers=2), 4
    ) == WeightPolicy("regather", 2)


def test_cached_layers_needs_the_cache_lifetime() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="cached_layers needs"):
        AxonnParallel(cached_layers=3)


@pytest.mark.parametrize("implementation", ["sc24", "litgpt", "axonn-0.2"])
def test_llama_architecture_syncs_only_the_parameters_it_has(implementation: str) -> None:
    """RMSNorm has a weight only, Llama's linears have no biases and rotary embeddings no
    position table: none of them may appear in the gradient sync, and the rotary kernel
    runs on q and k."""
    llama = TransformerSpec(
        name="l",
        layers=2,
        hidden=64,
        heads=8,
        seq_len=32,
        vocab=128,
        norm="rmsnorm",
        position="rope",
        bias=False,
        tied_embeddings=False,
        dropout=False,
    )
    params = _params(implementation)
    graph = build_axonn_workload(llama, params, GRID, _training(), 1)
    names = {op.name for op in graph.programs[0].ops}
    assert not any(".bias." in n or ".b.ar_" in n or "pos_embedding" in n for n in names)
    assert any(n.startswith("L0.ln1.w.ar_") for n in names)
    assert "L0.rope.fwd" in names
    # the untied output layer is stored beside the embedding
    untied = axonn_calls(llama, GRID, params, _training(), 1).head_params()
    tied = axonn_calls(SPEC, GRID, params, _training(), 1).head_params()
    # LitGPT never ties: a replicated embedding beside a 4D output linear either way
    assert untied == (tied if implementation == "litgpt" else 2 * tied)
