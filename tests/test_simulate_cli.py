"""`axsim simulate`: the JSON contract, outputs, the Perfetto trace and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.outputs.trace_io import read_trace_json
from tests.cli_helpers import one_line_error

CONTRACT = {
    "iteration_time_s",
    "compute_time_s",
    "exposed_comm_time_s",
    "comm_time_by_group_s",
    "model_flops_per_iteration",
    "pflops_total",
    "tflops_per_gpu",
    "percent_of_advertised_peak",
    "percent_of_empirical_peak",
    "memory_per_gpu_bytes",
    "fits_in_memory",
    "grid",
    "machine",
    "gpus",
    "model",
    "engine_mode",
    "wall_time_s",
    "events",
}
SMALL = ["--machine", "dgx-h100", "--gpus", "16", "--model", "gpt-tiny", "--batch-tokens", "4096"]


def test_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *SMALL, "--grid", "2,2,2,2", "--json"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out)  # exactly one JSON object on stdout
    assert set(report) >= CONTRACT
    assert set(report["comm_time_by_group_s"]) >= {"x", "y", "z", "data"}
    assert report["grid"] == {"x": 2, "y": 2, "z": 2, "data": 2}
    assert (
        report["gpus"] == 16 and report["machine"] == "dgx-h100" and report["model"] == "gpt-tiny"
    )
    assert report["engine_mode"] == "symmetric"
    assert report["iteration_time_s"] > 0 and report["events"] > 0
    assert report["pflops_total"] == pytest.approx(
        report["model_flops_per_iteration"] / report["iteration_time_s"] / 1e15
    )
    assert report["fits_in_memory"] is True


def test_full_and_symmetric_reports_agree(capsys: pytest.CaptureFixture[str]) -> None:
    outs = []
    for mode in ("full", "symmetric"):
        assert main(["simulate", *SMALL, "--grid", "2,1,2,4", "--engine", mode, "--json"]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0]["engine_mode"] == "full" and outs[1]["engine_mode"] == "symmetric"
    assert outs[0]["iteration_time_s"] == outs[1]["iteration_time_s"]


def test_outputs_and_perfetto_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert (
        main(
            [
                "simulate",
                *SMALL,
                "--grid",
                "2,2,2,2",
                "--out",
                str(out),
                "--trace-ranks",
                "0-3",
                "--json",
            ]
        )
        == 0
    )
    capsys.readouterr()
    for name in ("report.json", "config.resolved.yaml", "timeline.csv", "links.csv",
                 "trace.json.gz", "rank_map.json", "timeline.png", "breakdown.svg"):  # fmt: skip
        assert (out / name).is_file(), name
    trace = read_trace_json(out / "trace.json.gz")
    events = trace["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    assert {e["pid"] for e in kernels} == {0, 1, 2, 3}
    for e in kernels:
        assert {"name", "pid", "tid", "ts", "dur", "args"} <= set(e) and e["dur"] >= 0
    nccl = [e for e in kernels if e["name"].startswith("ncclDevKernel_")]
    assert nccl and all(
        "Collective name" in e["args"] and "In msg nelems" in e["args"] for e in nccl
    )
    flows = [e for e in events if e.get("ph") in ("s", "f")]
    assert flows and {e["ph"] for e in flows} == {"s", "f"}
    names = [e for e in events if e.get("ph") == "M" and e["name"] == "thread_name"]
    assert names
    header = (out / "timeline.csv").read_text().splitlines()[0]
    assert header.startswith("rank,stream,name,kind,group")
    # the resolved config reproduces the run
    assert main(["simulate", str(out / "config.resolved.yaml"), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    first = json.loads((out / "report.json").read_text())
    assert again["iteration_time_s"] == first["iteration_time_s"]


@pytest.mark.parametrize(
    "args,needle",
    [
        (
            ["--gpus", "8", "--machine", "dgx-h100", "--grid", "3,1,1,1"],
            "does not equal the 8 GPUs",
        ),
        (["--gpus", "6", "--machine", "dgx-h100"], "--gpus 6: not a multiple of the 8 GPUs"),
        (["--model", "gpt-9000"], "unknown model 'gpt-9000'"),
        (["--machine", "summit"], "unknown machine 'summit'"),
        (["--set", "engine.foo=1"], "engine.foo: unknown field"),
        (["--set", "nonsense"], "expected section.field=value"),
        (["--grid", "a,b"], "--grid"),
        (["--overlap", "xyz"], "unknown flag 'xyz'"),
        ([*SMALL[:6], "--batch-tokens", "96", "--grid", "1,1,2,8"], "not divisible by data*z"),
        ([*SMALL[:6], "--batch-tokens", "100"], "not a multiple of model.seq_len"),
        (["--gpus", "-8"], "'--gpus': -8 is not in the range"),
        (["--gpus", "10000000"], "less than or equal to 262144"),
        (["--grid", "0,2,2,4"], "four positive integers"),
        (["--grid", ""], "four positive integers"),
        ([*SMALL, "--set", "cluster.nic_bandwidth_GBps=true"], "got the boolean true"),
        ([*SMALL, "--set", "cluster.nic_bandwidth_GBps=.inf"], "finite number"),
        ([*SMALL, "--set", "cluster.nic_bandwidth_GBps=1e-9"], "greater than or equal to 0.001"),
        ([*SMALL, "--set", "model.layers=100000000"], "less than or equal to 4096"),
        ([*SMALL, "--set", "training.batch_tokens=1000000000000000000"], "less than or equal"),
        ([*SMALL, "--set", "cluster.topology_file=t.yaml"], "only with machine: custom"),
        ([*SMALL, "--set", "cluster.stragglers=[{rank: 1"], "not valid YAML"),
        (
            [
                *SMALL,
                "--set",
                "cluster.stragglers=[{rank: 1, slowdown: 2}, {rank: 1, slowdown: 3}]",
            ],
            "rank 1 is listed twice",
        ),
        ([*SMALL, "--trace-ranks", "0-3"], "give --out DIR"),
        ([*SMALL, "--out", "/proc/axsim-cannot-be-here"], "cannot create the folder"),
        ([*SMALL, "--out", "o", "--trace-ranks", "7-0"], "ends before it starts"),
        ([*SMALL, "--out", "o", "--trace-ranks", ""], "cannot read ''"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str],
    needle: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert needle in one_line_error(["simulate", *args], capsys)


def test_strict_memory_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "--machine",
        "perlmutter",
        "--gpus",
        "8",
        "--model",
        "gpt-20b",
        "--grid",
        "1,1,1,8",
        "--batch-tokens",
        "16384",
        "--set",
        "training.microbatch_sequences=1",
    ]
    with pytest.raises(SystemExit) as e:
        main(["simulate", *args, "--json", "--strict-memory"])
    assert e.value.code == 3
    captured = capsys.readouterr()
    assert json.loads(captured.out)["fits_in_memory"] is False
    assert "warning: needs" in captured.err


def test_bench_only_matching_nothing_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """A filter that selects no case is an error, not an empty (and misleading) results file."""
    assert main(["bench", "--quick", "--only", "no-such-case"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--only" in err and "no-such-case" in err


def test_a_calibration_of_another_gpu_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Applying none of a calibration silently would report an uncalibrated run as calibrated."""
    cal = tmp_path / "cal.yaml"
    cal.write_text("version: 1\ngpus:\n  a100-40gb:\n    overlap_slowdown: 1.1\n")
    args = ["simulate", *SMALL, "--calibration", str(cal)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "engine.calibration" in err and "no tables for GPU 'h100'" in err
    assert "(it calibrates: a100-40gb)" in err
    assert main([*args, "--set", "cluster.gpu=a100-40gb", "--json"]) == 0


def test_bench_table_keeps_the_mode_in_case_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Case names carry '[mode, network]', which rich would swallow as markup."""
    out = tmp_path / "bench.json"
    only = "1,024 Perlmutter GPUs [symmetric, alpha"
    assert main(["bench", "--quick", "--only", only, "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "[symmetric, alpha-beta]" in captured.out
    assert json.loads(out.read_text())["cases"][0]["name"].endswith("[symmetric, alpha-beta]")


def test_custom_machine_takes_its_gpu_count_from_the_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The default's 1,024 GPUs are Perlmutter's; a custom file says how many it has."""
    topo = str(Path(__file__).parent / "data" / "custom_topology.yaml")
    args = ["simulate", "--machine", "custom", "--set", f"cluster.topology_file={topo}"]
    args += ["--model", "gpt-tiny", "--batch-tokens", "8192", "--json"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["gpus"] == 4
    assert main([*args, "--gpus", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["gpus"] == 2


@pytest.mark.parametrize(
    "text,needle",
    [
        (
            b"cluster: {gpus: 16}\nmodel: {name: gpt-tiny}\ncluster: {gpus: 8}\n",
            "duplicate key 'cluster'",
        ),
        (b"\xff\xfe\x00 not text", "not a text file"),
        (b"", "top level must be a mapping"),
    ],
)
def test_bad_config_files_are_one_line(
    text: bytes, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(text)
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and needle in err and str(path) in err


def test_a_new_strategy_in_set_resets_the_parallel_section(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The default's AxoNN fields (overlap) would not validate under Megatron-LM."""
    args = ["simulate", *SMALL, "--set", "parallel.tp=2", "--set", "parallel.strategy=megatron"]
    assert main([*args, "--json"]) == 0
    params = json.loads(capsys.readouterr().out)["parameters"]
    assert params["strategy"] == "megatron" and params["tp"] == 2
