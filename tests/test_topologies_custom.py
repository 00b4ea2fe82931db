"""Custom topologies: the example file, widest-shortest routing, and every bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from topologies.custom import load_custom_topology, parse_custom_topology
from topologies.errors import TopologyError
from topologies.summary import summarize_topology

EXAMPLE = Path(__file__).parent / "data" / "custom_topology.yaml"


def _example() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text())


def test_example_loads_and_routes() -> None:
    t = load_custom_topology(EXAMPLE)
    assert t.num_gpus == 4 and t.num_nodes == 2 and t.gpus_per_node == 2
    assert t.gpu_type == "h100"
    assert t.metadata["machine"] == "custom"
    names = [t.device_name(int(t.links.dst[x])) for x in t.path(0, 3)]
    assert names == ["a.nic0", "leaf", "b.nic0", "b.gpu1"]
    assert t.path_bottleneck_Bps(t.path(0, 1)) == 100e9
    # fewest hops first: a.gpu1 uses its own 16 GB/s PCIe link, not the 2-hop detour
    assert t.path_bottleneck_Bps(t.path(1, 2)) == 16e9


def test_widest_path_among_equal_hops() -> None:
    raw = {
        "devices": [{"name": n, "kind": "gpu"} for n in ("g0", "g1")]
        + [{"name": "s1", "kind": "switch"}, {"name": "s2", "kind": "switch"}],
        "links": [
            {"src": "g0", "dst": "s1", "kind": "pcie", "bandwidth_GBps": 10},
            {"src": "s1", "dst": "g1", "kind": "pcie", "bandwidth_GBps": 10},
            {"src": "g0", "dst": "s2", "kind": "pcie", "bandwidth_GBps": 30},
            {"src": "s2", "dst": "g1", "kind": "pcie", "bandwidth_GBps": 20},
        ],
    }
    t = parse_custom_topology(raw)
    assert t.path_bottleneck_Bps(t.path(0, 1)) == 20e9
    assert t.path_bottleneck_Bps(t.path(1, 0)) == 20e9


def test_json_and_summary(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_example()))
    t = load_custom_topology(path)
    s = summarize_topology(t)
    assert s["bisection_GBps"] == pytest.approx(25.0)
    assert s["devices"] == {"gpu": 4, "nic": 2, "switch": 1}


def _mutate(change: str) -> dict[str, Any]:
    raw = _example()
    devices, links = raw["devices"], raw["links"]
    if change == "unknown device":
        links[0]["dst"] = "a.gpu9"
    elif change == "dangling":
        del links[0]["dst"]
    elif change == "bandwidth":
        links[2]["bandwidth_GBps"] = 0
    elif change == "negative bandwidth":
        links[2]["bandwidth_GBps"] = -5
    elif change == "no route":
        raw["links"] = [lk for lk in links if lk["src"] != "b.nic0"]
    elif change == "one-way":
        links[7]["bidirectional"] = False
    elif change == "duplicate":
        devices.append({"name": "leaf", "kind": "switch"})
    elif change == "no gpus":
        raw["devices"] = [{"name": "x", "kind": "cpu"}, {"name": "y", "kind": "cpu"}]
        raw["links"] = [{"src": "x", "dst": "y", "kind": "pcie", "bandwidth_GBps": 1}]
    elif change == "isolated":
        devices.append({"name": "lonely", "kind": "cpu"})
    elif change == "kind":
        devices[0]["kind"] = "tpu"
    elif change == "field":
        links[0]["bw"] = 3
    elif change == "duplicate link":
        links.append(dict(links[0]))
    elif change == "gpu":
        raw["gpu"] = "tpu-v5"
    elif change == "nan bandwidth":
        links[1]["bandwidth_GBps"] = float("nan")
    elif change == "boolean node":
        devices[2]["node"] = True
    elif change == "negative latency":
        links[3]["latency_us"] = -1
    elif change == "bidirectional":
        links[4]["bidirectional"] = "sometimes"
    elif change == "package":
        raw["package_size"] = 0
    elif change == "no devices":
        raw["devices"] = []
    elif change == "top field":
        raw["switches"] = 2
    elif change == "self link":
        links[0]["dst"] = links[0]["src"]
    elif change == "blank name":
        devices[1]["name"] = "  "
    elif change == "link end not a name":
        links[0]["src"] = ["a.gpu0"]
    return raw


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("unknown device", "unknown device 'a.gpu9'"),
        ("dangling", "links.0.dst: Field required"),
        ("bandwidth", "links.2.bandwidth_GBps: Input should be greater than or equal to 0.001"),
        (
            "negative bandwidth",
            "links.2.bandwidth_GBps: Input should be greater than or equal to 0.001",
        ),
        ("nan bandwidth", "links.1.bandwidth_GBps: Input should be a finite number"),
        ("boolean node", "devices.2.node: expected a number, got the boolean true"),
        ("negative latency", "links.3.latency_us: Input should be greater than or equal to 0"),
        ("bidirectional", "links.4.bidirectional: Input should be a valid boolean"),
        ("package", "package_size: Input should be greater than or equal to 1"),
        ("no devices", "devices: List should have at least 1 item"),
        ("top field", "switches: unknown field"),
        ("self link", r"links.0 \(a.gpu0 -> a.gpu0\): a link must join two different"),
        ("blank name", "devices.1.name: a device name must not be blank"),
        ("link end not a name", "links.0.src: Input should be a valid string"),
        ("no route", "GPU 'a.gpu0' has no route to GPU 'b.gpu0'"),
        ("one-way", "GPU 'a.gpu0' has no route to GPU 'b.gpu0'"),
        ("duplicate", "duplicate device name 'leaf'"),
        ("no gpus", "has no GPUs"),
        ("isolated", "'lonely' is not connected"),
        ("kind", "devices.0.kind: Input should be 'gpu', 'nic', 'switch' or 'cpu'"),
        ("field", "links.0.bw: unknown field"),
        ("duplicate link", "duplicate link"),
        ("gpu", "gpu: unknown GPU 'tpu-v5'"),
    ],
)
def test_bad_inputs_raise_one_line_errors(tmp_path: Path, change: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_mutate(change)))
    with pytest.raises(TopologyError, match=message) as info:
        load_custom_topology(path)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(f"{path}: ")


def test_kinds_ignore_case_and_spaces() -> None:
    """The loader always matched kinds without regard to case; the model keeps that."""
    raw = _example()
    raw["devices"][0]["kind"] = " GPU"
    raw["links"][0]["kind"] = "PCIe"
    assert parse_custom_topology(raw).num_gpus == 4


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="cannot read"):
        load_custom_topology(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("devices: [unclosed")
    with pytest.raises(TopologyError, match="not valid"):
        load_custom_topology(bad)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(TopologyError, match="expected a mapping"):
        load_custom_topology(empty)
