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
global. `bandwidth_GBps` is per direction (> 0); `latency_us` defaults to 0.5 (>= 0);
`bidirectional` defaults to true. Routing: widest-shortest single paths
(`ShortestPathRouter`). Every mistake raises TopologyError naming the file and the
element: unknown or duplicate device, a link missing an end or pointing at an unknown
device, non-positive bandwidth, a device with no link, a GPU with no route to another GPU,
no GPUs at all, unknown fields.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path as FilePath
from typing import Any

import numpy as np
import yaml

from topologies.errors import TopologyError
from topologies.hardware import gpu_spec
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
from topologies.yaml_loader import NestingError, load_user_json, load_user_yaml, yaml_error_line

_TOP_FIELDS = {"name", "description", "gpu", "package_size", "devices", "links"}
_DEVICE_FIELDS = {"name", "kind", "node", "group"}
_LINK_FIELDS = {"src", "dst", "kind", "bandwidth_GBps", "latency_us", "bidirectional"}
DEFAULT_LATENCY_US = 0.5


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
    _no_unknown(raw, _TOP_FIELDS, where)
    devices = _list(raw, "devices", where)
    links = _list(raw, "links", where)
    names, kinds, nodes, groups = _devices(devices, where)
    index = {n: i for i, n in enumerate(names)}
    src, dst, lkinds, bws, lats = _links(links, index, where)
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
    gpu_type = "" if raw.get("gpu") is None else gpu_spec(str(raw["gpu"])).name
    package = raw.get("package_size", 1)
    if isinstance(package, bool) or not isinstance(package, int) or package < 1:
        raise TopologyError(f"{where}: package_size must be a positive integer, got {package!r}")
    nic_nodes = Counter(nodes[i] for i, k in enumerate(kinds) if k is DeviceKind.NIC)
    return Topology(
        name=str(raw.get("name") or default_name),
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
        gpu_type=gpu_type,
        description=str(raw.get("description") or f"custom topology from {where}"),
        metadata={
            "machine": "custom",
            "source": where,
            "nodes": len(per_node),
            "gpus_per_node": max(per_node.values()),
            "nics_per_node": max(nic_nodes.values(), default=0),
            "package_size": package,
            "homogeneous_nodes": len(set(per_node.values())) == 1 and in_order,
            "routing": "widest-shortest",
        },
    )


def _read(path: FilePath, where: str) -> object:
    try:
        text = path.read_text()
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


def _no_unknown(entry: dict[str, Any], known: set[str], where: str) -> None:
    extra = sorted(set(map(str, entry)) - known)
    if extra:
        raise TopologyError(
            f"{where}: unknown field '{extra[0]}' (known: {', '.join(sorted(known))})"
        )


def _list(raw: dict[str, Any], key: str, where: str) -> list[Any]:
    value = raw.get(key)
    if not isinstance(value, list) or not value:
        raise TopologyError(f"{where}: '{key}' must be a non-empty list")
    return value


def _int_field(entry: dict[str, Any], key: str, default: int, where: str) -> int:
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise TopologyError(f"{where}: {key} must be an integer >= -1, got {value!r}")
    return value


def _devices(
    entries: list[Any], where: str
) -> tuple[list[str], list[DeviceKind], list[int], list[int]]:
    names: list[str] = []
    kinds: list[DeviceKind] = []
    nodes: list[int] = []
    groups: list[int] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        label = f"{where}: device {i}"
        if not isinstance(entry, dict):
            raise TopologyError(f"{label}: expected a mapping with name and kind")
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip():
            raise TopologyError(f"{label}: missing or empty 'name'")
        label = f"{where}: device '{name}'"
        _no_unknown(entry, _DEVICE_FIELDS, label)
        if name in seen:
            raise TopologyError(f"{where}: duplicate device name '{name}'")
        seen.add(name)
        try:
            kind = DeviceKind(str(entry.get("kind", "")).strip().lower())
        except ValueError:
            known = ", ".join(k.value for k in DeviceKind)
            raise TopologyError(
                f"{label}: unknown kind {entry.get('kind')!r} (known: {known})"
            ) from None
        default_node = -1 if kind is DeviceKind.SWITCH else 0
        node = _int_field(entry, "node", default_node, label)
        if node < 0 and kind is not DeviceKind.SWITCH:
            raise TopologyError(
                f"{label}: a {kind.value} must be on a node (node >= 0), got {node}"
            )
        names.append(name)
        kinds.append(kind)
        nodes.append(node)
        groups.append(_int_field(entry, "group", -1, label))
    return names, kinds, nodes, groups


def _number(
    entry: dict[str, Any], key: str, label: str, default: float | None, positive: bool
) -> float:
    value = entry.get(key, default)
    if value is None:
        raise TopologyError(f"{label}: missing '{key}'")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TopologyError(f"{label}: {key} must be a number, got {value!r}")
    if (positive and value <= 0) or value < 0:
        raise TopologyError(
            f"{label}: {key} must be {'> 0' if positive else '>= 0'}, got {value!r}"
        )
    return float(value)


def _links(
    entries: list[Any], index: dict[str, int], where: str
) -> tuple[list[int], list[int], list[LinkKind], list[float], list[float]]:
    src: list[int] = []
    dst: list[int] = []
    kinds: list[LinkKind] = []
    bws: list[float] = []
    lats: list[float] = []
    seen: set[tuple[int, int]] = set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise TopologyError(
                f"{where}: link {i}: expected a mapping with src, dst, kind, bandwidth_GBps"
            )
        label = f"{where}: link {i} ({entry.get('src')} -> {entry.get('dst')})"
        _no_unknown(entry, _LINK_FIELDS, label)
        ends = []
        for end in ("src", "dst"):
            if entry.get(end) is None:
                raise TopologyError(f"{label}: dangling link, missing '{end}'")
            if not isinstance(entry[end], str) or entry[end] not in index:
                raise TopologyError(f"{label}: unknown device '{entry[end]}'")
            ends.append(index[entry[end]])
        if ends[0] == ends[1]:
            raise TopologyError(f"{label}: a link must join two different devices")
        try:
            kind = LinkKind(str(entry.get("kind", "")).strip().lower())
        except ValueError:
            known = ", ".join(k.value for k in LinkKind)
            raise TopologyError(
                f"{label}: unknown kind {entry.get('kind')!r} (known: {known})"
            ) from None
        bw = _number(entry, "bandwidth_GBps", label, None, positive=True)
        lat = _number(entry, "latency_us", label, DEFAULT_LATENCY_US, positive=False)
        both = entry.get("bidirectional", True)
        if not isinstance(both, bool):
            raise TopologyError(f"{label}: bidirectional must be true or false, got {both!r}")
        for a, b in ((ends[0], ends[1]), (ends[1], ends[0])) if both else ((ends[0], ends[1]),):
            if (a, b) in seen:
                raise TopologyError(f"{label}: duplicate link (the same direction appears twice)")
            seen.add((a, b))
            src.append(a)
            dst.append(b)
            kinds.append(kind)
            bws.append(bw)
            lats.append(lat)
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
