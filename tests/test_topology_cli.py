"""`axsim topology` through simulator.cli.main: tables, JSON, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli import main

EXAMPLE = str(Path(__file__).parent / "data" / "custom_topology.yaml")


def test_json_output_is_one_valid_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "--machine", "frontier", "--nodes", "200", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpus"] == 1600 and data["nics_per_node"] == 4
    assert data["injection_per_gpu_GBps"] == 12.5
    assert data["links"]["xgmi"]["max_GBps"] == 200.0
    labels = [r["label"] for r in data["sample_routes"]]
    assert labels[0] == "intra-node" and "inter-group/pod" in labels
    assert all(r["hops"] >= 1 and r["bottleneck_GBps"] > 0 for r in data["sample_routes"])


def test_json_for_one_node_has_no_fabric_bisection(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "--machine", "dgx-h100", "--nodes", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["bisection_GBps"] is None
    assert data["node_bisection_GBps"] == 1800.0


def test_what_if_flags(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "topology",
        "--machine",
        "perlmutter",
        "--nodes",
        "4",
        "--nics-per-node",
        "1",
        "--nic-bandwidth",
        "50",
        "--routing",
        "minimal",
        "--gpu",
        "a100-80gb",
        "--json",
    ]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["injection_per_gpu_GBps"] == 12.5
    assert data["routing"] == "minimal" and data["gpu_type"] == "a100-80gb"


def test_rich_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "--machine", "frontera-rtx", "--nodes", "90"]) == 0
    out = capsys.readouterr().out
    for text in ("Devices", "Directed links", "bisection", "Sample routes", "n0.gpu0"):
        assert text in out


def test_custom_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "--machine", "custom", "--file", EXAMPLE, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["machine"] == "custom" and data["gpus"] == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["topology", "--machine", "cray-1", "--nodes", "2"], "unknown machine"),
        (["topology", "--machine", "frontier"], "--gpus or --nodes: give the size"),
        (["topology", "--machine", "frontier", "--nodes", "0"], "'--nodes': 0 is not in the range"),
        (
            ["topology", "--machine", "frontier", "--nodes", "2", "--nic-bandwidth", "-1"],
            "--nic-bandwidth",
        ),
        (
            ["topology", "--machine", "frontier", "--nodes", "2", "--nic-bandwidth", "nan"],
            "not a finite number",
        ),
        (
            ["topology", "--machine", "frontier", "--nodes", "100000000"],
            "more than the 262,144 axsim builds",
        ),
        (["topology", "--machine", "frontier", "--nodes", "2", "--gpu", "nope"], "unknown GPU"),
        (["topology", "--machine", "frontier", "--nodes", "2", "--routing", "nope"], "--routing"),
        (
            ["topology", "--machine", "dgx-h100", "--nodes", "2", "--routing", "valiant"],
            "not supported",
        ),
        (
            ["topology", "--machine", "frontier", "--nodes", "2", "--file", EXAMPLE],
            "--file is only for",
        ),
        (["topology", "--machine", "custom"], "needs --file"),
        (["topology", "--machine", "summit"], "unknown machine 'summit'"),
        (["topology", "--machine", "frontier"], "--gpus or --nodes: give the size"),
        (["topology", "--machine", "custom", "--file", "missing.yaml"], "cannot read"),
        (["topology", "--machine", "custom", "--file", EXAMPLE, "--nodes", "3"], "not applicable"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("axsim: error:") and message in err
    assert len(err.splitlines()) == 1
