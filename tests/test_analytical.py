"""AxoNN's analytical communication model (simulator/search/analytical.py) against its equations
on hand-computed cases, the paper's bandwidth table and Eq. (7), and its ranking against
the simulator's on a small machine."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.search.analytical import (
    PaperBandwidths,
    TopologyBandwidths,
    axonn_comm_estimate,
    layer_comm_s,
)
from validation.experiments.simulations import axonn_grid, axonn_ranking
from workloads.axonn.params import Grid
from workloads.models import TransformerSpec, model_preset

BETA = {"x": 1.0, "y": 2.0, "z": 4.0, "data": 8.0}


def test_layer_equations_by_hand() -> None:
    """k=4, n=8, m=16, bf16, grid 2x2x2x2, beta = 1, 2, 4, 8 B/s for x, y, z, data.

    (1) t_AG = 1*32/8*2/4 = 2; (2) t_RS = 1/2*32/4*2/4 = 2; Z: 2 AG + RS = 6.
    (3) t_fwd = 2*1/2*16*8/4*2/1 = 64, twice (recompute): x = 128.
    (4) t_bwd = 2*1/2*16*4/4*2/2 = 16: y. (5) t_data = 2*1/2*32/8*2/8 = 1."""
    got = layer_comm_s(4, 8, 16, Grid(x=2, y=2, z=2, data=2), BETA, 2, transposed=False)
    assert got == pytest.approx({"x": 128.0, "y": 16.0, "z": 6.0, "data": 1.0})


def test_unequal_grid_and_transposed_layer() -> None:
    """grid 2x4x1x1, k=4, n=8, m=16, bf16, beta 1: no Z or data terms.

    normal: fwd over X: 2*1/2*16*8/(1*4)*2 = 64 (x2) -> x 128; bwd over Y:
    2*3/4*16*4/(1*2)*2 = 96 -> y. Transposed: X and Y exchange sizes and roles: fwd over
    Y with Gx'=4: 2*3/4*16*8/(1*2)*2 = 192 (x2) -> y 384; bwd over X: 2*1/2*16*4/4*2 = 32."""
    ones = dict.fromkeys(BETA, 1.0)
    g = Grid(x=2, y=4)
    assert layer_comm_s(4, 8, 16, g, ones, 2, False) == pytest.approx(
        {"x": 128.0, "y": 96.0, "z": 0.0, "data": 0.0}
    )
    assert layer_comm_s(4, 8, 16, g, ones, 2, True) == pytest.approx(
        {"x": 32.0, "y": 384.0, "z": 0.0, "data": 0.0}
    )


def test_microbatches_repeat_only_the_z_collectives() -> None:
    g = Grid(x=2, y=2, z=2, data=2)
    one = layer_comm_s(4, 8, 16, g, BETA, 2, False, microbatches=1)
    three = layer_comm_s(4, 8, 16, g, BETA, 2, False, microbatches=3)
    assert three["z"] == pytest.approx(3 * one["z"])
    assert {k: three[k] for k in ("x", "y", "data")} == {k: one[k] for k in ("x", "y", "data")}


def _calls(spec, grid, implementation, tokens=2048, lifetime=None):  # type: ignore[no-untyped-def]
    from workloads.axonn.implementation import PRESETS, WeightPolicy
    from workloads.axonn.schedule import AxonnCalls

    preset = PRESETS[implementation]
    policy = WeightPolicy(lifetime or preset.default_lifetime, 0)
    return AxonnCalls(spec, grid, preset, policy, tokens, True)


@pytest.mark.parametrize("implementation", ["sc24", "axonn-0.2"])
def test_pure_data_parallel_counts_only_the_gradient_sync(implementation: str) -> None:
    """Pure data parallelism: only Eq. (5), over every parameter a GPU stores, in the
    implementation's gradient precision: 2(d-1)/d * bytes / beta (axonn-0.2 reduces the
    position embedding over the world, which is the data group here)."""
    spec = model_preset("gpt-5b")
    beta = 25e9
    calls = _calls(spec, Grid(data=8), implementation)
    est = axonn_comm_estimate(calls, 1, lambda inner, own: beta)
    db = 4 if implementation == "sc24" else 2
    total = sum(est.by_group_s.values())
    assert total == pytest.approx(2 * 7 / 8 * calls.params_per_gpu() * db / beta)
    assert est.by_group_s["x"] == est.by_group_s["y"] == est.by_group_s["z"] == 0.0
    assert est.total_s == pytest.approx(total)
    single = axonn_comm_estimate(_calls(spec, Grid(), implementation), 1, lambda i, o: beta)
    assert single.total_s == 0.0  # groups of one GPU cost nothing


