"""Reported engine issue (found while building the strategy workloads): a CostModel reused
across Engine runs in different modes gives wrong times.

`CollectivePricer` caches bundles by the activation key (group, rendezvous key). In
symmetric mode the key ('tp', 0) stands for *every* instance with class signature 0; in
full mode the same key stands for instance 0 alone. A pricer that served a symmetric run
hands the all-instance bundle to the full run's instance 0, which then contends with the
other instances' own activations. `simulate()` builds a fresh cost model per run, so the
CLI is not affected; any caller reusing one (sweeps, tests) is. Fix idea: include the
mode or the instance rows in the cache key. Fixed: activation keys name the mode (and
"all" when every instance takes part, which means the same in both modes).
"""

from __future__ import annotations

from simulator.cost.model import CostModel, RooflineKernels
from simulator.engine.core import Engine
from simulator.network.params import NetworkParams
from simulator.network.pricing import CollectivePricer
from tests.engine_helpers import graph_of
from topologies.synthetic import build_full_mesh
from workloads.ops import CollectiveKind, CollectiveOp


def test_reusing_a_cost_model_across_modes_gives_the_same_time() -> None:
    op = CollectiveOp("ar", CollectiveKind.ALL_REDUCE, "tp", 8e6, "ar", "comm:tp")
    graph = graph_of({r: [op] for r in range(4)}, {"tp": [[0, 1], [2, 3]]}, 4, classes=[0] * 4)
    topo = build_full_mesh(4, 20e9, 0.0)
    shared = CostModel(
        RooflineKernels(1e15), CollectivePricer(topo, NetworkParams.ideal(), "ring"), "contention"
    )
    symmetric = Engine(graph, topo, shared, mode="symmetric").run().iteration_time_s
    full_reused = Engine(graph, topo, shared, mode="full").run().iteration_time_s
    assert full_reused == symmetric
