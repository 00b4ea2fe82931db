"""What a fabric builder returns: switches, switch links and endpoint-to-endpoint paths.

A fabric connects endpoints (NICs, numbered `node * nics_per_node + k`) through switches.
Builders (`build_dragonfly`, `build_fat_tree`) return a `Fabric` with switch indices
relative to the fabric; `machines.build_machine` places the switches after the node
devices and the switch links after the NIC links. Because routes must name absolute link
ids, a builder is told where its links will start (`link_base`).

Routing policy names (`ROUTING_POLICIES`): `minimal` (one path per flow, chosen by a
hash of the endpoint pair), `ecmp` (traffic spread evenly over several equal-cost paths),
`valiant` (dragonfly: through intermediate groups), `adaptive` (dragonfly: a fixed mix of
minimal and Valiant paths; fat tree: spread like ecmp, as InfiniBand adaptive routing does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from topologies.batch_routing import PaddedPaths
from topologies.errors import TopologyError
from topologies.types import Path

ROUTING_POLICIES = ("minimal", "ecmp", "valiant", "adaptive")

FabricRoute = tuple[tuple[Path, ...], tuple[float, ...]]
"""Switch-to-switch paths (absolute link ids) and their traffic weights."""


FabricBatch = Callable[[np.ndarray, np.ndarray], PaddedPaths]
"""`paths_batch(src_endpoints, dst_endpoints)`: `paths` for many endpoint pairs at once."""


class FabricPaths(Protocol):
    """Paths between the first-level switches of two endpoints.

    A fabric may also offer `paths_batch` (a `FabricBatch`): the same paths, weights and
    order for arrays of endpoint pairs, as padded matrices (int64 endpoint arrays in), with
    `batch_shape`, the most (paths per pair, links per path) those matrices can have.
    `MachineRouter.routes_batch` uses them when present and loops over `paths` otherwise.
    """

    def paths(self, src_endpoint: int, dst_endpoint: int) -> FabricRoute:
        """Paths from the switch of `src_endpoint` to the switch of `dst_endpoint`.

        Empty path `()` when both endpoints hang off the same switch.
        """
        ...


@dataclass(frozen=True, eq=False)
class Fabric:
    """Switches and switch-to-switch links of a fabric, with its path finder.

    `link_src`/`link_dst` are switch indices relative to the fabric; `endpoint_switch[e]`
    is the switch NIC endpoint e plugs into; `node_group[n]` is the dragonfly group or
    fat-tree pod of node n. `cut_Bps` and `minimal_cut_Bps` are the capacity (per
    direction) between the two halves of the nodes, with and without non-minimal relays
    (documented by each builder); `inf` when there is no fabric link to cut.
    """

    kind: str
    switch_group: np.ndarray  # int32
    switch_local_index: np.ndarray  # int32
    endpoint_switch: np.ndarray  # int64, relative switch index per endpoint
    node_group: np.ndarray  # int32 per node
    link_src: np.ndarray  # int64 relative switch index
    link_dst: np.ndarray
    link_kind: np.ndarray  # int8 codes into LINK_KINDS
    link_bandwidth_Bps: np.ndarray
    link_latency_s: np.ndarray
    router: FabricPaths
    cut_Bps: float
    minimal_cut_Bps: float
    parameters: dict[str, object] = field(default_factory=dict)

    @property
    def num_switches(self) -> int:
        return int(self.switch_group.shape[0])

    @property
    def num_links(self) -> int:
        return int(self.link_src.shape[0])


def merge_paths(paths: list[Path], weights: list[float]) -> FabricRoute:
    """Merge identical paths (summing their weights), keeping first-seen order."""
    merged: dict[Path, float] = {}
    for p, w in zip(paths, weights, strict=True):
        merged[p] = merged.get(p, 0.0) + w
    return tuple(merged), tuple(merged.values())


def spec_number(
    fabric: Mapping[str, object],
    key: str,
    where: str,
    *,
    integer: bool = False,
    default: float | None = None,
    allow_zero: bool = False,
) -> float:
    """Read a positive (or non-negative) number from a mapping; TopologyError naming `where.key`."""
    value = fabric.get(key, default)
    if value is None:
        raise TopologyError(f"{where}.{key} is missing")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TopologyError(f"{where}.{key} must be a number, got {value!r}")
    if integer and int(value) != value:
        raise TopologyError(f"{where}.{key} must be an integer, got {value!r}")
    if not ((value >= 0 if allow_zero else value > 0) and np.isfinite(value)):
        bound = ">= 0" if allow_zero else "> 0"
        raise TopologyError(f"{where}.{key} must be {bound} and finite, got {value!r}")
    return float(value)


def spec_routing(
    fabric: Mapping[str, object], override: str | None, where: str, allowed: tuple[str, ...]
) -> str:
    """The routing policy: the override, else the fabric's default; checked against `allowed`."""
    value = override if override is not None else fabric.get("routing", allowed[0])
    name = str(value).strip().lower()
    if name not in allowed:
        kind = fabric.get("kind", "this")
        raise TopologyError(
            f"routing '{value}' is not supported by the {kind} fabric ({where}); "
            f"use one of: {', '.join(allowed)}"
        )
    return name
