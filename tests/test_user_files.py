"""One way to validate user files: every kind (config, custom topology YAML and JSON, sweep
spec, calibration) is a pydantic model on `UserModel`, and a bad field is exit code 2 and
one line `FILE: dotted.field: message` through the CLI; `axsim schema --topology` and
`--sweep` print JSON Schemas that accept the repository's examples and reject bad files.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import Field, ValidationError

from simulator.cli import main
from simulator.sweep.spec import sweep_spec_json_schema
from tests.cli_helpers import one_line_error
from topologies.custom import custom_topology_json_schema
from topologies.user_input.model import UserModel, first_error_line

ROOT = Path(__file__).resolve().parents[1]
CUSTOM = ROOT / "tests" / "data" / "custom_topology.yaml"
SMALL = ["--machine", "dgx-h100", "--gpus", "16", "--model", "gpt-tiny", "--batch-tokens", "4096"]


# ------------------------------------------------------------------ the one formatter
class _Inner(UserModel):
    rate: float = Field(gt=0)


class _Outer(UserModel):
    count: int = 1
    inner: dict[str, _Inner] = Field(default_factory=dict)


def _error(data: dict[str, Any]) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        _Outer.model_validate(data)
    return info.value


def test_first_error_line_names_source_and_dotted_field() -> None:
    err = _error({"inner": {"a": {"rate": 0}}})
    assert first_error_line(err, "f.yaml") == "f.yaml: inner.a.rate: Input should be greater than 0"


def test_first_error_line_counts_the_rest() -> None:
    err = _error({"inner": {"a": {"rate": 0}, "b": {"rate": -1}}, "count": "x"})
    line = first_error_line(err, "f.yaml")
    assert line.startswith("f.yaml: count: ") and line.endswith(" (and 2 more)")


def test_first_error_line_words_unknown_fields_bools_and_skipped_tags() -> None:
    assert first_error_line(_error({"cnt": 1}), "f") == "f: cnt: unknown field"
    assert (
        first_error_line(_error({"count": True}), "f")
        == "f: count: expected a number, got the boolean true"
    )
    skipped = first_error_line(_error({"inner": {"a": {"rate": 0}}}), "f", skip={"a"})
    assert skipped == "f: inner.rate: Input should be greater than 0"
    key = first_error_line(_error({"inner": {1: {"rate": 1}}}), "f")
    assert key == "f: inner.1: Input should be a valid string"  # pydantic's [key] dropped


# ------------------------------------------------------------------ every kind, via the CLI
def _custom_tree() -> dict[str, Any]:
    tree = yaml.safe_load(CUSTOM.read_text())
    tree["links"][3]["bandwidth_GBps"] = 0
    return tree


def _bad_files(tmp: Path) -> list[tuple[list[str], Path, str]]:
    """(argv, the bad file, its dotted field) for each user-file kind."""
    config = tmp / "config.yaml"
    config.write_text(
        "cluster: {machine: dgx-h100, gpus: 16, nic_bandwidth_GBps: -3}\n"
        "model: {name: gpt-tiny}\ntraining: {batch_tokens: 4096}\n"
    )
    topo_yaml = tmp / "topo.yaml"
    topo_yaml.write_text(yaml.safe_dump(_custom_tree()))
    topo_json = tmp / "topo.json"
    topo_json.write_text(json.dumps(_custom_tree()))
    spec = tmp / "spec.yaml"
    spec.write_text("set: {model.name: gpt-tiny}\naxes: {cluster.gpus: 8}\n")
    calibration = tmp / "cal.yaml"
    calibration.write_text("gpus:\n  h100:\n    overlap_slowdown: 0\n")
    return [
        (["simulate", str(config), "--json"], config, "cluster.nic_bandwidth_GBps"),
        (
            ["topology", "--machine", "custom", "--file", str(topo_yaml)],
            topo_yaml,
            "links.3.bandwidth_GBps",
        ),
        (
            ["topology", "--machine", "custom", "--file", str(topo_json)],
            topo_json,
            "links.3.bandwidth_GBps",
        ),
        (
            [
                "simulate",
                *SMALL,
                "--machine",
                "custom",
                "--set",
                f"cluster.topology_file={topo_json}",
            ],
            topo_json,
            "links.3.bandwidth_GBps",
        ),
        (["sweep", str(spec), "--out", str(tmp / "o")], spec, "axes.cluster.gpus"),
        (
            ["simulate", *SMALL, "--calibration", str(calibration), "--json"],
            calibration,
            "gpus.h100.overlap_slowdown",
        ),
    ]


def test_a_bad_field_is_one_line_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv, path, field in _bad_files(tmp_path):
        err = one_line_error(argv, capsys)
        assert f"{path}: {field}: " in err, (argv, err)
    assert not (tmp_path / "o").exists()  # the spec fails before any point runs


# ------------------------------------------------------------------ the JSON Schemas
def _schema(capsys: pytest.CaptureFixture[str], flag: str) -> dict[str, Any]:
    assert main(["schema", flag]) == 0
    out = json.loads(capsys.readouterr().out)
    assert isinstance(out, dict)
    return out


def _doc_spec() -> Any:
    """The annotated spec at the top of docs/guide/sweep.md."""
    text = (ROOT / "docs" / "guide" / "sweep.md").read_text()
    block = re.search(r"## The spec\n\n```yaml\n(.*?)```", text, re.S)
    assert block is not None
    return yaml.safe_load(block.group(1))


def test_schemas_accept_the_examples_and_reject_bad_files(
    capsys: pytest.CaptureFixture[str],
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    topology = _schema(capsys, "--topology")
    assert topology == json.loads(json.dumps(custom_topology_json_schema()))
    example = yaml.safe_load(CUSTOM.read_text())
    jsonschema.validate(example, topology)
    with pytest.raises(jsonschema.ValidationError, match=r"0 is less than the minimum of 0\.001"):
        jsonschema.validate(_custom_tree(), topology)
    with pytest.raises(jsonschema.ValidationError, match="'tpu' is not one of"):
        jsonschema.validate({**example, "devices": [{"name": "x", "kind": "tpu"}]}, topology)

    sweep = _schema(capsys, "--sweep")
    assert sweep == json.loads(json.dumps(sweep_spec_json_schema()))
    for spec in (yaml.safe_load((ROOT / "examples" / "nic.yaml").read_text()), _doc_spec()):
        jsonschema.validate(spec, sweep)
    with pytest.raises(jsonschema.ValidationError, match=r"\[\] should be non-empty"):
        jsonschema.validate({"axes": {"cluster.gpus": []}}, sweep)
    with pytest.raises(jsonschema.ValidationError, match="'axis' was unexpected"):
        jsonschema.validate({"axis": {}, "axes": {"cluster.gpus": [8]}}, sweep)


def test_schema_flags_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(["schema", "--topology", "--sweep"], capsys)
    assert "give one of --report, --topology, --sweep, --output, not --topology and --sweep" in err
