"""The report's published JSON Schema, the versions on every JSON output, strategy-native
group names and custom-model labels."""

from __future__ import annotations

import json

import pytest

from simulator.cli import main
from simulator.outputs.schema import report_json_schema
from simulator.outputs.versions import SCHEMA_VERSION

SMALL = ["--machine", "dgx-h100", "--gpus", "16", "--model", "gpt-tiny", "--batch-tokens", "4096"]


def _json(capsys: pytest.CaptureFixture[str], args: list[str]) -> object:
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_simulate_json_validates_against_the_published_schema(
    capsys: pytest.CaptureFixture[str],
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = _json(capsys, ["schema", "--report"])
    assert isinstance(schema, dict) and schema == json.loads(json.dumps(report_json_schema()))
    for strategy in (["--grid", "2,2,2,2"], ["--strategy", "megatron", "--set", "parallel.tp=2"]):
        report = _json(capsys, ["simulate", *SMALL, *strategy, "--json"])
        jsonschema.validate(report, schema)
        assert isinstance(report, dict) and report["schema_version"] == SCHEMA_VERSION
    bad = dict(report, iteration_time_s="fast")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_every_json_output_carries_the_versions(capsys: pytest.CaptureFixture[str]) -> None:
    outputs = [
        _json(capsys, ["topology", "--machine", "dgx-h100", "--nodes", "1", "--json"]),
        *_json(
            capsys,
            [
                "collective",
                "--machine",
                "dgx-h100",
                "--nodes",
                "1",
                "--group",
                "8",  # type: ignore[misc]
                "--bytes",
                "1M",
                "--json",
            ],
        ),
    ]
    for out in outputs:
        assert isinstance(out, dict)
        assert out["schema_version"] == SCHEMA_VERSION and out["axsim_version"]


def test_groups_keep_the_strategys_own_names(capsys: pytest.CaptureFixture[str]) -> None:
    report = _json(capsys, ["simulate", *SMALL, "--strategy", "megatron", "--set",
                            "parallel.tp=2", "--set", "parallel.pp=2", "--json"])  # fmt: skip
    assert isinstance(report, dict)
    native = report["comm_time_by_native_group_s"]
    assert {"tp", "pp"} <= set(native) and "x" not in native
    assert report["group_axes"]["tp"] == "x" and report["group_axes"]["pp"] == "pp"
    # the axis view adds up the native groups mapped onto each axis
    for axis, total in report["comm_total_by_group_s"].items():
        mapped = [g for g, a in report["group_axes"].items() if a == axis]
        assert total == pytest.approx(
            sum(report["comm_total_by_native_group_s"][g] for g in mapped)
        )
    axonn = _json(capsys, ["simulate", *SMALL, "--grid", "2,2,2,2", "--json"])
    assert isinstance(axonn, dict)
    # the SC'24 code's vocab-parallel embedding runs on the X·Y plane (its own group)
    assert {g: a for g, a in axonn["group_axes"].items() if g != "world"} == {
        "x": "x", "y": "y", "z": "z", "data": "data", "xy": "xy"
    }  # fmt: skip


def test_a_model_with_a_changed_shape_is_labelled_custom(
    capsys: pytest.CaptureFixture[str],
) -> None:
    preset = _json(capsys, ["simulate", *SMALL, "--json", "--set", "model.layers=2"])
    custom = _json(capsys, ["simulate", *SMALL, "--json", "--set", "model.layers=4"])
    assert isinstance(preset, dict) and isinstance(custom, dict)
    assert preset["model"] == "gpt-tiny" and not preset["model_custom"]  # same as the preset
    assert custom["model"] == "custom (gpt-tiny with layers=4)"
    assert custom["model_custom"] and custom["model_overrides"] == {"layers": 4}
    assert custom["model_preset"] == "gpt-tiny"
