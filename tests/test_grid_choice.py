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
