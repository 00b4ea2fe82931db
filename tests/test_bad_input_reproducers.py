"""Every reproducer of issue 23's bad-input campaign, as a regression test.

Tracebacks (a deep config, a damaged sweep journal, an unwritable trace-torch --out),
silently wrong or accepted input (compare with another GPU's calibration, an empty
--machine, --jobs beside dask, search --top 0), the runaway (zeropp/fsdp with 2^30 batch
tokens), errors that did not name the field, and trace durations that ran backwards.
Each failed (traceback, wrong exit code, silent result or unbounded run) on the code
before the fix.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from simulator.cli import main
from tests import calibrate_synth as synth
from tests.cli_helpers import one_line_error

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--machine", "dgx-h100", "--gpus", "16", "--model", "gpt-tiny", "--batch-tokens", "4096"]
SWEEP_SPEC = (
    "set: {cluster.machine: dgx-h100, cluster.gpus: 16, model.name: gpt-tiny, "
    "training.batch_tokens: 4096}\naxes: {cluster.nic_bandwidth_GBps: [12.5, 25, 50]}\n"
)


# ---------------------------------------------------------------- tracebacks
def test_config_nested_5000_deep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("cluster: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n")
    err = one_line_error(["simulate", str(deep)], capsys)
    assert "deep.yaml" in err and "nested more than" in err
    flow = tmp_path / "flow.yaml"
    flow.write_text("cluster: " + "[" * 5000 + "]" * 5000 + "\n")
    assert "nested more than" in one_line_error(["simulate", str(flow)], capsys)
    err = one_line_error(["simulate", "--set", "cluster.stragglers=" + "[" * 5000], capsys)
    assert "cluster.stragglers" in err


def test_nested_json_files_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cal = tmp_path / "cal.json"
    cal.write_text("[" * 100_000 + "]" * 100_000)
    args = ["simulate", *SMALL, "--calibration", str(cal)]
    assert "nested more than" in one_line_error(args, capsys)
    trace = tmp_path / "rank0.json"
    trace.write_text('{"traceEvents": [' + "[" * 100_000 + "]" * 100_000 + "]}")
    assert "nested too deeply" in one_line_error(["calibrate", str(trace), "-o", "c.yaml"], capsys)


def _sweep(spec: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, list[dict]]:
    assert main(["sweep", str(spec), "--out", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    return err, rows


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 3-point sweep (spec and out folder), copied by each journal test."""
    folder = tmp_path_factory.mktemp("sweep")
    (folder / "nic.yaml").write_text(SWEEP_SPEC)
    args = ["sweep", str(folder / "nic.yaml"), "--out", str(folder / "out"), "--no-progress"]
    assert main(args) == 0
    return folder


