"""The machine preset catalogue (`data/machines.yaml`), without building anything.

Kept apart from the builders so configuration validation can ask "how many GPUs per node
does this machine have?" cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from topologies.errors import TopologyError


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


@cache
def machine_presets() -> dict[str, MachinePreset]:
    """All machine presets by name."""
    text = resources.files("topologies").joinpath("data/machines.yaml").read_text()
    raw = yaml.safe_load(text)
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
        )
        for name, d in raw.items()
    }


def machine_preset(name: str) -> MachinePreset:
    """A preset by name; raises TopologyError listing the known machines."""
    presets = machine_presets()
    key = name.strip().lower()
    if key not in presets:
        raise TopologyError(f"unknown machine '{name}' (known: {', '.join(presets)}, custom)")
    return presets[key]
