"""What-ifs that add resources are never slower (found by an audit of what-if runs).

The collective tuner chooses for every instance of a group at once. Found by the audit: choosing ring or tree on one instance alone favoured the tree
where the group's concurrent instances then collide on the fabric, so more fabric
bandwidth (or a larger message) could be slower, and the full mode (one activation per
instance) chose differently from the symmetric mode (all instances at once).
"""

from __future__ import annotations

from itertools import pairwise

import pytest

from simulator.api import simulate
from simulator.benchmarks.collectives import collective_sweep
from simulator.config import load_config
from simulator.network.params import network_params_for
from topologies.machines import build_machine

CASE = [
    "cluster.gpus=512",
    "model.name=gpt-5b",
    "training.batch_tokens=1048576",
    "parallel.grid={x: 1, y: 1, z: 8, data: 64}",
]


def _time(*extra: str) -> float:
    return simulate(load_config(None, [*CASE, *extra])).report.iteration_time_s


def test_more_fabric_bandwidth_is_never_slower() -> None:
    times = [_time(f"cluster.fabric_link_bandwidth_GBps={f}") for f in (25, 30, 35, 40, 80)]
    assert all(b <= a * (1 + 1e-9) for a, b in pairwise(times)), times


@pytest.mark.slow
def test_full_and_symmetric_modes_choose_alike() -> None:
    fabric = "cluster.fabric_link_bandwidth_GBps=35"
    full = _time(fabric, "engine.mode=full")
    assert full == pytest.approx(_time(fabric, "engine.mode=symmetric"), rel=1e-9)


def test_a_larger_message_is_never_faster_with_every_instance_running() -> None:
    topo = build_machine("perlmutter", 128)
    sizes = [int(2**22 * 2 ** (k / 2)) for k in range(5)]  # 4 MiB ... 16 MiB
    rows = collective_sweep(
        topo, "all-reduce", 64, 8, sizes, "auto", "contention", network_params_for(topo), "all"
    )
    times = [r.time_s for r in rows]
    assert all(b >= a for a, b in pairwise(times)), times


@pytest.mark.parametrize(
    "machine,gpus,model,grid",
    [
        ("perlmutter", 256, "gpt-20b", "{x: 2, y: 2, z: 16, data: 4}"),
        ("alps", 128, "gpt-10b", "{x: 2, y: 2, z: 8, data: 4}"),
    ],
)
def test_more_nics_per_node_are_never_slower(
    machine: str, gpus: int, model: str, grid: str
) -> None:
    """Removing NICs must not move nodes onto other switches (it did: 3 NICs re-packed
    the chassis and ran slower than 2)."""
    base = [f"cluster.machine={machine}", f"cluster.gpus={gpus}", f"model.name={model}"]
    base += ["training.batch_tokens=1048576", f"parallel.grid={grid}"]
    times = [
        simulate(load_config(None, [*base, f"cluster.nics_per_node={k}"])).report.iteration_time_s
        for k in (1, 2, 3, 4)
    ]
    assert all(b <= a * (1 + 1e-9) for a, b in pairwise(times)), times
