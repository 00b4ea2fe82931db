"""Every reproducer of issue 33's hostile-user campaign, as a regression test.

Tracebacks (a sub-byte --bytes, a 20-digit --trace-ranks, an intra-node scale of 1e300,
8 ranks on a 4-GPU custom file, a file named `kineto` or a folder named `report.json` in
--out), runaways (-j 100000, schedules and sweeps built before they are bounded, YAML
alias bombs, inputs that never end, gzip bombs), silently wrong results (YAML 1.1's
`1:30` = 90), and markup or terminal codes from names in files. Each failed (traceback,
unbounded run or silent result) on the code before the fix. Calibration, outputs and
processes have their own files (test_calibrate_bounds.py, test_fault_injection.py).
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from simulator.cli import main
from tests.cli_helpers import one_line_error

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
CUSTOM = DATA / "custom_topology.yaml"
SMALL = ["--machine", "dgx-h100", "--gpus", "16", "--model", "gpt-tiny", "--batch-tokens", "4096"]


# ---------------------------------------------------------------- tracebacks
@pytest.mark.parametrize(
    "size,needle",
    [
        ("0.4:1K", "at least 1 byte"),  # ZeroDivisionError
        ("1:" + "9" * 400, "is above 1024 GiB"),  # inf in round()
    ],
)
def test_collective_sizes_out_of_range(
    size: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["collective", "--machine", "dgx-h100", "--nodes", "1", "--group", "8", "--bytes", size]
    assert needle in one_line_error(args, capsys)


def test_trace_ranks_beyond_any_world(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """range(0, 10^20) raised OverflowError (and a custom topology's unknown world was 2^62,
    a list built for minutes)."""
    args = ["simulate", *SMALL, "--out", str(tmp_path / "o"), "--trace-ranks"]
    err = one_line_error([*args, "0-99999999999999999999"], capsys)
    assert "rank 99999999999999999999 is outside 0..15" in err
    custom = ["simulate", "--machine", "custom", "--set", f"cluster.topology_file={CUSTOM}"]
    custom += ["--model", "gpt-tiny", "--out", str(tmp_path / "c"), "--trace-ranks", "0-9999999999"]
    assert "is outside 0..262143" in one_line_error(custom, capsys)


@pytest.mark.parametrize(
    "args,needle",
    [
        (
            ["topology", "--machine", "dgx-h100", "--nodes", "2", "--intra-node-scale", "1e300"],
            "0.0001<=x<=10000",
        ),
        (
            ["topology", "--machine", "dgx-h100", "--nodes", "2", "--nic-bandwidth", "1e300"],
            "--nic-bandwidth",
        ),
        (
            [
                "collective",
                "--machine",
                "dgx-h100",
                "--nodes",
                "2",
                "--group",
                "16",
                "--nic-bandwidth",
                "1e7",
            ],
            "--nic",
        ),
        (
            ["simulate", *SMALL, "--set", "cluster.intra_node_bandwidth_scale=1e300"],
            "less than or equal",
        ),
    ],
)
def test_bandwidth_what_ifs_are_bounded(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An intra-node scale of 1e300 made max-flow capacities infinite (NetworkXUnbounded)."""
    assert needle in one_line_error(args, capsys)


def test_a_custom_link_of_1e300_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A custom link of 1e300 GB/s priced forever; the file's bounds now refuse it."""
    tree = yaml.safe_load(CUSTOM.read_text())
    tree["links"][0]["bandwidth_GBps"] = 1e300
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(tree))
    err = one_line_error(["topology", "--machine", "custom", "--file", str(path)], capsys)
    assert "links.0.bandwidth_GBps: Input should be less than or equal to 1000000" in err


