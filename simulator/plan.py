"""The WorkloadPlan: a built workload plus what the report needs to know about it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from simulator.choices import Choice
from simulator.config import ExperimentConfig
from simulator.outputs.report import StagePlan
from topologies.hardware import GpuSpec
from topologies.types import Topology
from workloads.graph import OpGraph
from workloads.models import TransformerSpec
from workloads.run import ClusterShape, TrainingSetup


@dataclass(frozen=True)
class WorkloadPlan:
    """A built workload and what the report needs to know about it."""

    graph: OpGraph
    memory: dict[str, float]  # bytes per GPU by category, with 'total'
    parameters: dict[str, object]  # the strategy parameters used (grid, microbatches...)
    grid: dict[str, int]  # x, y, z, data view of the parallel degrees (report contract)
    group_aliases: dict[str, str] = field(default_factory=dict)  # strategy group -> x/y/z/data
    model_flops: float = 0.0
    choices: tuple[Choice, ...] = ()  # what the builder chose by itself, with reasons
    stages: tuple[StagePlan, ...] = ()  # pipeline stages (empty without a pipeline)


PlanBuilder = Callable[[ExperimentConfig, TransformerSpec, Topology, GpuSpec], WorkloadPlan]


def training_setup(config: ExperimentConfig) -> TrainingSetup:
    """The training section as workload generators see it."""
    t = config.training
    return TrainingSetup(
        t.batch_tokens,
        t.microbatch_sequences,
        t.activation_checkpointing,
        t.optimizer,
        t.flash_attention,
        compress_microbatches=config.engine.steady_state and config.engine.virtual_microbatches,
        cross_entropy=t.cross_entropy,
        train_metrics=t.train_metrics,
    )


def cluster_shape(config: ExperimentConfig, topology: Topology, gpu: GpuSpec) -> ClusterShape:
    """GPU count, GPUs per node and memory per GPU of the configured cluster."""
    gpus = topology.num_gpus if config.cluster.num_gpus is None else config.cluster.num_gpus
    return ClusterShape(gpus, topology.gpus_per_node, gpu.memory_bytes)
