"""Choosing an AxoNN grid that holds at scale: the screen prices collectives as the engine
does (latency per ring step, the group's real size, all instances at once), and
`axsim simulate` without a grid keeps the fastest simulated of the replay's best few and
says so in its choices."""

from __future__ import annotations

import json
import re

import pytest

from simulator.cli import main
from simulator.config import load_config
from simulator.engine.compiled import CommInfo
from simulator.search.analytical import PaperBandwidths
from simulator.search.grids import analytical_comm_time, priced_comm
from simulator.trials.automatic import DEFAULT_SIMULATED, chooses_grid, simulate_best_of
from workloads.axonn.grid import axonn_groups
from workloads.axonn.params import Grid
from workloads.ops import CollectiveKind as K

SMALL = ["cluster.machine=dgx-h100", "cluster.gpus=16", "model.name=gpt-tiny"]
SMALL += ["training.batch_tokens=4096"]


def test_priced_screen_pays_every_ring_step() -> None:
    """A 1 MiB all-gather over Z = 512 GCDs (64 Frontier nodes) is latency-bound: the
    priced time is the engine pricer's, at least the 63 node-crossing steps' latency
    above the analytical bandwidth-only time."""
    cfg = load_config(None, ["cluster.machine=frontier", "cluster.gpus=512", "model.name=gpt-5b"])
    grid = Grid(x=1, y=1, z=512, data=1)
    priced = priced_comm(cfg)
    info = CommInfo("z", 0, K.ALL_GATHER, float(2**20))
    t = priced.for_groups(axonn_groups(grid))(info)
    members = axonn_groups(grid)["z"].members
    bundles = priced.pricer.bundles(K.ALL_GATHER, members, float(2**20), 0, "ring")
    assert t == pytest.approx(
        max(priced.pricer.estimate_time_s(b, 2**20, K.ALL_GATHER) for b in bundles)
    )
    step = priced.pricer.params.collectives.term("Simple").inter_step_s
    ll = priced.pricer.params.collectives.term("LL").inter_step_s
    beta = analytical_comm_time(grid, PaperBandwidths("frontier"))(info)
    assert t >= beta + 63 * min(step, ll)


def test_simulate_keeps_the_fastest_of_the_replays_best() -> None:
    cfg = load_config(None, SMALL)
    assert chooses_grid(cfg)
    res = simulate_best_of(cfg)
    grid = res.report.choices[0]
    assert grid["what"] == "grid" and grid["value"] == "x".join(
        str(res.report.grid[k]) for k in ("x", "y", "z", "data")
    )
    times = [float(t) for t in re.findall(r"simulated ([0-9.]+) s", grid["reason"])]
    assert len(times) == DEFAULT_SIMULATED
    assert times == sorted(times)  # listed fastest first
    assert res.report.iteration_time_s == pytest.approx(times[0], abs=0.006)
    assert "estimated" in grid["reason"]


def test_a_fixed_grid_is_simulated_as_given(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = load_config(None, [*SMALL, "parallel.grid={x: 2, y: 1, z: 4, data: 2}"])
    assert not chooses_grid(cfg)
    args = ["simulate", "--machine", "dgx-h100", "--gpus", "16", "--model", "gpt-tiny"]
    assert main([*args, "--batch-tokens", "4096", "--grid", "2,1,4,2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["grid"] == {"x": 2, "y": 1, "z": 4, "data": 2}
    assert all(c["what"] != "grid" for c in report["choices"])


@pytest.mark.parametrize("grid", ["1,1,64,1", "2,1,32,1", "1,1,16,4"])
def test_screen_estimate_matches_the_simulation_on_small_grids(grid: str) -> None:
    """The static replay prices each collective in the algorithm the engine runs: GPT-tiny
    on 64 Perlmutter GPUs, where the layer-norm gradients' small all-reduces over a Z
    group spanning 4-16 nodes run as trees (the tuner's pick on latency) and next to
    nothing interferes with compute, estimates the simulated iteration within 2% (pricing them as
    rings read 21-89% over: 2 (Z - 1) ring steps of latency each)."""
    from simulator.api import simulate
    from simulator.cost.interference import comm_stream_order, serialised_streams, stream_setup
    from simulator.plan import training_setup
    from simulator.search.estimate import replay_iteration_s
    from simulator.search.grids import _kernel_model
    from topologies.hardware import gpu_spec
    from workloads.axonn.workload import build_axonn_workload

    x, y, z, d = (int(v) for v in grid.split(","))
    cfg = load_config(
        None,
        [
            "cluster.machine=perlmutter",
            "cluster.gpus=64",
            "model.name=gpt-tiny",
            "training.batch_tokens=131072",
            f"parallel.grid={{x: {x}, y: {y}, z: {z}, data: {d}}}",
        ],
    )
    report = simulate(cfg).report
    # like for like: the replay leaves out compute slowed by overlapped communication
    assert report.compute_by_kind_s.get("interference", 0.0) < 1e-3 * report.iteration_time_s
    g = Grid(x=x, y=y, z=z, data=d)
    gpu = gpu_spec(cfg.cluster.gpu_type)
    graph = build_axonn_workload(
        cfg.model.spec(),
        cfg.parallel,
        g,
        training_setup(cfg),
        int(report.parameters["microbatch_sequences"]),
    )
    program = graph.programs[0]
    serial = serialised_streams(
        comm_stream_order(program), gpu.vendor, stream_setup(graph.metadata), "perlmutter"
    )
    comm = priced_comm(cfg).for_groups(axonn_groups(g))
    estimate = replay_iteration_s(program, _kernel_model(cfg, gpu), comm, serial)
    assert estimate == pytest.approx(report.iteration_time_s, rel=0.02)
