"""Parameters shared by the network models: link efficiency and the collective library's
protocol terms.

Defaults come from `data/network_defaults.yaml` (sources documented there): per link kind
an achievable efficiency, and per GPU vendor the collective library's own tuning table
(NCCL for NVIDIA, RCCL for AMD; see simulator/network/protocols.py). A machine preset
replaces what was measured on that machine (`network_params_for`: machines.yaml
`link_efficiency` and `collectives:`, carried in the topology's metadata); a calibration
file's `network:` block goes on top in the pricer. `NetworkParams.ideal()` switches every
overhead off, which is what the closed-form oracles need.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from typing import Any, cast

import numpy as np
from pydantic import ValidationError

from simulator.errors import CostModelError
from simulator.network.protocols import (
    US,
    CollectiveModel,
    CollectiveModelSpec,
    ProtocolTerms,
)
from topologies.hardware import gpu_catalogue
from topologies.types import LINK_KINDS, LinkKind, Topology, link_kind_code
from topologies.yaml_loader import load_packaged_yaml

FAST_INTRA_KINDS = (LinkKind.NVLINK, LinkKind.XGMI, LinkKind.C2C)
"""Node-local link kinds NCCL/RCCL price with the NVLink row of hwLat (else the PCI row)."""


@dataclass(frozen=True)
class NetworkParams:
    """Efficiency per link kind and the collective library's protocol terms."""

    link_efficiency: dict[str, float] = field(default_factory=dict)
    collectives: CollectiveModel = field(default_factory=CollectiveModel)
    pxn: bool = True  # inter-node traffic leaves through the NIC of the destination's rail

    @classmethod
    def ideal(cls) -> NetworkParams:
        """No protocol overhead and no software latency: links at full speed."""
        return cls(link_efficiency={k.value: 1.0 for k in LINK_KINDS})

    @property
    def collective_overhead_s(self) -> float:
        """The fixed cost of launching any collective (protocol-independent)."""
        return self.collectives.launch_overhead_s

    def efficiency_of(self, kind: str) -> float:
        return float(self.link_efficiency.get(kind, 1.0))

    def with_efficiency(self, **by_kind: float) -> NetworkParams:
        eff = dict(self.link_efficiency)
        eff.update(by_kind)
        return replace(self, link_efficiency=eff)

    def with_library(self, library: str) -> NetworkParams:
        """These parameters for another build of the collective library (the algorithms
        it enables and the measured regimes it shows follow the name)."""
        return replace(self, collectives=self.collectives.with_library(library))

    def with_spec(self, spec: CollectiveModelSpec) -> NetworkParams:
        """These parameters with a measured `collectives:` / `network:` block applied."""
        out = replace(self, collectives=self.collectives.with_spec(spec))
        return out.with_efficiency(**spec.link_efficiency) if spec.link_efficiency else out

    def effective_bandwidth(self, topology: Topology) -> np.ndarray:
        """Per-link achievable bandwidth (B/s): raw bandwidth times its kind's efficiency."""
        eff = np.array([self.efficiency_of(k.value) for k in LINK_KINDS], dtype=np.float64)
        return topology.links.bandwidth_Bps * eff[topology.links.kind.astype(np.int64)]


def parse_spec(raw: Any, where: str) -> CollectiveModelSpec:
    """Validate a `collectives:` / `network:` mapping; CostModelError naming `where`."""
    try:
        spec = CollectiveModelSpec.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise CostModelError(f"{where}.{loc}: {msg}") from None
    kinds = {k.value for k in LINK_KINDS}
    for kind, value in spec.link_efficiency.items():
        if kind not in kinds or not 0 < value <= 1:
            raise CostModelError(
                f"{where}.link_efficiency.{kind}: a known link kind with a value in (0, 1]"
            )
    return spec


def network_params_for(topology: Topology) -> NetworkParams:
    """The defaults of the machine's GPU vendor and node type, with the preset's measured
    per-kind efficiencies and collective terms applied (machines.yaml, carried in the
    topology's metadata)."""
    vendor = _vendor(topology.gpu_type)
    node = str(topology.metadata.get("node_type") or "")
    base = default_network_params(vendor, intra_row=intra_row_of(topology), node=node)
    measured = cast("dict[str, float]", topology.metadata.get("link_efficiency") or {})
    if measured:
        base = base.with_efficiency(**measured)
    raw = topology.metadata.get("collectives")
    if raw:
        where = f"machines.yaml: {topology.metadata.get('machine', topology.name)}.collectives"
        try:
            base = base.with_spec(parse_spec(raw, where))
        except ValueError as exc:
            raise CostModelError(f"{where}: {exc}") from None
    return base


def _vendor(gpu_type: str) -> str:
    spec = gpu_catalogue().get(gpu_type)
    vendor = spec.vendor if spec is not None else "nvidia"
    return vendor if vendor in _defaults_raw()["libraries"] else "nvidia"


def intra_row_of(topology: Topology) -> str:
    """The library table's row for node-local steps: 'nvlink' if GPUs of a node talk over
    NVLink-class links (NVLink, Infinity Fabric, C2C), else 'pci'."""
    codes = {link_kind_code(k) for k in FAST_INTRA_KINDS}
    return "nvlink" if bool(np.isin(topology.links.kind, list(codes)).any()) else "pci"


@cache
def _defaults_raw() -> dict[str, Any]:
    text = resources.files("simulator.network").joinpath("data/network_defaults.yaml").read_text()
    return cast("dict[str, Any]", load_packaged_yaml(text))


@cache
def default_network_params(
    vendor: str = "nvidia", intra_row: str = "nvlink", node: str = ""
) -> NetworkParams:
    """The documented defaults (data/network_defaults.yaml) for a GPU vendor's library,
    with the library's own platform model for the node type where it has one (RCCL's
    rome_models.cc: Frontier's node takes tuning model 3)."""
    raw = _defaults_raw()
    lib = dict(raw["libraries"][vendor])
    platform = (lib.get("platform_models") or {}).get(node)
    if platform is not None:
        lib = {**lib, **platform}
    terms = {
        name: ProtocolTerms(
            float(p["base_latency_us"]) * US,
            float(p[f"{intra_row}_step_us"]) * US,
            float(p["net_step_us"]) * US,
            float(p["bandwidth_factor"]),
            float(p.get("proxy_step_us", 0.0)) * US,
        )
        for name, p in lib["protocols"].items()
    }
    model = CollectiveModel(
        launch_overhead_s=float(raw["launch_overhead_us"]) * US,
        terms=terms,
        enabled_intra=tuple(lib["enabled"]["intra_node"]),
        enabled_inter=tuple(lib["enabled"]["inter_node"]),
        source=f"{lib['library']} tuning table (simulator/network/data/network_defaults.yaml)",
        library=str(lib["library"]),
    )
    return NetworkParams(
        link_efficiency={str(k): float(v) for k, v in raw["link_efficiency_by_kind"].items()},
        collectives=model,
    )
