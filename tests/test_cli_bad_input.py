"""Bad input to every command other than simulate: one line on stderr and exit code 2.

Each case here was found by feeding the CLI malformed values (NaN, empty lists, reversed
or duplicate items, unwritable paths, sizes that would exhaust memory) and used to run
silently, print a traceback or never finish.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from simulator.cli import main
from tests.cli_helpers import one_line_error

DATA = Path(__file__).parent / "data"
COLLECTIVE = ["collective", "--machine", "dgx-h100", "--nodes", "2", "--group", "8"]
CUSTOM = str(DATA / "custom_topology.yaml")
VIDUR = DATA / "vidur_network" / "h100_dgx__all_reduce.csv"
SWEEP_SET = (
    "set: {cluster.machine: dgx-h100, cluster.gpus: 16, model.name: gpt-tiny, "
    "training.batch_tokens: 4096}\naxes: {engine.network: [contention]}\n"
)


def _vidur_with_a_negative_time(tmp_path: Path) -> str:
    rows = list(csv.DictReader(VIDUR.open()))
    rows[3]["time_stats.all_reduce.median"] = "-1"
    out = tmp_path / "h100_bad.csv"
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return str(out)


def _custom_gpu_off_node(tmp_path: Path) -> str:
    text = (
        Path(CUSTOM)
        .read_text()
        .replace("{name: b.gpu1, kind: gpu, node: 1}", "{name: b.gpu1, kind: gpu, node: -1}")
    )
    out = tmp_path / "off_node.yaml"
    out.write_text(text)
    return str(out)


@pytest.mark.parametrize(
    "args,needle",
    [
        (
            ["collective", "--machine", "dgx-h100", "--nodes", "2", "--group", "1"],
            "at least 2 GPUs",
        ),
        ([*COLLECTIVE, "--per-node", "4", "--placement", "2"], "not both"),
        ([*COLLECTIVE, "--factor", "nan"], "not a finite"),
        ([*COLLECTIVE, "--bytes", "1M:1G", "--factor", "1.0000001"], "use a larger factor"),
        (["collective", "--machine", "custom", "--group", "2"], "needs --file"),
        (["calibrate", str(VIDUR), "-o", "x.yaml", "--tolerance", "nan"], "not a finite"),
        (["compare", "--traces", ".", "--tolerance", "nan"], "not a finite"),
        (["figures", "--only", ""], "give at least one name"),
        (["figures", "--only", ","], "give at least one name"),
        (["figures", "--only", "nccl-busbw,,fsdp-scaling"], "empty name"),
        (["validate", "--only", ""], "give at least one name"),
        (
            [
                "compare-strategies",
                "--strategies",
                "axonn,axonn",
                "--machine",
                "dgx-h100",
                "--gpus",
                "16",
                "--model",
                "gpt-tiny",
            ],
            "given twice",
        ),
        (["bench", "--out", "/proc/axsim-cannot-be-here/b.json"], "cannot write"),
        (["bench", "--only", " "], "case name"),
        (
            ["search", "--gpus", "16", "--model", "gpt-tiny", "--set", "parallel.strategy=fsdp"],
            "compare-strategies",
        ),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(
    args: list[str],
    needle: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert needle in one_line_error(args, capsys)


def test_bad_files_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = [
        (
            ["calibrate", _vidur_with_a_negative_time(tmp_path), "-o", str(tmp_path / "c.yaml")],
            "line 5",
        ),
        (
            ["topology", "--machine", "custom", "--file", _custom_gpu_off_node(tmp_path)],
            "must be on a node",
        ),
    ]
    spec = tmp_path / "sweep.yaml"
    spec.write_text(SWEEP_SET)
    cases += [
        (["sweep", str(spec), "--out", "/proc/axsim-cannot-be-here"], "cannot create the folder"),
        (["sweep", str(spec), "--out", str(tmp_path / "o"), "--jobs", "100000"], "--jobs 100000"),
    ]
    typo = tmp_path / "typo.yaml"
    typo.write_text("base: {clustr: {machine: dgx-h100}}\naxes: {engine.network: [contention]}\n")
    cases.append((["sweep", str(typo), "--out", str(tmp_path / "t")], "unknown field 'clustr'"))
    for args, needle in cases:
        assert needle in one_line_error(args, capsys), args
    assert not (tmp_path / "t").exists()  # the typo is caught before any point runs


def test_collective_runs_on_a_custom_topology(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "collective",
        "--machine",
        "custom",
        "--file",
        CUSTOM,
        "--group",
        "4",
        "--bytes",
        "64M",
        "--json",
    ]
    assert main(args) == 0
    assert '"busbw_GBps"' in capsys.readouterr().out
