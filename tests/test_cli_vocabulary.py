"""One flag vocabulary across commands (issue 23): help on every option, `-o` for every
`--out`, and CONFIG / --set / --seq-len / --calibration wherever a command simulates a
configuration."""

from __future__ import annotations

import json

import click
import pytest

from simulator.cli import main
from simulator.commands import options
from tests.cli_helpers import all_commands, one_line_error

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


# ------------------------------------------------------------------ issue 34: one vocabulary
SHARED = {
    "--machine": options.MACHINE_HELP,
    "--gpus": options.GPUS_HELP,
    "--nodes": options.NODES_HELP,
    "--set": options.SET_HELP,
    "--model": options.MODEL_HELP,
    "--gpu": options.GPU_HELP,
    "--batch-tokens": options.BATCH_TOKENS_HELP,
    "--seq-len": options.SEQ_LEN_HELP,
    "--jobs": options.JOBS_HELP,
    "--progress": options.PROGRESS_HELP,
}
"""Shared option -> the help sentence it starts with everywhere (its meaning)."""
MACHINE_SIZED = ("simulate", "search", "compare-strategies", "collective", "topology")
CONFIG_BUILDING = (*MACHINE_SIZED, "sweep", "compare")


def _option(cmd: click.Command, flag: str) -> click.Option | None:
    found = [p for p in cmd.params if isinstance(p, click.Option) and flag in p.opts]
    return found[0] if found else None


def test_shared_options_have_one_name_type_and_meaning_on_every_command() -> None:
    seen: dict[str, list[tuple[str, object, bool, bool]]] = {}
    for name, cmd in sorted(all_commands().items()):
        for p in cmd.params:
            if not isinstance(p, click.Option):
                continue
            for flag in set(p.opts) & set(SHARED):
                assert (p.help or "").startswith(SHARED[flag]), (name, flag, p.help)
                seen.setdefault(flag, []).append((name, type(p.type), p.is_flag, p.multiple))
            if p.name == "as_json":
                assert p.opts == ["--json"] and p.is_flag, name
                assert (p.help or "").startswith("Print JSON to stdout, stamped with schema_ver")
    for flag, uses in seen.items():  # the same parameter type and arity everywhere
        assert len({u[1:] for u in uses}) == 1, (flag, uses)
    for name in MACHINE_SIZED:
        cmd = all_commands()[name]
        for flag in ("--machine", "--gpus", "--nodes", "--set"):
            assert _option(cmd, flag) is not None, (name, flag)
    for name in CONFIG_BUILDING:
        assert _option(all_commands()[name], "--set") is not None, name
    # no other spelling of a shared option (e.g. --num-gpus, --node-count, --override)
    others = {"--num-gpus", "--node-count", "--num-nodes", "--override", "--machine-name"}
    for name, cmd in all_commands().items():
        assert not others & {o for p in cmd.params for o in getattr(p, "opts", ())}, name


@pytest.mark.parametrize("command", ["topology", "collective"])
def test_positional_machine_still_works_with_one_warning(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tail = ["--group", "8", "--bytes", "1M"] if command == "collective" else []
    assert main([command, "dgx-h100", "--nodes", "1", *tail, "--json"]) == 0
    old = capsys.readouterr()
    assert old.err.count("\n") == 1 and "deprecated" in old.err
    assert f"axsim {command} --machine dgx-h100" in old.err
    assert main([command, "--machine", "dgx-h100", "--gpus", "8", *tail, "--json"]) == 0
    new = capsys.readouterr()
    assert new.err == ""
    strip = ("axsim_version",)
    assert [{k: v for k, v in d.items() if k not in strip} for d in _rows(old.out)] == [
        {k: v for k, v in d.items() if k not in strip} for d in _rows(new.out)
    ]
    err = one_line_error(
        [command, "frontier", "--machine", "dgx-h100", "--nodes", "1", *tail], capsys
    )
    assert "disagree" in err
    assert "--machine" in one_line_error([command, "--nodes", "1", *tail], capsys)


def _rows(text: str) -> list[dict[str, object]]:
    data = json.loads(text)
    return data if isinstance(data, list) else [data]


@pytest.mark.parametrize("command", ["topology", "simulate"])
def test_gpus_and_nodes_mean_the_same_size_everywhere(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = [command, "--machine", "dgx-h100"]
    base += ["--model", "gpt-tiny", "--seq-len", "64", "--batch-tokens", "2048"] * (
        command == "simulate"
    )
    assert main([*base, "--gpus", "16", "--json"]) == 0
    by_gpus = json.loads(capsys.readouterr().out)
    assert main([*base, "--nodes", "2", "--json"]) == 0
    by_nodes = json.loads(capsys.readouterr().out)
    assert main([*base, "--nodes", "2", "--gpus", "16", "--json"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert by_gpus["gpus"] == by_nodes["gpus"] == both["gpus"] == 16
    err = one_line_error([*base, "--nodes", "2", "--gpus", "24"], capsys)
    assert "--gpus 24 and --nodes 2 disagree" in err and "8 GPUs" in err
    assert "--gpus 12: not a multiple" in one_line_error([*base, "--gpus", "12"], capsys)
    assert "--gpus" in one_line_error([*base, "--gpus", "0"], capsys)


def test_set_builds_the_machine_of_topology_and_collective(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["topology", "--machine", "dgx-h100", "--nodes", "2", "--json"]
    assert main([*base, "--nics-per-node", "4"]) == 0
    by_flag = json.loads(capsys.readouterr().out)
    assert main([*base, "--set", "cluster.nics_per_node=4"]) == 0
    by_set = json.loads(capsys.readouterr().out)
    assert by_flag == by_set and by_set["nics_per_node"] == 4
    assert main(["topology", "--machine", "dgx-h100", "--set", "cluster.gpus=16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpus"] == 16
    err = one_line_error([*base, "--set", "model.name=gpt-5b"], capsys)
    assert "--set 'model.name=gpt-5b'" in err and "cluster.FIELD" in err
    err = one_line_error([*base, "--set", "cluster.nics_per_node=0"], capsys)
    assert "nics_per_node" in err
    # the YAML 1.1 guards of simulate's --set hold here too (no: a string, not False)
    assert "routing" in one_line_error([*base, "--set", "cluster.routing=no"], capsys)


def test_sweep_takes_set_on_its_base(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "set: {cluster.machine: dgx-h100, cluster.gpus: 8, model.name: gpt-tiny, "
        "model.seq_len: 64, training.batch_tokens: 1024}\naxes: {cluster.nics_per_node: [2]}\n"
    )
    out = tmp_path / "o"
    args = ["sweep", str(spec), "--out", str(out), "--no-progress"]
    assert main([*args, "--set", "training.batch_tokens=2048"]) == 0
    capsys.readouterr()
    from simulator.sweep import read_journal

    (row,) = read_journal(out / "rows.jsonl")
    assert row["status"] == "ok" and row["batch_tokens"] == 2048  # the spec said 1024
    err = one_line_error([*args, "--set", "cluster.nics_per_node=4"], capsys)
    assert "is an axis of the spec" in err


def test_figures_without_matplotlib_is_one_line_with_the_install_hint(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as on the base install
    args = ["figures", "--reduced", "--only", "nccl-busbw", "--out", str(tmp_path / "f")]
    err = one_line_error(args, capsys)
    assert "matplotlib" in err and "pip install 'axsim[figures]'" in err
    assert not (tmp_path / "f").exists()