@pytest.mark.parametrize(
    "damage,problem",
    [
        (b"\xff\xfe not utf-8 \x80\n", "not UTF-8"),
        (b"[1, 2, 3]\n", "a JSON list"),
        (b'{"status": "ok", "iteration_time_s": 1.0}\n', "without a text config_hash"),
        (b'{"config_hash": "abc", "sta', "not JSON"),  # torn by a kill mid-write
    ],
)
def test_a_damaged_journal_resumes_and_loses_no_good_row(
    damage: bytes,
    problem: str,
    finished_sweep: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shutil.copytree(finished_sweep, tmp_path / "s")
    spec, out = tmp_path / "s" / "nic.yaml", tmp_path / "s" / "out"
    journal = out / "rows.jsonl"
    first = [json.loads(line) for line in journal.read_text().splitlines()]
    assert len(first) == 3
    lines = journal.read_bytes().splitlines(keepends=True)
    # damage between good rows (a torn line at the end, where a kill leaves it)
    torn = not damage.endswith(b"\n")
    journal.write_bytes(b"".join([*lines, damage] if torn else [lines[0], damage, *lines[1:]]))
    capsys.readouterr()
    err, rows = _sweep(spec, out, capsys)
    assert "1 damaged line" in err and problem in err and "rows.damaged.jsonl" in err
    assert "3 already done, 0 run" in err  # every good row kept, none recomputed
    assert [r["config_hash"] for r in rows] == [r["config_hash"] for r in first]
    assert (out / "rows.damaged.jsonl").read_bytes() == damage.rstrip(b"\n") + b"\n"
    err, _ = _sweep(spec, out, capsys)
    assert "damaged line" not in err  # set aside once, not met again


def test_trace_torch_unwritable_out(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["trace-torch", "--grid", "1,1,1,1", "--out", "/proc/axsim-cannot-be-here/run"]
    assert "--out /proc/axsim-cannot-be-here/run" in one_line_error(args, capsys)


# ------------------------------------------------------- silently wrong or accepted
def test_compare_refuses_a_calibration_for_another_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = tmp_path / "traces"
    synth.write_run(traces)
    cal = tmp_path / "mi300x.yaml"  # an MI250X GCD cannot run the synthetic GEMMs (issue 33)
    assert main(["calibrate", str(traces), "--gpu", "mi300x", "-o", str(cal)]) == 0
    capsys.readouterr()
    run = {"format": "axsim-torch4d-run/1", "world_size": 2, "device": "cuda",
           "config": {"grid": {"x": 2, "y": 1, "z": 1, "data": 1},
                      "dims": {"name": "tiny", "layers": 1, "hidden": 64, "heads": 4,
                               "seq_len": 32, "batch": 8}}}  # fmt: skip
    (traces / "run.json").write_text(json.dumps(run))
    args = ["compare", "--traces", str(traces), "--machine", "dgx-h100", "--calibration", str(cal)]
    err = one_line_error(args, capsys)
    assert "no tables for GPU 'h100'" in err and "mi300x" in err


@pytest.mark.parametrize(
    "args,needle",
    [
        (["simulate", "--machine", ""], "unknown machine ''"),
        (["simulate", "--model", ""], "unknown model ''"),
        (["simulate", "--calibration", ""], "engine.calibration: an empty path"),
        (["search", "--gpus", "16", "--model", "gpt-tiny", "--top", "0"], "--top"),
    ],
)
def test_empty_or_zero_flags_are_errors(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert needle in one_line_error(args, capsys)


def test_sweep_jobs_beside_dask_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SWEEP_SPEC)
    args = ["sweep", str(spec), "--out", str(tmp_path / "o"), "--dask-local", "1", "--jobs", "2"]
    assert "--jobs 2" in one_line_error(args, capsys)


# ------------------------------------------------------------------- runaway
_BOUNDED = textwrap.dedent(
    """
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    from simulator.api import simulate
    from simulator.config import load_config
    print(simulate(load_config(None, sys.argv[1:])).report.iteration_time_s)
    """
)


@pytest.mark.parametrize("strategy", ["zeropp", "fsdp"])
def test_huge_batches_inside_the_limits_run_in_bounded_memory(strategy: str) -> None:
    """choose_setup replayed a 1F1B schedule as long as the microbatch count for every
    candidate: 2^30 tokens ran past 120 s and 1.7 GB; 2^34 tokens of 32-token sequences
    (2^25 microbatches per replica, 4x inside the limit) die under a 3 GiB address-space
    limit on the old code, and run in a fraction of it with the closed form."""
    overrides = [f"parallel.strategy={strategy}", "cluster.machine=dgx-h100", "cluster.gpus=16"]
    overrides += ["model.name=gpt-tiny", f"training.batch_tokens={2**34}"]
    proc = subprocess.run(
        [sys.executable, "-c", _BOUNDED, *overrides],
        capture_output=True,
        text=True,
        timeout=600,  # a guard against a hang, not a speed assertion
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.split()[-1]) > 0


def test_expanded_pipelines_beyond_the_op_budget_fail_at_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every microbatch of a pipeline is built: 2^28 of them would build for days (since
    issue 33 the schedule's size is checked from its formula, before the op budget)."""
    args = ["simulate", *SMALL, "--strategy", "megatron", "--set", "parallel.pp=2"]
    args += ["--set", "training.microbatch_sequences=1", "--batch-tokens", str(2**36)]
    err = one_line_error(args, capsys)
    assert "forward passes to schedule" in err and "training.microbatch_sequences" in err


def test_full_mode_beyond_the_simulated_op_budget_fails_at_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["simulate", "--machine", "dgx-h100", "--gpus", "16384", "--model", "gpt-640b"]
    args += ["--grid", "8,1,8,256", "--engine", "full", "--batch-tokens", str(2**22)]
    err = one_line_error(args, capsys)
    assert "16,384 ranks in full mode" in err and "engine.mode=auto" in err


# ----------------------------------------------------------- misleading errors
@pytest.mark.parametrize(
    "args,needle",
    [
        (
            ["--strategy", "zeropp", "--set", "engine.collective_algorithm=ring"],
            "engine.collective_algorithm=ring: algorithm 'ring' does not support all-to-all",
        ),
        (["--set", "cluster.nic_bandwidth_GBps=5e-324"], "cluster.nic_bandwidth_GBps"),
        (["--set", "cluster.fabric_link_bandwidth_GBps=1e-300"], "fabric_link_bandwidth_GBps"),
        (["--set", "cluster.intra_node_bandwidth_scale=1e-300"], "intra_node_bandwidth_scale"),
        (["--set", "parallel.grid=false"], "parallel.grid: expected a mapping"),
        (["--set", "engine.mode=true"], "engine.mode: expected one of auto, full, symmetric"),
        (["--set", "parallel.pipeline=2"], "parallel.pipeline: 2 pipeline stages"),
    ],
)
def test_errors_name_the_field(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert needle in one_line_error(["simulate", *SMALL, *args], capsys)


def test_the_schema_does_not_advertise_axonn_pipelines() -> None:
    from simulator.config import config_json_schema

    schema = json.dumps(config_json_schema())
    assert '"maximum": 1' in schema and "G_inter" in schema


@pytest.mark.parametrize("dur,needle", [(-5.0, "negative 'dur'"), ("nan", "non-finite")])
def test_trace_with_a_negative_or_nan_kernel_duration(
    dur: object, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = tmp_path / "t"
    synth.write_run(traces)
    data = json.loads((traces / "rank0.json").read_text())
    kernel = next(e for e in data["traceEvents"] if e.get("cat") == "kernel")
    kernel["dur"] = dur
    (traces / "rank0.json").write_text(json.dumps(data))
    err = one_line_error(["calibrate", str(traces), "-o", str(tmp_path / "c.yaml")], capsys)
    assert "rank0.json: traceEvents[" in err and needle in err


def test_control_characters_in_a_value_stay_on_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Found by the generated suite: '\\x1e' in a machine name split the error line."""
    err = one_line_error(["simulate", "--machine", "0\x1e0\n1"], capsys)
    assert "unknown machine '0\\x1e0 1'" in err


# ------------------------------------------------- found by the nightly profile (issue 23)
def test_a_trace_with_a_non_numeric_message_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """'In msg nelems': 'perlmutter' raised ValueError in int() (a traceback)."""
    traces = tmp_path / "t"
    synth.write_run(traces)
    data = json.loads((traces / "rank0.json").read_text())
    for event in data["traceEvents"]:  # the kernel and its record_param_comms
        if "In msg nelems" in event.get("args", {}):
            event["args"]["In msg nelems"] = "perlmutter"
    (traces / "rank0.json").write_text(json.dumps(data))
    err = one_line_error(["calibrate", str(traces), "-o", str(tmp_path / "c.yaml")], capsys)
    assert "'In msg nelems' is 'perlmutter', not a whole number of elements" in err


def test_a_custom_topology_link_end_that_is_not_a_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A link whose `src` is a list raised TypeError (unhashable) instead of naming it."""
    import yaml

    tree = yaml.safe_load((ROOT / "tests" / "data" / "custom_topology.yaml").read_text())
    tree["links"][0]["src"] = ["a.gpu0"]
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(tree))
    err = one_line_error(["topology", "--machine", "custom", "--file", str(path), "--json"], capsys)
    assert "t.yaml: links.0.src: Input should be a valid string" in err


@pytest.mark.parametrize(
    "damage,needle",
    [
        ("cat", "has a 'cat' that is not text"),  # TypeError: unhashable type: 'list'
        ("tid", "has a 'tid' that is not a number or text"),  # unhashable thread key
        ("deviceProperties", None),  # TypeError: 'bool' object is not iterable; now ignored
    ],
)
def test_a_trace_with_wrong_shaped_fields(
    damage: str, needle: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three tracebacks the nightly profile found in damaged Kineto traces."""
    traces = tmp_path / "t"
    synth.write_run(traces)
    data = json.loads((traces / "rank0.json").read_text())
    if damage == "deviceProperties":
        data["deviceProperties"] = True
    else:
        kernel = next(e for e in data["traceEvents"] if e.get("cat") == "kernel")
        kernel[damage] = [1]
    (traces / "rank0.json").write_text(json.dumps(data))
    args = ["calibrate", str(traces), "--gpu", "h100", "-o", str(tmp_path / "c.yaml")]
    if needle is None:
        code = main(args)
        assert code in (0, 2) and "Traceback" not in capsys.readouterr().err
    else:
        assert needle in one_line_error(args, capsys)


def test_compare_traces_with_a_name_too_long(capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the nightly profile: Path.exists() raised OSError (ENAMETOOLONG)."""
    args = ["compare", "--traces", "x" * 300, "--machine", "dgx-h100"]
    assert "File name too long" in one_line_error(args, capsys)


@pytest.mark.parametrize("command", ["simulate", "compare"])
def test_config_with_a_name_too_long(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by the nightly profile: a config the file system cannot stat (read_yaml_file
    called Path.exists(), which raised ENAMETOOLONG) is one line naming the config file."""
    if command == "simulate":
        args = ["simulate", "x" * 300]
    else:
        traces = tmp_path / "t"
        synth.write_run(traces)
        args = ["compare", "--traces", str(traces), "--machine", "dgx-h100", "--config", "x" * 300]
    assert "cannot read the config file" in one_line_error(args, capsys)
