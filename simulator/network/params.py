"""Parameters shared by the network models: link efficiency and latency terms.

Defaults come from `data/network_defaults.yaml` (sources documented there); a machine
preset may replace a link kind's efficiency with its own measured value
(`network_params_for`); a calibration file adds collective tables on top. `NetworkParams.ideal()` switches every overhead off,
which is what the closed-form oracles need.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from typing import cast

import numpy as np
import yaml

from topologies.types import LINK_KINDS, Topology


@dataclass(frozen=True)
class NetworkParams:
    """Efficiency per link kind, per-step and per-collective latency (seconds)."""

    link_efficiency: dict[str, float] = field(default_factory=dict)
    step_latency_intra_s: float = 0.0
    step_latency_inter_s: float = 0.0
    collective_overhead_s: float = 0.0
    pxn: bool = True  # inter-node traffic leaves through the NIC of the destination's rail

    @classmethod
    def ideal(cls) -> NetworkParams:
        """No protocol overhead and no software latency: links at full speed."""
        return cls(link_efficiency={k.value: 1.0 for k in LINK_KINDS})

    def efficiency_of(self, kind: str) -> float:
        return float(self.link_efficiency.get(kind, 1.0))

    def with_efficiency(self, **by_kind: float) -> NetworkParams:
        eff = dict(self.link_efficiency)
        eff.update(by_kind)
        return replace(self, link_efficiency=eff)

    def effective_bandwidth(self, topology: Topology) -> np.ndarray:
        """Per-link achievable bandwidth (B/s): raw bandwidth times its kind's efficiency."""
        eff = np.array([self.efficiency_of(k.value) for k in LINK_KINDS], dtype=np.float64)
        return topology.links.bandwidth_Bps * eff[topology.links.kind.astype(np.int64)]


def network_params_for(topology: Topology) -> NetworkParams:
    """The defaults with the machine's measured per-kind efficiencies applied (a preset's
    `link_efficiency` in machines.yaml, carried in the topology's metadata)."""
    base = default_network_params()
    measured = cast("dict[str, float]", topology.metadata.get("link_efficiency") or {})
    return base.with_efficiency(**measured) if measured else base


@cache
def default_network_params() -> NetworkParams:
    """The documented defaults (data/network_defaults.yaml)."""
    text = resources.files("simulator.network").joinpath("data/network_defaults.yaml").read_text()
    raw = yaml.safe_load(text)
    return NetworkParams(
        link_efficiency={str(k): float(v) for k, v in raw["link_efficiency_by_kind"].items()},
        step_latency_intra_s=float(raw["step_latency_us"]["intra_node"]) * 1e-6,
        step_latency_inter_s=float(raw["step_latency_us"]["inter_node"]) * 1e-6,
        collective_overhead_s=float(raw["collective_overhead_us"]) * 1e-6,
    )
