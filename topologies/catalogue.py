"""The machine preset catalogue (`data/machines.yaml`), without building anything.

Kept apart from the builders so configuration validation can ask "how many GPUs per node
does this machine have?" cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from topologies.errors import TopologyError
from topologies.types import LINK_KINDS
from topologies.yaml_loader import load_packaged_yaml


@dataclass(frozen=True)
class MachinePreset:
    """One machine preset: node type, GPU, NICs and fabric parameters."""

    name: str
    description: str
    gpu: str
    gpus_per_node: int
    node: str
    nics_per_node: int
    nic_bandwidth_GBps: float
    fabric: dict[str, Any]
    # Measured achievable fraction of raw bandwidth per link kind on this machine (its
    # collective library and NIC stack), overriding the network defaults for these kinds.
    link_efficiency: dict[str, float] = field(default_factory=dict)
    # Measured collective-library terms (protocol latencies and bandwidth factors), kept as
    # the raw mapping: the simulator's network parameters validate and apply it.
    collectives: dict[str, Any] = field(default_factory=dict)


@cache
def machine_presets() -> dict[str, MachinePreset]:
    """All machine presets by name."""
    text = resources.files("topologies").joinpath("data/machines.yaml").read_text()
    raw = load_packaged_yaml(text)
    return {
        name: MachinePreset(
            name=name,
            description=str(d["description"]),
            gpu=str(d["gpu"]),
            gpus_per_node=int(d["gpus_per_node"]),
            node=str(d["node"]),
            nics_per_node=int(d["nics_per_node"]),
            nic_bandwidth_GBps=float(d["nic_bandwidth_GBps"]),
            fabric=dict(d["fabric"]),
            link_efficiency=_link_efficiency(name, d.get("link_efficiency")),
            collectives=_mapping(name, "collectives", d.get("collectives")),
        )
        for name, d in raw.items()
    }


def _link_efficiency(machine: str, raw: object) -> dict[str, float]:
    """Validated per-kind efficiencies of a preset: known link kinds, values in (0, 1]."""
    if raw is None:
        return {}
    where = f"machines.yaml: {machine}.link_efficiency"
    if not isinstance(raw, dict):
        raise TopologyError(f"{where} must be a mapping of link kind to efficiency")
    kinds = {k.value for k in LINK_KINDS}
    out: dict[str, float] = {}
    for kind, value in raw.items():
        if kind not in kinds:
            raise TopologyError(
                f"{where}.{kind}: unknown link kind (known: {', '.join(sorted(kinds))})"
            )
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
            raise TopologyError(f"{where}.{kind} must be in (0, 1], got {value!r}")
        out[str(kind)] = float(value)
    return out


def _mapping(machine: str, key: str, raw: object) -> dict[str, Any]:
    """An optional mapping field of a preset (its content is checked by its user)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise TopologyError(f"machines.yaml: {machine}.{key} must be a mapping")
    return dict(raw)


def machine_preset(name: str) -> MachinePreset:
    """A preset by name; raises TopologyError listing the known machines."""
    presets = machine_presets()
    key = name.strip().lower()
    if key not in presets:
        raise TopologyError(f"unknown machine '{name}' (known: {', '.join(presets)}, custom)")
    return presets[key]
