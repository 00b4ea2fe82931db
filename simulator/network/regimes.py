"""Measured regimes of a collective library build that its own tuner does not know.

One is modelled: RCCL's small-step stall on Frontier ("small-step-stall"). The PCCL
measurements (shared/traces/pccl: RCCL through torch.distributed, aws-ofi-rccl over
libfabric CXI) show multi-node rings whose per-member step message (S/p: the chunk
each rank forwards per ring step) is 64-256 KiB taking 0.3-3 ms per ring step where
32 KiB chunks one size smaller take ~35 us and 512 KiB chunks ~30 us: busbw 0.02-1 GB/s
where the same ring at larger messages reaches ~70. The window's lower edge (64 KiB) is
where RCCL's tuner switches the ring from LL to Simple: the per-step time jumps there at
every rank count from 16 to 256 (at 512 and 1,024 GCDs one size later, 128 KiB: the
tuner's size-dependent correction factors, tuning.cc ringCorrectionFactor, move it); its
upper edge is one slot of the Simple buffer (4 MiB / NCCL_STEPS = 512 KiB, src/init.cc
DEFAULT_BUFFSIZE, devcomm.h NCCL_STEPS): from one full slot per step on, no stall. The PCCL paper (arXiv 2504.18658 v2) attributes RCCL's
collapse at scale to its traffic going through the Cassini NIC's slow software overflow
path (a 200x higher overflow counter than PCCL's); ROCm/rccl#1490 reports the same
numbers on the same hardware (32 MI250X GCDs on Slingshot-11 with aws-ofi-rccl: 2 MiB
all-gather in 70 ms, as PCCL's 70.8 ms at 32 GCDs).

A regime is a property of a library build and its environment, so it is listed with
the builds that show it (`libraries`) and on only where the model's `library` is one
of them. The library's tuner does not see it: in the window the build runs the ring on
`protocol` (as RCCL's tuner picks Simple there), whatever another protocol would cost,
and the stall is then paid on every step of the phase.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from topologies.user_input.model import UserModel

US = 1e-6


class RegimeSpec(UserModel):
    """A measured regime (YAML units: microseconds, bytes)."""

    name: str = Field(min_length=1)
    kind: Literal["small-step-stall"] = "small-step-stall"
    protocol: Literal["LL", "LL128", "Simple"] = "Simple"
    from_step_bytes: float = Field(
        default=0.0, ge=0, le=2**40, description="Per-member step message (S/p) from which."
    )
    below_step_bytes: float = Field(
        gt=0, le=2**40, description="Per-member step message (S/p) below which it stalls."
    )
    per_step_us: float = Field(ge=0, le=1e7, description="Stall per ring step, microseconds.")
    libraries: tuple[str, ...] = Field(
        min_length=1, description="Library builds that show it (as in collectives.library)."
    )
    source: str = ""


def _norm(name: str) -> str:
    return " ".join(name.lower().split())


@dataclass(frozen=True)
class Regime:
    """A stall every step of a node-crossing phase pays under `protocol` while the
    per-member step message is below `below_step_bytes`."""

    name: str
    protocol: str
    below_step_bytes: float
    per_step_s: float
    libraries: tuple[str, ...]
    source: str = ""
    from_step_bytes: float = 0.0

    @classmethod
    def from_spec(cls, spec: RegimeSpec) -> Regime:
        return cls(
            spec.name,
            spec.protocol,
            spec.below_step_bytes,
            spec.per_step_us * US,
            spec.libraries,
            spec.source,
            spec.from_step_bytes,
        )

    def spec(self) -> RegimeSpec:
        return RegimeSpec(
            name=self.name,
            protocol=self.protocol,  # type: ignore[arg-type]
            from_step_bytes=self.from_step_bytes,
            below_step_bytes=self.below_step_bytes,
            per_step_us=round(self.per_step_s / US, 4),
            libraries=self.libraries,
            source=self.source,
        )

    def applies_to(self, library: str) -> bool:
        """Whether `library` is one of the builds that show it."""
        return _norm(library) in {_norm(x) for x in self.libraries}

    def in_window(self, crosses_nodes: bool, step_bytes: float) -> bool:
        """Whether a phase falls in the regime: it crosses nodes and its per-member step
        message is in [from_step_bytes, below_step_bytes)."""
        return crosses_nodes and self.from_step_bytes <= step_bytes < self.below_step_bytes

    def stall_s(self, protocol: str, crosses_nodes: bool, step_bytes: float, steps: int) -> float:
        """The stall a phase pays: every step, if it falls in the window and runs under
        this protocol."""
        if protocol != self.protocol or steps <= 0 or step_bytes <= 0:
            return 0.0
        return steps * self.per_step_s if self.in_window(crosses_nodes, step_bytes) else 0.0