@pytest.mark.parametrize(
    "sets,needle",
    [
        (["--gpus", "8"], "cluster.gpus=8: the custom topology"),  # IndexError
        (["--set", "cluster.nodes=3"], "cluster.nodes=3: the custom topology"),
    ],
)
def test_a_custom_topology_run_larger_than_its_file(
    sets: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", "--machine", "custom", "--set", f"cluster.topology_file={CUSTOM}"]
    err = one_line_error([*args, "--model", "gpt-tiny", "--batch-tokens", "4096", *sets], capsys)
    assert needle in err and "has" in err


@pytest.mark.parametrize("entry", ["file:kineto", "dir:report.json", "file:notes.txt"])
def test_an_out_folder_holding_other_files_is_refused(
    entry: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file named `kineto` (FileExistsError) or a folder named `report.json`
    (IsADirectoryError) was a traceback after the whole simulation."""
    kind, name = entry.split(":")
    out = tmp_path / "out"
    out.mkdir()
    (out / name).mkdir() if kind == "dir" else (out / name).write_text("mine")
    err = one_line_error(["simulate", *SMALL, "--out", str(out)], capsys)
    assert "holds files axsim did not write" in err and name in err
    assert sorted(p.name for p in out.iterdir()) == [name]  # nothing touched


def test_a_folder_of_an_earlier_run_is_replaced_whole_with_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["simulate", *SMALL, "--out", str(out), "--no-pictures"]) == 0
    (out / "kineto" / "extra-from-an-old-run.json").write_text("{}")
    capsys.readouterr()
    assert "--overwrite" in one_line_error(["simulate", *SMALL, "--out", str(out)], capsys)
    args = ["simulate", *SMALL, "--set", "cluster.nic_bandwidth_GBps=5", "--out", str(out)]
    assert main([*args, "--overwrite", "--no-pictures"]) == 0
    assert not (out / "kineto" / "extra-from-an-old-run.json").exists()  # no mix
    assert "nic_bandwidth_GBps: 5" in (out / "config.resolved.yaml").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no staging left


# ------------------------------------------------------- silently wrong values
@pytest.mark.parametrize(
    "value,needle",
    [("1:30", "cluster.nic_bandwidth_GBps: Input should be a valid number"), ("1:30.5", "number")],
)
def test_yaml_sexagesimal_numbers_are_refused(
    value: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """YAML 1.1 read `1:30` as the base-60 integer 90 (a 90 GB/s NIC)."""
    args = ["simulate", *SMALL, "--set", f"cluster.nic_bandwidth_GBps={value}"]
    assert needle in one_line_error(args, capsys)


def test_yaml_leading_zeros_are_decimal() -> None:
    """YAML 1.1 read `010` as octal 8; user YAML reads it as 10 (YAML 1.2)."""
    from simulator.config import load_config

    assert load_config(None, ["cluster.machine=dgx-h100", "cluster.gpus=016"]).cluster.gpus == 16


# ------------------------------------------------------------------ runaways
def _alias_bomb(levels: int = 9) -> str:
    text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, levels + 1):
        text += f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n"
    return text


def test_a_sweep_spec_alias_bomb_is_refused_before_anything_is_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 1 KB spec of nested aliases stood for 10^10 values: 1.1-1.3 GB, no row."""
    spec = tmp_path / "bomb.yaml"
    spec.write_text(_alias_bomb() + "axes: {parallel.overlap: [*a9]}\n")
    err = one_line_error(["sweep", str(spec), "--out", str(tmp_path / "o")], capsys)
    assert "bomb.yaml" in err and "expands to more than 4,194,304 values" in err


def test_a_million_point_sweep_is_refused_from_its_formula(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = "[" + ", ".join(str(i + 1) for i in range(100)) + "]"
    spec = tmp_path / "big.yaml"
    spec.write_text(
        "set: {cluster.machine: dgx-h100, cluster.gpus: 16}\naxes:\n"
        f"  cluster.nic_bandwidth_GBps: {values}\n"
        f"  cluster.fabric_link_bandwidth_GBps: {values}\n"
        f"  cluster.intra_node_bandwidth_scale: {values}\n"
    )
    err = one_line_error(["sweep", str(spec), "--out", str(tmp_path / "o")], capsys)
    assert "100 x 100 x 100 = 1,000,000 points" in err and "65,536" in err


@pytest.mark.parametrize(
    "sets",
    [
        # pp 512 x 4,096 microbatches: past 147 CPU-s and 3.5 GB with no answer
        ["--gpus", "512", "--set", "model.layers=512", "--set", "parallel.pp=512",
         "--batch-tokens", str(4096 * 32)],
        # pp 8 x 64 microbatches x 512 virtual stages: past 15 minutes
        ["--gpus", "8", "--set", "model.layers=4096", "--set", "parallel.pp=8",
         "--set", "parallel.virtual_stages=512", "--batch-tokens", str(64 * 32)],
    ],
)  # fmt: skip
def test_pipeline_schedules_are_bounded_from_their_formula(
    sets: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", "--machine", "dgx-h100", "--model", "gpt-tiny", "--strategy", "megatron"]
    args += ["--set", "parallel.tp=1", "--set", "training.microbatch_sequences=1", *sets]
    err = one_line_error(args, capsys)
    assert "forward passes to schedule" in err and "parallel.pp=" in err


@pytest.mark.parametrize("command", ["figures", "validate"])
def test_worker_counts_are_capped(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`figures -j 100000` started over 3,000 processes in two minutes."""
    only = "nccl-busbw" if command == "figures" else "perlmutter-512-gpt-5b"
    args = [command, "-j", "100000", "--reduced", "--only", only]
    err = one_line_error(args, capsys)
    assert "--jobs 100000: more than 8x the" in err


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.yaml"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("source", ["fifo", "/dev/zero"])
@pytest.mark.parametrize(
    "make_args,needle",
    [
        (lambda p, out: ["simulate", str(p)], "cannot read the config file"),
        (lambda p, out: ["simulate", *SMALL, "--calibration", str(p)], "calibration file"),
        (
            lambda p, out: ["topology", "--machine", "custom", "--file", str(p)],
            "cannot read custom topology",
        ),
        (lambda p, out: ["sweep", str(p)], "cannot read"),
        (lambda p, out: ["calibrate", str(p), "-o", str(out)], "cannot read"),
    ],
)
def test_inputs_that_never_end_are_refused(
    source: str,
    make_args: object,
    needle: str,
    fifo: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A FIFO nobody writes blocked `open` forever; /dev/zero never ends."""
    path = fifo if source == "fifo" else Path(source)
    out = fifo.parent / "never.yaml"  # what calibrate would write: never, the input is refused
    err = one_line_error(make_args(path, out), capsys)  # type: ignore[operator]
    assert needle in err and "not a regular file" in err


def test_a_gzip_bomb_trace_stops_at_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace decompressing without end is read to MAX_TRACE_CHARS, then refused (the
    bound is lowered here: the real 8 GiB bomb takes minutes to read)."""
    from validation.trace import reader

    monkeypatch.setattr(reader, "MAX_TRACE_CHARS", 4 << 20)
    traces = tmp_path / "t"
    traces.mkdir()
    with gzip.open(traces / "rank0.json.gz", "wt") as fh:
        fh.write('{"traceEvents": [' + " " * (16 << 20) + "]}")
    err = one_line_error(["calibrate", str(traces), "-o", str(tmp_path / "c.yaml")], capsys)
    assert "rank0.json.gz" in err and "gzip bomb" in err
    monkeypatch.setattr(reader, "MAX_VALUE_CHARS", 1 << 20)
    with gzip.open(traces / "rank0.json.gz", "wt") as fh:
        fh.write('{"traceEvents": [{"name": "' + "x" * (4 << 20) + '"}]}')
    err = one_line_error(["calibrate", str(traces), "-o", str(tmp_path / "c.yaml")], capsys)
    assert "one JSON value is larger than 1 MiB" in err


# ------------------------------------------------------------- dask
_SILENT = textwrap.dedent(
    """
    import socket, sys, time
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
    print(s.getsockname()[1], flush=True)
    kept = []
    while True:
        kept.append(s.accept()[0])
    """
)


def test_a_dask_address_that_is_no_scheduler_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A scheduler that accepts and stays silent hung the sweep past --dask-timeout;
    tls:// and ucx:// were TypeError tracebacks inside distributed."""
    pytest.importorskip("distributed")
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "set: {cluster.machine: dgx-h100, cluster.gpus: 16, model.name: gpt-tiny}\n"
        "axes: {cluster.nic_bandwidth_GBps: [12.5, 25]}\n"
    )
    base = ["sweep", str(spec), "--out", str(tmp_path / "o"), "--no-progress"]
    for scheme in ("tls", "ucx", "http"):
        err = one_line_error([*base, "--dask-scheduler", f"{scheme}://127.0.0.1:1"], capsys)
        assert "--dask-scheduler" in err
    server = subprocess.Popen([sys.executable, "-c", _SILENT], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = server.stdout.readline().strip()
        args = [*base, "--dask-scheduler", f"tcp://127.0.0.1:{port}", "--dask-timeout", "1"]
        assert "nothing answered as a Dask scheduler within 1 s" in one_line_error(args, capsys)
    finally:
        server.kill()
        server.wait()


# ------------------------------------------------------------ markup and codes
def test_names_from_files_are_printed_as_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A topology named "[/]" crashed rich's markup (MarkupError); ESC sequences in names
    reached the terminal raw."""
    tree = yaml.safe_load(CUSTOM.read_text())
    tree["name"] = "[/]"
    tree["description"] = "[bold]x\x1b[31mred\x07"
    old = tree["devices"][0]["name"]
    tree["devices"][0]["name"] = new = "a.gpu0[/]\x1b[2J"
    for link in tree["links"]:
        for end in ("src", "dst"):
            link[end] = new if link[end] == old else link[end]
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(tree, allow_unicode=True))
    for args in (
        ["topology", "--machine", "custom", "--file", str(path)],
        ["collective", "--machine", "custom", "--file", str(path), "--group", "4", "--bytes", "1M"],
        ["simulate", "--machine", "custom", "--set", f"cluster.topology_file={path}",
         "--model", "gpt-tiny", "--batch-tokens", "4096"],
    ):  # fmt: skip
        assert main(args) == 0, args
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x07" not in out
        assert "\\x1b" in out or "[/]" in out
