"""Every automatic choice of a run is recorded with a one-line reason (issue 23): in the
report (`choices`), the rendered report and config.resolved.yaml, whose chosen values
rerun the same simulation; `axsim presets` lists what can be chosen from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simulator.api import simulate
from simulator.cli import main
from simulator.config import load_config
from simulator.outputs.files import resolved_config_yaml

SMALL = ["cluster.machine=dgx-h100", "cluster.gpus=16", "model.name=gpt-tiny"]
SMALL += ["training.batch_tokens=4096"]


def _whats(choices: list[dict[str, str]]) -> list[str]:
    return [c["what"] for c in choices]


def test_default_axonn_run_explains_grid_microbatch_mode_and_algorithms() -> None:
    report = simulate(load_config(None, SMALL)).report
    whats = _whats(report.choices)
    # the grid search also picks the weight lifetime (a searched knob, simulator/search/grids.py)
    assert whats[:4] == ["grid", "weight lifetime", "microbatch", "engine mode"]
    assert any(w.startswith("algorithm ") for w in whats)
    for c in report.choices:
        assert c["value"] and c["reason"] and "\n" not in c["reason"]
    grid = report.choices[0]
    g = report.grid
    assert grid["value"] == f"{g['x']}x{g['y']}x{g['z']}x{g['data']}"
    assert "analytical model's top" in grid["reason"] and "replayed" in grid["reason"]
    assert report.choices[3]["value"] == report.engine_mode


def test_given_values_are_not_choices() -> None:
    overrides = [*SMALL, "parallel.grid={x: 2, y: 2, z: 2, data: 2}"]
    overrides += ["training.microbatch_sequences=2", "engine.collective_algorithm=ring"]
    report = simulate(load_config(None, overrides)).report
    assert _whats(report.choices) == ["engine mode"]


@pytest.mark.parametrize("strategy", ["axonn", "megatron", "fsdp", "optimus", "fsdp-pp"])
def test_resolved_config_reruns_the_same_simulation(strategy: str) -> None:
    """config.resolved.yaml fills in the chosen grid / degrees / microbatch; loading it
    gives the same iteration without choosing again (no grid, degree or microbatch
    choices left), and its comments carry every reason."""
    result = simulate(load_config(None, [*SMALL, f"parallel.strategy={strategy}"]))
    text = resolved_config_yaml(result)
    for c in result.report.choices:
        assert f"#   {c['what']} {c['value']}: {c['reason']}" in text
    again = simulate(load_config(None, [f"{k}={json.dumps(v)}" for k, v in _flat(text)]))
    assert again.report.iteration_time_s == result.report.iteration_time_s
    left = {"grid", "microbatch", "degrees", "mesh"} & set(_whats(again.report.choices))
    assert not left, left


def _flat(text: str) -> list[tuple[str, object]]:
    """The resolved YAML as dotted overrides on the embedded default."""
    data = yaml.safe_load(text)
    out: list[tuple[str, object]] = [("parallel.strategy", data["parallel"]["strategy"])]
    for section, fields in data.items():
        for key, value in fields.items():
            out.append((f"{section}.{key}", value))
    return out


def test_out_writes_the_resolved_config_and_the_table_shows_the_choices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", "--machine", "dgx-h100", "--gpus", "16", "--model", "gpt-tiny"]
    args += ["--batch-tokens", "4096", "--out", str(tmp_path / "o")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "Chosen automatically" in out and "grid" in out
    text = (tmp_path / "o" / "config.resolved.yaml").read_text()
    assert text.startswith("# axsim chose")
    assert main(["simulate", str(tmp_path / "o" / "config.resolved.yaml"), "--json"]) == 0
    rerun = json.loads(capsys.readouterr().out)
    assert rerun["choices"][0]["what"] == "engine mode"


def test_presets_list_machines_models_gpus_and_strategies(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["presets", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"schema_version", "axsim_version", "machines", "models", "gpus"} | {
        "strategies"
    }
    machines = {m["name"]: m for m in data["machines"]}
    assert (
        machines["perlmutter"]["gpu"] == "a100-40gb"
        and machines["perlmutter"]["gpus_per_node"] == 4
    )
    models = {m["name"]: m for m in data["models"]}
    assert models["gpt-80b"]["layers"] == 42 and models["gpt-80b"]["params"] > 7e10
    gpus = {g["name"]: g for g in data["gpus"]}
    # the capacity runs are judged against: the H100's measured totalGlobalMem
    assert gpus["h100"]["memory_GB"] == pytest.approx(85.018279936)
    strategies = {s["name"]: s for s in data["strategies"]}
    from workloads.strategies import STRATEGY_NAMES

    assert set(strategies) == set(STRATEGY_NAMES)
    assert "grid" in strategies["axonn"]["chosen_automatically"]
    assert main(["presets", "gpus"]) == 0
    assert "mi250x-gcd" in capsys.readouterr().out


def test_a_searched_weight_cache_is_written_into_the_resolved_config() -> None:
    """The default grid search also picks the weight cache (simulator/search/grids.py); the
    resolved config fixes it, so loading it reruns the same program."""
    overrides = ["cluster.machine=dgx-h100", "cluster.gpus=64", "model.name=gpt-5b"]
    result = simulate(load_config(None, [*overrides, "training.batch_tokens=262144"]))
    chosen = {c["what"]: c["value"] for c in result.report.choices}
    assert chosen["weight lifetime"].startswith("cache ")
    data = yaml.safe_load(resolved_config_yaml(result))
    assert data["parallel"]["weight_lifetime"] == "cache"
    assert data["parallel"]["cached_layers"] == result.plan.parameters["cached_layers"]
    again = simulate(
        load_config(None, [f"{k}={json.dumps(v)}" for k, v in _flat(yaml.safe_dump(data))])
    )
    assert again.report.iteration_time_s == result.report.iteration_time_s
    assert "weight lifetime" not in _whats(again.report.choices)
