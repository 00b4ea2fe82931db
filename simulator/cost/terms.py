"""The terms a compute op's time is made of, and the interference factors per kernel class.

Why explicit terms: a user asking why compute takes what it takes needs the kernel time
by kind apart from what the step adds around the kernels. The kernel model prices the
kernel itself; the engine adds the launch gap (the idle time between back-to-back kernels
on a stream) and the interference stretch (the part of a kernel that runs beside a
collective of the same GPU runs slower: NCCL/RCCL kernels take SMs/CUs and HBM
bandwidth). Reports keep them as their own rows (`LAUNCH_GAPS`, `INTERFERENCE`) beside
the kernel kinds (gemm, attention, elementwise, optimizer, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.ops import ComputeKind

LAUNCH_GAPS = "launch_gaps"
INTERFERENCE = "interference"
COMPUTE_BOUND = frozenset({ComputeKind.GEMM, ComputeKind.ATTENTION})


@dataclass(frozen=True, slots=True)
class Interference:
    """Stretch factors (>= 1) for the overlapped part of compute-bound and memory-bound
    kernels. Different because the losses differ: a GEMM loses the SMs/CUs the
    communication kernels occupy, a streaming kernel the HBM bandwidth they consume."""

    compute: float = 1.0
    memory: float = 1.0

    @classmethod
    def uniform(cls, factor: float) -> Interference:
        """One factor for every kernel (a user's `engine.compute_slowdown_under_overlap`)."""
        return cls(factor, factor)

    def factor(self, kind: ComputeKind) -> float:
        """The stretch of a kernel of this kind while communication runs beside it."""
        return self.compute if kind in COMPUTE_BOUND else self.memory

    @property
    def active(self) -> bool:
        """Whether any kernel is stretched (then the engine estimates the overlap)."""
        return self.compute != 1.0 or self.memory != 1.0
