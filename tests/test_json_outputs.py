"""Every JSON output carries `schema_version` and validates against its published schema
(`axsim schema --output NAME`), issue 34.

The simulator's outputs are produced here at small sizes; the validation commands'
(calibrate, compare, figures, validate), which need traces or minutes of simulation, are
validated where their tests already produce them (OTHER_TESTS names the files, and a test
here checks that they do). The schemas are pydantic-generated (simulator/outputs/
json_schemas.py, validation/commands/schemas.py); each is a valid 2020-12 schema and
rejects a document that lacks the version stamp.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from simulator.cli import app, main
from simulator.commands.schema import json_outputs
from simulator.outputs.json_schemas import SWEEP_OK_KEYS
from simulator.outputs.schema import report_json_schema
from simulator.sweep import read_journal
from tests.cli_helpers import all_commands, assert_valid_output, output_schema

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--machine", "dgx-h100", "--gpus", "16", "--model", "gpt-tiny", "--seq-len", "64"]
SMALL += ["--batch-tokens", "4096"]

# command -> test file that validates its output (assert_valid_output("NAME", ...))
OTHER_TESTS = {
    "calibrate": "test_calibrate_synthetic.py",
    "compare": "test_closed_loop.py",
    "figures": "test_figures.py",
    "validate": "test_validate.py",
}
HERE = ("simulate", "search", "compare-strategies", "collective", "topology", "presets")


def _json(args: list[str], capsys: pytest.CaptureFixture[str]) -> object:
    assert main(args) == 0, args
    return json.loads(capsys.readouterr().out)


def test_every_json_option_declares_a_schema_and_every_output_is_validated() -> None:
    with_json = {
        name
        for name, cmd in all_commands().items()
        if any("--json" in getattr(p, "opts", ()) for p in cmd.params)
    }
    outputs = json_outputs(app)
    assert with_json | {"sweep-row"} == set(outputs)
    assert set(HERE) | set(OTHER_TESTS) | {"sweep-row"} == set(outputs)
    for name, test_file in OTHER_TESTS.items():
        assert f'assert_valid_output("{name}"' in (ROOT / "tests" / test_file).read_text(), name


@pytest.mark.parametrize("name", sorted(json_outputs(app)))
def test_each_schema_is_valid_and_requires_the_stamp(name: str) -> None:
    schema = output_schema(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for empty in ({}, [{}]):  # an object without schema_version never validates
        assert not validator.is_valid(empty)


def test_simulate_search_and_compare_strategies(capsys: pytest.CaptureFixture[str]) -> None:
    assert_valid_output("simulate", _json(["simulate", *SMALL, "--json"], capsys))
    found = _json(["search", *SMALL, "--top", "1", "--screen", "1", "--json"], capsys)
    assert_valid_output("search", found)
    args = ["compare-strategies", *SMALL, "--strategies", "fsdp,axonn", "--max-candidates", "1"]
    entries = _json([*args, "--json"], capsys)
    assert_valid_output("compare-strategies", entries)
    broken = [dict(e) for e in entries]  # type: ignore[union-attr]
    del broken[0]["iteration_time_s"]  # a strategy that ran carries its report's keys
    with pytest.raises(jsonschema.ValidationError):
        assert_valid_output("compare-strategies", broken)


def test_collective_topology_and_presets(capsys: pytest.CaptureFixture[str]) -> None:
    machine = ["--machine", "dgx-h100", "--nodes", "2"]
    rows = _json(["collective", *machine, "--group", "16", "--bytes", "1M:4M", "--json"], capsys)
    assert_valid_output("collective", rows)
    assert_valid_output("topology", _json(["topology", *machine, "--json"], capsys))
    presets = _json(["presets", "--json"], capsys)
    assert_valid_output("presets", presets)
    assert presets["schema_version"] == 1  # type: ignore[index]
    assert_valid_output("presets", _json(["presets", "gpus", "--json"], capsys))


def test_sweep_rows_follow_their_schema(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "set: {cluster.machine: dgx-h100, cluster.gpus: 8, model.name: gpt-tiny, "
        "model.seq_len: 64, training.batch_tokens: 1024}\n"
        "axes: {cluster.nics_per_node: [2, 0]}\n"  # 0 NICs does not validate: an error row
    )
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--no-progress"]) == 0
    rows = read_journal(out / "rows.jsonl")
    assert {r["status"] for r in rows} == {"ok", "error"}, rows
    for row in rows:
        assert_valid_output("sweep-row", row)
    ok = next(r for r in rows if r["status"] == "ok")
    with pytest.raises(jsonschema.ValidationError):
        assert_valid_output("sweep-row", {k: v for k, v in ok.items() if k != "tflops_per_gpu"})
    report = report_json_schema()["properties"]
    assert isinstance(report, dict) and set(SWEEP_OK_KEYS) <= set(report)


def test_schema_output_names_the_known_outputs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--output", "presets"]) == 0
    assert json.loads(capsys.readouterr().out)["$id"].startswith("urn:axsim:presets:")
    assert main(["schema", "--output", "bench"]) == 2
    err = capsys.readouterr().err
    assert "--output" in err and "sweep-row" in err and err.count("\n") == 1
    assert main(["schema", "--report", "--output", "simulate"]) == 2
