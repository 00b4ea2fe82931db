"""The symmetric mode equals the full mode on nodes whose GPUs are wired differently.

Frontier's NICs hang off the odd GCDs and its Infinity Fabric links differ in width, so
group instances built from different GCD positions are not equally fast; run in lockstep
as one class they made the slowest the pace for all (0.3% off the full mode).
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.api import simulate
from simulator.config import load_config
from topologies.machines import build_machine
from topologies.positions import node_position_classes


@pytest.mark.parametrize(
    "machine,nics,split",
    [
        ("perlmutter", None, False),
        ("alps", None, False),
        ("dgx-h100", None, False),
        ("frontier", None, True),
        ("perlmutter", 2, True),  # two GPUs share each NIC: positions differ
    ],
)
def test_positions_split_only_non_uniform_nodes(
    machine: str, nics: int | None, split: bool
) -> None:
    topo = build_machine(machine, 2, nics_per_node=nics)
    classes = node_position_classes(topo)
    assert (classes is not None) == split
    if classes is not None:  # the same positions on every node; Frontier: even and odd GCDs
        per_node = topo.gpus_per_node
        np.testing.assert_array_equal(classes[:per_node], classes[per_node:])
        assert 1 < len(set(classes.tolist())) <= per_node
    if machine == "frontier":
        np.testing.assert_array_equal(classes, np.tile([0, 1], 8))


@pytest.mark.parametrize(
    "grid",
    ["{x: 1, y: 1, z: 8, data: 16}", "{x: 2, y: 1, z: 4, data: 16}", "{x: 2, y: 4, z: 2, data: 8}"],
)
def test_frontier_symmetric_equals_full(grid: str) -> None:
    base = ["cluster.machine=frontier", "cluster.gpus=128", "model.name=gpt-10b"]
    base += ["training.batch_tokens=1048576", f"parallel.grid={grid}"]
    full = simulate(load_config(None, [*base, "engine.mode=full"]))
    sym = simulate(load_config(None, [*base, "engine.mode=symmetric"]))
    assert sym.engine.mode == "symmetric"
    assert sym.report.iteration_time_s == pytest.approx(full.report.iteration_time_s, rel=1e-12)
