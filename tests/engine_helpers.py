"""Small builders shared by the engine and network tests."""

from __future__ import annotations

import itertools
import json

import networkx as nx
import numpy as np

from simulator.api import simulate
from simulator.config import load_config
from simulator.cost.model import CostModel, RooflineKernels
from simulator.engine.core import Engine, EngineResult
from simulator.network.params import NetworkParams
from simulator.network.pricing import CollectivePricer
from topologies.types import (
    DeviceKind,
    DeviceTable,
    LinkKind,
    LinkTable,
    Route,
    Topology,
    device_kind_code,
    link_kind_code,
)
from workloads.graph import OpGraph
from workloads.groups import ProcessGroups
from workloads.ops import Op

FLOPS = 1e15  # 1 PFLOP/s test GPU: 1e9 FLOPs take 1 µs


class ShortestPathRouter:
    """Fewest-hop routes on the graph (tests only)."""

    def route(self, topology: Topology, src: int, dst: int) -> Route:
        path = nx.shortest_path(topology.graph, src, dst)
        links = tuple(topology.graph.edges[a, b]["id"] for a, b in itertools.pairwise(path))
        return Route(paths=(links,), weights=(1.0,))


def build_graph_topology(
    num_gpus: int,
    num_switches: int,
    edges: list[tuple[int, int, float]],
    gpus_per_node: int | None = None,
) -> Topology:
    """GPUs 0..num_gpus-1 then switches; `edges` (a, b, GB/s) become links in both directions."""
    n = num_gpus + num_switches
    kinds = np.array(
        [device_kind_code(DeviceKind.GPU)] * num_gpus
        + [device_kind_code(DeviceKind.SWITCH)] * num_switches,
        dtype=np.int8,
    )
    per = gpus_per_node or num_gpus
    node = np.array([i // per for i in range(num_gpus)] + [-1] * num_switches, dtype=np.int32)
    local = np.array([i % per for i in range(num_gpus)] + list(range(num_switches)), dtype=np.int32)
    src, dst, bw = [], [], []
    for a, b, gbps in edges:
        src += [a, b]
        dst += [b, a]
        bw += [gbps * 1e9] * 2
    m = len(src)
    return Topology(
        name="test",
        devices=DeviceTable(
            kind=kinds, node=node, local_index=local, group=np.full(n, -1, dtype=np.int32)
        ),
        links=LinkTable(
            src=np.array(src, dtype=np.int64),
            dst=np.array(dst, dtype=np.int64),
            kind=np.full(m, link_kind_code(LinkKind.NIC), dtype=np.int8),
            bandwidth_Bps=np.array(bw),
            latency_s=np.zeros(m),
        ),
        gpus=np.arange(num_gpus, dtype=np.int64),
        gpus_per_node=per,
        router=ShortestPathRouter(),
        metadata={"package_size": 1},
    )


def graph_of(
    rank_ops: dict[int, list[Op]],
    groups: dict[str, list[list[int]]],
    world: int,
    classes: list[int] | None = None,
) -> OpGraph:
    g = OpGraph.from_rank_ops(rank_ops, ProcessGroups(world, groups))
    if classes is not None:
        g.rank_class = np.asarray(classes, dtype=np.int64)
    g.validate()
    return g


def run(
    graph: OpGraph,
    topology: Topology,
    network: str = "contention",
    mode: str = "full",
    algorithm: str = "ring",
    params: NetworkParams | None = None,
    flops: float = FLOPS,
    **kw: object,
) -> EngineResult:
    pricer = CollectivePricer(topology, params or NetworkParams.ideal(), algorithm)
    cost = CostModel(RooflineKernels(flops), pricer, network)
    return Engine(graph, topology, cost, mode=mode, **kw).run()  # type: ignore[arg-type]


# A small Frontier (dragonfly, adaptive routing) whose symmetric run activates parity
# subsets of the z and y groups: the subsets' layout classes are classes the tuner bound.
SMALL_FRONTIER = [
    "cluster.machine=frontier",
    "cluster.gpus=64",
    "cluster.nodes=null",
    "model.name=gpt-80b",
    "parallel.grid={x: 2, y: 2, z: 4, data: 4}",
    "engine.mode=symmetric",
]
_VOLATILE = ("wall", "setup", "events_per", "cpu")  # report keys that time the run itself


def _scrub(o: object) -> object:
    if isinstance(o, dict):
        return {k: _scrub(v) for k, v in o.items() if not any(s in k for s in _VOLATILE)}
    if isinstance(o, list):
        return [_scrub(v) for v in o]
    return o


def run_fingerprint(overrides: list[str]) -> tuple[object, ...]:
    """Everything a run yields, bit for bit, for comparing two code paths: iteration time,
    per-link bytes, every simulated rank's records and the report (less its timings)."""
    r = simulate(load_config(None, overrides))
    tl = r.engine.timeline
    return (
        r.engine.iteration_time_s,
        r.engine.link_bytes.tobytes(),
        [repr(tl.rank(k)) for k in tl.ranks],
        json.dumps(_scrub(r.report.to_json()), sort_keys=True, default=str),
    )
