"""Builders shared by the strategy tests: small hybrid/Optimus workloads and engine runs."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from simulator.cost.model import CostModel, KernelTimer, RooflineKernels
from simulator.engine.core import Engine, EngineResult
from simulator.network.params import NetworkParams
from simulator.network.pricing import CollectivePricer
from topologies.synthetic import build_full_mesh
from workloads.graph import OpGraph, Program
from workloads.hybrid.configure import Degrees, build_setup
from workloads.hybrid.params import HybridParallel
from workloads.hybrid.setup import HybridSetup
from workloads.hybrid.workload import build_hybrid_workload
from workloads.models import TransformerSpec
from workloads.ops import CollectiveOp, ComputeOp
from workloads.run import ClusterShape, TrainingSetup

SPEC = TransformerSpec(name="t", layers=4, hidden=64, heads=8, seq_len=32, vocab=128)


def hybrid(
    params: HybridParallel,
    gpus: int,
    *,
    tp: int = 1,
    pp: int = 1,
    sequences: int | None = None,
    mbs: int = 1,
    checkpointing: bool = True,
    spec: TransformerSpec = SPEC,
    gpus_per_node: int = 8,
    cross_entropy: str | None = None,
) -> tuple[HybridSetup, OpGraph]:
    """A validated setup and its OpGraph (`sequences` defaults to one per data rank)."""
    dp = gpus // (tp * pp)
    seqs = sequences if sequences is not None else dp * mbs
    training = TrainingSetup(
        seqs * spec.seq_len, activation_checkpointing=checkpointing, cross_entropy=cross_entropy
    )
    cluster = ClusterShape(gpus, gpus_per_node, 80e9)
    setup = build_setup(spec, params, training, cluster, Degrees(tp, pp, None), mbs)
    graph = build_hybrid_workload(spec, setup)
    graph.validate()
    return setup, graph


def run(
    graph: OpGraph,
    *,
    gpus_per_node: int | None = None,
    mode: str = "symmetric",
    network: str = "contention",
    algorithm: str = "auto",
    bandwidth: float = 20e9,
    latency: float = 1e-6,
    kernels: KernelTimer | None = None,
) -> tuple[EngineResult, object]:
    """Run on a full mesh with an ideal network (a fresh cost model every time)."""
    topo = build_full_mesh(graph.world_size, bandwidth, latency, gpus_per_node=gpus_per_node)
    cost = CostModel(
        kernels or RooflineKernels(50e12, 1e12, 2e-6),
        CollectivePricer(topo, NetworkParams.ideal(), algorithm),
        network,
    )
    return Engine(graph, topo, cost, mode=mode).run(), topo


def collectives(program: Program, prefix: str = "") -> list[CollectiveOp]:
    return [op for op in program.ops if isinstance(op, CollectiveOp) and op.name.startswith(prefix)]


def signature(program: Program, groups: dict[str, int], rename: dict[str, str]) -> Counter:
    """Multiset of (kind, group, bytes) of the collectives on groups larger than one."""
    return Counter(
        (op.kind.value, rename.get(op.group, op.group), op.bytes)
        for op in collectives(program)
        if groups[op.group] > 1
    )


def compute_ops(program: Program) -> list[tuple[str, str, float, float, tuple[int, ...]]]:
    return [
        (op.name, op.kind.value, op.flops, op.bytes, op.shape)
        for op in program.ops
        if isinstance(op, ComputeOp)
    ]


@dataclass(frozen=True)
class BlockOnlyKernels:
    """Prices only the transformer blocks' kernels (1 TFLOP/s); embedding, head and
    optimizer are free, so every pipeline stage does exactly the same work."""

    def duration_s(self, op: ComputeOp) -> float:
        return op.flops / 1e12 if op.name.startswith("L") else 0.0


def cross_node_bytes_per_node(result: EngineResult, topo: object) -> float:
    """Bytes carried by links between different nodes, per node."""
    t = topo  # a Topology
    node = t.devices.node  # type: ignore[attr-defined]
    links = t.links  # type: ignore[attr-defined]
    mask = node[links.src] != node[links.dst]
    nodes = len(np.unique(node[t.gpus]))  # type: ignore[attr-defined]
    return float(result.link_bytes[mask].sum()) / nodes