def test_block_terms_are_the_papers_equations() -> None:
    """The SC'24 code with its 'keep' lifetime issues per layer exactly the paper's (6):
    all-gathers in forward and recompute, one reduce-scatter, the forward all-reduce twice,
    the backward one once (the head and the gradient sync are extra terms)."""
    spec = TransformerSpec(name="p", layers=3, hidden=64, heads=4, seq_len=16, vocab=256)
    grid = Grid(x=2, y=2, z=4, data=2)
    tokens = 32
    calls = _calls(spec, grid, "sc24", tokens)
    m = tokens * grid.z  # tokens of one data replica
    beta = dict(BETA, xy=1.0, world=1.0)
    want = dict.fromkeys(("x", "y", "z"), 0.0)
    for i, (_, k, n) in enumerate(spec.linear_shapes()):
        t = layer_comm_s(k, n, m, grid, beta, spec.dtype_bytes, i % 2 == 1)
        for g in want:
            want[g] += spec.layers * t[g]
    from simulator.search.analytical import inner_products, own_sizes
    from workloads.ops import bus_factor

    got = dict.fromkeys(want, 0.0)
    own = own_sizes(grid)
    for layer in range(spec.layers):
        for c in calls.block(layer, first_microbatch=True):
            got[c.group] += bus_factor(c.kind, own[c.group]) * c.nbytes / beta[c.group]
    assert inner_products(grid)["z"] == 4
    assert got == pytest.approx(want)


@pytest.mark.parametrize(
    ("machine", "inner", "own", "gbps"),
    [
        ("perlmutter", 1, 2, 76),
        ("perlmutter", 1, 4, 225),
        ("perlmutter", 1, 16, 80),
        ("perlmutter", 2, 2, 76),
        ("perlmutter", 2, 8, 40),
        ("perlmutter", 4, 3, 20),
        ("perlmutter", 32, 2, 20),
        ("frontier", 1, 8, 135),
        ("frontier", 1, 16, 40),
        ("frontier", 2, 4, 72),
        ("frontier", 4, 2, 36),
        ("frontier", 4, 8, 10),
        ("frontier", 8, 2, 5),
    ],
)
def test_paper_bandwidth_table(machine: str, inner: int, own: int, gbps: float) -> None:
    assert PaperBandwidths(machine)(inner, own) == gbps * 1e9


def test_paper_table_only_for_its_machines() -> None:
    with pytest.raises(ConfigError, match="no table for 'alps'"):
        PaperBandwidths("alps")


def test_eq7_across_nodes() -> None:
    """beta_i = beta_inter / min(Gnode, inner product) once a group leaves the node."""
    bw = TopologyBandwidths("perlmutter", 4, build=lambda nodes: None)  # type: ignore[arg-type,return-value]
    bw._inter = 80e9
    assert bw(2, 4) == pytest.approx(40e9)  # 2*4 GPUs > 4 per node
    assert bw(1, 8) == pytest.approx(80e9)
    assert bw(8, 2) == pytest.approx(20e9)


def test_groups_straddling_nodes_are_measured_where_they_run() -> None:
    """Groups of 3 consecutive GPUs on 4-GPU nodes cross node boundaries: their bandwidth
    is measured on the 3 nodes they tile, not looked up as a node-local group."""
    from topologies.machines import build_machine

    built: list[int] = []

    def build(nodes: int) -> object:
        built.append(nodes)
        return build_machine("perlmutter", nodes)

    bw = TopologyBandwidths("perlmutter", 4, build=build)  # type: ignore[arg-type]
    straddling = bw(1, 3)
    assert built == [3]
    node_local = bw(1, 2)
    assert straddling < 0.5 * node_local  # a NIC, not NVLink, bounds the crossing rings
    assert bw(1, 3) == straddling and built == [3, 1]  # cached


def test_ranking_agrees_with_simulation_on_a_small_machine() -> None:
    """Every valid grid of a 4-layer GPT-5B on 8 Perlmutter GPUs simulated: the simulated
    best is among the analytical model's top 5 (the paper runs its top 10)."""
    model = {"name": "gpt-5b", "layers": 4}
    batch = 2**15
    ranked = axonn_ranking("perlmutter", 8, model, batch)
    assert len(ranked) >= 10
    times = {}
    for c in ranked:
        g = [c["grid"][k] for k in ("x", "y", "z", "data")]
        rep = axonn_grid("perlmutter", 8, model, g, c["microbatch_sequences"], batch)
        times[c["model_rank"]] = rep["iteration_time_s"]
    best_rank = min(times, key=lambda r: times[r])
    assert best_rank <= 5, f"simulated best is the model's #{best_rank}"


def test_search_with_a_factor_3_pads_the_vocabulary_and_uses_y(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """12 GPUs and a power-of-two batch force a factor 3 into X or Y; a vocabulary of 256
    no longer rules Y=3 out (it is padded), so the search ranks and simulates such grids."""
    import json

    from simulator.cli import main

    args = ["search", "--machine", "perlmutter", "--gpus", "12", "--model", "gpt-tiny"]
    args += ["--batch-tokens", "512", "--set", "model.hidden=96", "--set", "model.heads=6"]
    assert main([*args, "--top", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    grids = [c["grid"] for c in out["ranked"]]
    assert all((g["x"] * g["y"]) % 3 == 0 for g in grids)
    assert any(g["y"] % 3 == 0 for g in grids)  # impossible before the padding (256 % 3)
    assert out["best"]["grid"] in grids[:3] and out["best"]["iteration_time_s"] > 0
