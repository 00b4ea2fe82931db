"""One flag vocabulary across commands (issue 23): help on every option, `-o` for every
`--out`, and CONFIG / --set / --seq-len / --calibration wherever a command simulates a
configuration."""

from __future__ import annotations

import json

import click
import pytest

from simulator.cli import main
from tests.cli_helpers import all_commands

SIMULATING = ("simulate", "search", "compare-strategies")


def test_every_option_has_help() -> None:
    assert {"simulate", "collective", "validate", "calibrate"} <= set(all_commands())
    missing = [
        f"{name} {'/'.join(p.opts)}"
        for name, cmd in sorted(all_commands().items())
        for p in cmd.params
        if isinstance(p, click.Option) and not p.help
    ]
    assert not missing, missing


def test_every_out_has_the_short_form() -> None:
    for name, cmd in all_commands().items():
        for p in cmd.params:
            if isinstance(p, click.Option) and "--out" in p.opts:
                assert "-o" in p.opts, name


@pytest.mark.parametrize("name", SIMULATING)
def test_simulating_commands_share_the_config_flags(name: str) -> None:
    cmd = all_commands()[name]
    args = [p.name for p in cmd.params if isinstance(p, click.Argument)]
    opts = {o for p in cmd.params if isinstance(p, click.Option) for o in p.opts}
    assert args == ["config"], name
    assert {"--set", "--seq-len", "--calibration", "--machine", "--gpus", "--model"} <= opts


def test_compare_strategies_takes_a_config_and_set(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(
        "cluster: {machine: dgx-h100, gpus: 16}\nmodel: {name: gpt-tiny}\n"
        "parallel: {strategy: axonn}\ntraining: {batch_tokens: 4096}\n"
    )
    args = ["compare-strategies", str(cfg), "--strategies", "fsdp", "--seq-len", "64"]
    args += ["--set", "cluster.nics_per_node=4", "--max-candidates", "1", "--json"]
    assert main(args) == 0
    captured = capsys.readouterr()
    (entry,) = json.loads(captured.out)
    assert entry["strategy"] == "fsdp" and entry["gpus"] == 16
    assert "can take minutes" in captured.err
    args = ["compare-strategies", str(cfg), "--set", "parallel.tp=2"]
    assert main(args) == 2
    assert "searches the parallel section" in capsys.readouterr().err
