"""Collective micro-benchmarks on a topology, reported like nccl-tests.

A sweep runs one collective per message size through the full engine and network model,
on every instance of a strided group that tiles the machine (the concurrent setting of a
real parallel job) or on one instance alone. `per_node` places a group as K GPUs on each
of group/K consecutive nodes (benchmark layouts such as Vidur's (workers, devices per
node) = (16, 8) or (2, 1)). Bus bandwidth follows nccl-tests' convention
(all-reduce 2(p-1)/p, all-gather / reduce-scatter / all-to-all (p-1)/p, others 1).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from simulator.cost.model import CostModel, RooflineKernels
from simulator.engine.core import Engine
from simulator.errors import ConfigError
from simulator.network.params import NetworkParams, network_params_for
from simulator.network.pricing import CollectivePricer
from topologies.types import Topology
from workloads.graph import OpGraph, Program
from workloads.groups import ProcessGroups, strided_groups
from workloads.ops import CollectiveKind, CollectiveOp, RecvOp, SendOp, bus_factor

if TYPE_CHECKING:  # the calibration models (pydantic) load only when a file is given
    from simulator.cost.calibration import Calibration

OPS = tuple(k.value for k in CollectiveKind)


@dataclass(frozen=True)
class CollectiveResult:
    """One row of a sweep (nccl-tests columns)."""

    bytes: int
    time_s: float
    algbw_GBps: float
    busbw_GBps: float
    algorithm: str
    group_size: int
    instances: int
    protocol: str = "Simple"

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def strided_instances(num_gpus: int, group: int, stride: int, instances: str) -> np.ndarray:
    """Member table: `group` GPUs `stride` apart, tiling the machine or one instance."""
    if group < 1 or stride < 1:
        raise ConfigError(f"--group and --placement must be positive, got {group} and {stride}")
    if group * stride > num_gpus:
        raise ConfigError(
            f"--group {group} with --placement {stride} needs {group * stride} GPUs; the topology has {num_gpus}"
        )
    if instances == "one":
        return (np.arange(group, dtype=np.int64) * stride)[None, :]
    if num_gpus % (group * stride):
        raise ConfigError(
            f"--group {group} with --placement {stride} does not tile {num_gpus} GPUs (use --instances one)"
        )
    return strided_groups(num_gpus, group, stride)


def per_node_instances(
    num_gpus: int, gpus_per_node: int, group: int, per_node: int, instances: str
) -> np.ndarray:
    """Member table: `per_node` GPUs on each of group/per_node consecutive nodes."""
    if per_node < 1 or group % per_node:
        raise ConfigError(f"--per-node {per_node} must divide --group {group}")
    if per_node > gpus_per_node:
        raise ConfigError(f"--per-node {per_node} exceeds the {gpus_per_node} GPUs of a node")
    span = group // per_node  # nodes per instance
    nodes = num_gpus // gpus_per_node
    if span > nodes:
        raise ConfigError(
            f"--group {group} with --per-node {per_node} needs {span} nodes; the topology has {nodes}"
        )
    slots = gpus_per_node // per_node
    rows = []
    for block in range(nodes // span if instances == "all" else 1):
        for chunk in range(slots if instances == "all" else 1):
            rows.append(
                [(block * span + i) * gpus_per_node + chunk * per_node + j
                 for i in range(span) for j in range(per_node)]
            )  # fmt: skip
    return np.asarray(rows, dtype=np.int64)


def _graph(
    kind: CollectiveKind, members: np.ndarray, nbytes: float, algorithm: str | None, world: int
) -> OpGraph:
    p = members.shape[1]
    if kind is CollectiveKind.SEND_RECV:
        if p != 2:
            raise ConfigError("send-recv needs --group 2")
        programs: tuple[Program, ...] = (
            Program("send", (SendOp("send", "g", 1, nbytes, "t", "p2p"),)),
            Program("recv", (RecvOp("recv", "g", 0, nbytes, "t", "p2p"),)),
            Program("idle", ()),
        )
        rank_program = np.full(world, 2, dtype=np.int64)
        rank_program[members[:, 0]] = 0
        rank_program[members[:, 1]] = 1
        classes = rank_program.copy()
    else:
        op = CollectiveOp(kind.value, kind, "g", nbytes, "t", "comm", algorithm=algorithm)
        programs = (Program("coll", (op,)), Program("idle", ()))
        rank_program = np.ones(world, dtype=np.int64)
        rank_program[members.ravel()] = 0
        classes = rank_program.copy()
    groups = ProcessGroups(world, {"g": members})
    graph = OpGraph(world, programs, rank_program, groups, rank_class=classes, name="microbench")
    graph.validate()
    return graph


def member_table(
    topology: Topology, group: int, stride: int, instances: str, per_node: int | None = None
) -> np.ndarray:
    """The group instances a sweep runs on (see `collective_sweep`)."""
    if per_node is None:
        return strided_instances(topology.num_gpus, group, stride, instances)
    return per_node_instances(topology.num_gpus, topology.gpus_per_node, group, per_node, instances)


def collective_sweep(
    topology: Topology,
    op: str,
    group: int,
    stride: int,
    sizes: list[int],
    algorithm: str = "auto",
    network: str = "contention",
    params: NetworkParams | None = None,
    instances: str = "all",
    calibration: Calibration | None = None,
    per_node: int | None = None,
    protocol: str = "auto",
    pricer: CollectivePricer | None = None,
    library: str | None = None,
) -> list[CollectiveResult]:
    """Time one collective per size; one engine run per size, pricing caches shared.

    `per_node` (instead of the stride) places each group as that many GPUs per node;
    `protocol` forces NCCL's protocol (LL, LL128, Simple) instead of the tuner's choice;
    `library` names the collective library build (its algorithms and measured regimes).
    A given `pricer` (of this topology) is used instead of a new one, so sweeps of several
    algorithms share its bindings; `algorithm` then goes on each collective op."""
    try:
        kind = CollectiveKind(op)
    except ValueError:
        raise ConfigError(f"--op '{op}' unknown (use one of {', '.join(OPS)})") from None
    if instances not in ("all", "one"):
        raise ConfigError(f"--instances must be 'all' or 'one', got '{instances}'")
    members = member_table(topology, group, stride, instances, per_node)
    op_algorithm = None
    if pricer is None:
        pricer = CollectivePricer(
            topology,
            params if params is not None else network_params_for(topology),
            algorithm,
            calibration=calibration,
            protocol=protocol,
            library=library,
        )
    elif algorithm != "auto":
        op_algorithm = algorithm
    cost = CostModel(RooflineKernels(1e15), pricer, network)
    world = topology.num_gpus
    out = []
    for size in sizes:
        if size <= 0:
            raise ConfigError(f"--bytes must be positive, got {size}")
        graph = _graph(kind, members, float(size), op_algorithm, world)
        res = Engine(graph, topology, cost, mode="symmetric", steady_state=False).run()
        t = res.iteration_time_s
        chosen = pricer.bundles(
            kind,
            members if kind is not CollectiveKind.SEND_RECV else members[:, :2],
            float(size),
            algorithm=op_algorithm,
            # a collective reuses the engine's key (its choice and bindings are cached)
            key=("probe", kind, size) if kind is CollectiveKind.SEND_RECV else ("g", "all"),
        )
        algbw = size / t / 1e9 if t > 0 else float("inf")
        proto = (
            pricer.plan(chosen[0], kind, float(size), shared=network == "contention").protocol
            if chosen
            else "-"
        )
        out.append(
            CollectiveResult(
                bytes=size,
                time_s=t,
                algbw_GBps=algbw,
                busbw_GBps=algbw * bus_factor(kind, group),
                algorithm=chosen[0].algorithm if chosen else "none",
                group_size=group,
                instances=int(members.shape[0]),
                protocol=proto,
            )
        )
    return out
