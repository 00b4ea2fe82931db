"""Custom topologies from a YAML or JSON description of devices and links.

Format (YAML shown; JSON with the same structure works, chosen by the `.json` suffix)::

    name: two-dgx-one-switch          # optional, default: the file name
    description: two 2-GPU boxes       # optional
    gpu: h100                          # optional GPU type (catalogue name)
    package_size: 1                    # optional, GPUs per package (Frontier-like: 2)
    devices:                           # GPUs are numbered in the order they appear
      - {name: a.gpu0, kind: gpu, node: 0}
      - {name: a.nic0, kind: nic, node: 0}
      - {name: leaf0, kind: switch}    # node defaults to 0, -1 for switches
      - {name: spine, kind: switch, group: 1}   # group: optional, default -1
    links:                             # a cable: both directions, same rate
      - {src: a.gpu0, dst: a.nic0, kind: pcie, bandwidth_GBps: 32, latency_us: 0.75}
      - {src: a.nic0, dst: leaf0, kind: nic, bandwidth_GBps: 50, bidirectional: false}

Device kinds: gpu, nic, switch, cpu. Link kinds: nvlink, xgmi, pcie, c2c, nic, local,
global. `bandwidth_GBps` is per direction (1e-3 to 1e6, topologies/limits.py); `latency_us`
defaults to 0.5 (0 to 1e6); `bidirectional` defaults to true; `node` and `group` are integers >= -1 (a device
that is not a switch sits on a node, >= 0); `package_size` is an integer >= 1. Routing:
widest-shortest single paths (`ShortestPathRouter`).

The file is a pydantic model (`CustomTopologyFile` on the shared `UserModel` base; `axsim
schema --topology` prints its JSON Schema), so a wrong type, a missing or unknown field or
an out-of-range number is one line `FILE: links.3.bandwidth_GBps: Input should be greater
than 0`. The checks that need the whole file follow the model and raise TopologyError
naming the file and the element the same way: a duplicate device name, a link to an
unknown device, a link joining a device to itself, the same direction twice, a device
with no link, a GPU with no route to another GPU, no GPUs at all.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path as FilePath
from typing import Any

import numpy as np
import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from topologies.errors import TopologyError
from topologies.hardware import gpu_spec
from topologies.limits import MAX_BANDWIDTH_GBPS, MAX_LATENCY_US, MIN_BANDWIDTH_GBPS
from topologies.routing import ShortestPathRouter
from topologies.types import (
    DeviceKind,
    DeviceTable,
    LinkKind,
    LinkTable,
    Topology,
    device_kind_code,
    link_kind_code,
)
from topologies.user_files import read_user_text
from topologies.user_model import UserModel, first_error_line
from topologies.yaml_loader import NestingError, load_user_json, load_user_yaml, yaml_error_line

DEFAULT_LATENCY_US = 0.5
"""A link's latency when the file gives none: a modelling default inside the range of the
preset machines' per-hop latencies (topologies/data/machines.yaml: switch hop 0.3 us,
Rosetta local hop 0.35, global hop 0.5, NIC injection 1.0), not a measurement; a file
that knows its hardware states latency_us."""


def _lower_kind(value: Any) -> Any:
    """Kinds are matched without regard to case or surrounding spaces (`GPU`, ` nvlink`),
    as the loader always did; anything else goes to the enum check unchanged."""
    return value.strip().lower() if isinstance(value, str) else value


class DeviceEntry(UserModel):
    """One device of the graph; GPUs are numbered in the order they appear."""

    name: str = Field(min_length=1, description="Unique device name; links refer to it.")
    kind: DeviceKind
    node: int | None = Field(
        None, ge=-1, description="Node index; default 0, and -1 (no node) for switches."
    )
    group: int = Field(-1, ge=-1, description="Dragonfly group / pod index; -1 for none.")

    _kind = field_validator("kind", mode="before")(_lower_kind)

    @field_validator("name")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("a device name must not be blank")
        return v

    @model_validator(mode="after")
    def _on_a_node(self) -> DeviceEntry:
        if self.node is not None and self.node < 0 and self.kind is not DeviceKind.SWITCH:
            raise ValueError(
                f"device '{self.name}': a {self.kind.value} must be on a node (node >= 0), "
                f"got {self.node}"
            )
        return self

    @property
    def node_index(self) -> int:
        """The node with its default applied (switches sit on no node)."""
        if self.node is not None:
            return self.node
        return -1 if self.kind is DeviceKind.SWITCH else 0


class LinkEntry(UserModel):
    """A cable between two devices: both directions at the same rate unless one-way."""

    src: str = Field(description="Name of one end (a device of `devices`).")
    dst: str = Field(description="Name of the other end.")
    kind: LinkKind
    bandwidth_GBps: float = Field(
        ge=MIN_BANDWIDTH_GBPS,
        le=MAX_BANDWIDTH_GBPS,
        description="Per direction, GB/s (10^9 bytes/s).",
    )
    latency_us: float = Field(
        DEFAULT_LATENCY_US, ge=0, le=MAX_LATENCY_US, description="Per hop, microseconds."
    )
    bidirectional: bool = Field(True, description="False: only src -> dst exists.")

    _kind = field_validator("kind", mode="before")(_lower_kind)


class CustomTopologyFile(UserModel):
    """A custom topology file (format in the module docstring)."""

    name: str | None = Field(None, description="Default: the file name without suffix.")
    description: str | None = None
    gpu: str | None = Field(None, description="GPU type, a catalogue name (h100, mi250x...).")
    package_size: int = Field(1, ge=1, description="GPUs per package (Frontier-like: 2).")
    devices: list[DeviceEntry] = Field(min_length=1)
    links: list[LinkEntry] = Field(min_length=1)

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            return gpu_spec(v).name
        except TopologyError as e:
            raise ValueError(str(e)) from None


def custom_topology_json_schema() -> dict[str, Any]:
    """JSON Schema of a custom topology file, for editors (`axsim schema --topology`)."""
    return CustomTopologyFile.model_json_schema()


def load_custom_topology(path: str | FilePath) -> Topology:
    """Read a custom topology file (format in the module docstring) into a Topology.

    Raises TopologyError with one line naming the file and the offending element.
    """
    where = str(path)
    raw = _read(FilePath(path), where)
    return parse_custom_topology(raw, where, default_name=FilePath(path).stem)


def parse_custom_topology(
    raw: object, where: str = "<custom>", *, default_name: str = "custom"
) -> Topology:
    """Build a Topology from an already-parsed description (the mapping of the file format)."""
    if not isinstance(raw, dict):
        raise TopologyError(f"{where}: expected a mapping with 'devices' and 'links'")
    try:
        spec = CustomTopologyFile.model_validate(raw)
    except ValidationError as e:
        raise TopologyError(first_error_line(e, where)) from None
    names = [d.name for d in spec.devices]
    kinds = [d.kind for d in spec.devices]
    nodes = [d.node_index for d in spec.devices]
    groups = [d.group for d in spec.devices]
    _check_unique(names, where)
    index = {n: i for i, n in enumerate(names)}
    src, dst, lkinds, bws, lats = _links(spec.links, index, where)
    _check_connected(names, kinds, src, dst, where)
    gpus = [i for i, k in enumerate(kinds) if k is DeviceKind.GPU]
    if not gpus:
        raise TopologyError(f"{where}: the topology has no GPUs")
    table = LinkTable(
        src=np.array(src, dtype=np.int64),
        dst=np.array(dst, dtype=np.int64),
        kind=np.array([link_kind_code(k) for k in lkinds], dtype=np.int8),
        bandwidth_Bps=np.array(bws, dtype=np.float64) * 1e9,
        latency_s=np.array(lats, dtype=np.float64) * 1e-6,
    )
    _check_gpu_routes(names, gpus, len(names), src, dst, where)
    gpu_nodes = [nodes[g] for g in gpus]
    per_node = Counter(gpu_nodes)
    in_order = gpu_nodes == sorted(gpu_nodes)
    nic_nodes = Counter(nodes[i] for i, k in enumerate(kinds) if k is DeviceKind.NIC)
    return Topology(
        name=spec.name or default_name,
        devices=DeviceTable(
            kind=np.array([device_kind_code(k) for k in kinds], dtype=np.int8),
            node=np.array(nodes, dtype=np.int32),
            local_index=np.array(_local_indices(kinds, nodes), dtype=np.int32),
            group=np.array(groups, dtype=np.int32),
            names=tuple(names),
        ),
        links=table,
        gpus=np.array(gpus, dtype=np.int64),
        gpus_per_node=max(per_node.values()),
        router=ShortestPathRouter(),
        gpu_type=spec.gpu or "",
        description=spec.description or f"custom topology from {where}",
        metadata={
            "machine": "custom",
            "source": where,
            "nodes": len(per_node),
            "gpus_per_node": max(per_node.values()),
            "nics_per_node": max(nic_nodes.values(), default=0),
            "package_size": spec.package_size,
            "homogeneous_nodes": len(set(per_node.values())) == 1 and in_order,
            "routing": "widest-shortest",
        },
    )


def _read(path: FilePath, where: str) -> object:
    try:
        text = read_user_text(path)
    except OSError as e:
        raise TopologyError(f"{where}: cannot read custom topology ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise TopologyError(f"{where}: not a text file (not UTF-8)") from None
    try:
        if path.suffix.lower() == ".json":
            return load_user_json(text)
        return load_user_yaml(text)
    except (json.JSONDecodeError, yaml.YAMLError, NestingError) as e:
        first = (
            yaml_error_line(e)
            if isinstance(e, yaml.YAMLError)
            else e.msg
            if isinstance(e, json.JSONDecodeError)
            else str(e)
        )
        raise TopologyError(
            f"{where}: not valid {path.suffix.lstrip('.') or 'YAML'}: {first}"
        ) from None


def _check_unique(names: list[str], where: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise TopologyError(f"{where}: duplicate device name '{name}'")
        seen.add(name)


def _links(
    entries: list[LinkEntry], index: dict[str, int], where: str
) -> tuple[list[int], list[int], list[LinkKind], list[float], list[float]]:
    """Directed links (a bidirectional entry is two) after the checks that need the device
    list: both ends known and different, no direction given twice."""
    src: list[int] = []
    dst: list[int] = []
    kinds: list[LinkKind] = []
    bws: list[float] = []
    lats: list[float] = []
    seen: set[tuple[int, int]] = set()
    for i, link in enumerate(entries):
        label = f"{where}: links.{i} ({link.src} -> {link.dst})"
        for end in (link.src, link.dst):
            if end not in index:
                raise TopologyError(f"{label}: unknown device '{end}'")
        a, b = index[link.src], index[link.dst]
        if a == b:
            raise TopologyError(f"{label}: a link must join two different devices")
        for u, v in ((a, b), (b, a)) if link.bidirectional else ((a, b),):
            if (u, v) in seen:
                raise TopologyError(f"{label}: duplicate link (the same direction appears twice)")
            seen.add((u, v))
            src.append(u)
            dst.append(v)
            kinds.append(link.kind)
            bws.append(link.bandwidth_GBps)
            lats.append(link.latency_us)
    return src, dst, kinds, bws, lats


def _check_connected(
    names: list[str], kinds: list[DeviceKind], src: list[int], dst: list[int], where: str
) -> None:
    linked = set(src) | set(dst)
    for i, name in enumerate(names):
        if i not in linked:
            raise TopologyError(f"{where}: {kinds[i].value} '{name}' is not connected to any link")


def _reach(n: int, src: list[int], dst: list[int], start: int) -> set[int]:
    adj: list[list[int]] = [[] for _ in range(n)]
    for a, b in zip(src, dst, strict=True):
        adj[a].append(b)
    seen, stack = {start}, [start]
    while stack:
        for v in adj[stack.pop()]:
            if v not in seen:
                seen.add(v)
                stack.append(v)
    return seen


def _check_gpu_routes(
    names: list[str], gpus: list[int], n: int, src: list[int], dst: list[int], where: str
) -> None:
    """Every GPU reaches every other: all reach GPU 0 and GPU 0 reaches all."""
    first = gpus[0]
    forward = _reach(n, src, dst, first)
    backward = _reach(n, dst, src, first)
    for g in gpus[1:]:
        if g not in forward:
            raise TopologyError(f"{where}: GPU '{names[first]}' has no route to GPU '{names[g]}'")
        if g not in backward:
            raise TopologyError(f"{where}: GPU '{names[g]}' has no route to GPU '{names[first]}'")


def _local_indices(kinds: list[DeviceKind], nodes: list[int]) -> list[int]:
    """Index of each device among the devices of its kind on its node."""
    count: Counter[tuple[DeviceKind, int]] = Counter()
    out = []
    for kind, node in zip(kinds, nodes, strict=True):
        out.append(count[(kind, node)])
        count[(kind, node)] += 1
    return out
