"""The CostModel: the one place where kernel timing, collective algorithms, the network
model and calibration meet (see docs/DESIGN.md, "Data flow").

The engine asks it two things: how long a compute op takes on a GPU, and how a collective
on a set of group instances is scheduled and priced on the topology.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from simulator.cost.interference import HardwareQueues, InterferenceModel
from simulator.cost.terms import Interference
from simulator.network.params import NetworkParams
from simulator.network.pricing import CollectivePricer
from workloads.ops import ComputeKind, ComputeOp

NETWORK_MODELS = ("alpha-beta", "contention")


class KernelTimer(Protocol):
    """Anything that prices a compute op (the kernel model, or a test double)."""

    def duration_s(self, op: ComputeOp) -> float: ...


@dataclass(frozen=True)
class RooflineKernels:
    """A plain roofline: max(FLOPs / rate, bytes / bandwidth) + launch overhead.

    The simple timer for tests and idealised what-ifs; the calibrated kernel model lives
    in simulator/cost/kernels.py.
    """

    flops_per_s: float
    bytes_per_s: float = float("inf")
    launch_overhead_s: float = 0.0

    def duration_s(self, op: ComputeOp) -> float:
        t_flops = op.flops / self.flops_per_s if op.flops else 0.0
        t_bytes = (
            op.bytes / self.bytes_per_s if op.bytes and self.bytes_per_s != float("inf") else 0.0
        )
        if op.kind is ComputeKind.MEMCPY and not op.flops:
            t_flops = 0.0
        return max(t_flops, t_bytes) + self.launch_overhead_s


@dataclass(frozen=True)
class GpuCompute:
    """The compute pricing of one more GPU type of a mixed machine: its kernel timer and
    the slowdown of its kernels beside communication."""

    gpu: str
    kernels: KernelTimer
    overlap_slowdown: float | Interference = 1.0
    interference: InterferenceModel | None = None


@dataclass
class CostModel:
    """Kernel timer + collective pricer + network fidelity + how compute and communication
    interfere: the mechanism (`interference`, simulator/cost/interference.py) or, where a
    user or a calibration fixes it, a factor (`overlap_slowdown`: one, or one per kernel
    class); and the runtime's hardware queues (`queues`: which communicator streams run
    between compute kernels instead of beside them; None: none do).

    On a mixed machine (`cluster.node_gpus`) `gpu_mix` gives per GPU index the code of its
    type: 0 the run's GPU (`kernels`, `overlap_slowdown`, `interference`), k the k-th of
    `mixed`. The network is priced alike for all (the links are the machine's)."""

    kernels: KernelTimer
    pricer: CollectivePricer
    network: str = "contention"
    overlap_slowdown: float | Interference = 1.0
    interference: InterferenceModel | None = None
    queues: HardwareQueues | None = None
    mixed: tuple[GpuCompute, ...] = ()
    gpu_mix: np.ndarray | None = None

    @property
    def stretches_overlap(self) -> bool:
        """Whether compute that overlaps communication is stretched at all."""
        if self.interference is not None:
            return True
        s = self.overlap_slowdown
        return s.active if isinstance(s, Interference) else s != 1.0

    def compute_of(
        self, code: int
    ) -> tuple[KernelTimer, float | Interference, InterferenceModel | None]:
        """(kernel timer, overlap slowdown, interference mechanism) of GPU type code
        `code` (see `gpu_mix`)."""
        if code == 0:
            return self.kernels, self.overlap_slowdown, self.interference
        m = self.mixed[code - 1]
        return m.kernels, m.overlap_slowdown, m.interference

    @property
    def params(self) -> NetworkParams:
        return self.pricer.params
