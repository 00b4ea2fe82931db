"""Faults during a run: what is left is complete or absent, never a mix (issue 33).

`simulate --out`, `figures`, `calibrate` and `sweep` are killed (SIGINT, SIGTERM, SIGKILL)
at points spread from start-up through writing, and run on a full disk (RLIMIT_FSIZE,
with SIGXFSZ ignored so a write fails with EFBIG as on a full file system). Afterwards
the output is the previous result, the complete new one, or nothing. Also: workers die
with their sweep, a killed worker is one line, a second sweep on a folder is refused, an
input measurement is never overwritten, and standard output that is closed or full is
one error line, not exit 0 or a traceback.

The kill points are drawn once from a seeded generator; what is asserted holds wherever a
kill lands, so the tests are deterministic in their outcome (no timed assertion).
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.outputs.staging import MARKER
from tests import calibrate_synth as synth
from tests.cli_helpers import one_line_error

ROOT = Path(__file__).resolve().parents[1]
# a run whose writing takes a while: 64 ranks' Kineto traces (about 2 s of its 4.5 s)
WRITE_HEAVY = ["simulate", "--machine", "dgx-h100", "--gpus", "64", "--model", "gpt-tiny",
               "--batch-tokens", "65536", "--engine", "full", "--trace-ranks", "all",
               "--no-pictures", "--no-progress"]  # fmt: skip
SMALL = ["--machine", "dgx-h100", "--gpus", "16", "--model", "gpt-tiny", "--batch-tokens", "4096"]
_RNG = random.Random(33)
# one point drawn in each phase of WRITE_HEAVY: start-up, simulation, writing
KILL_POINTS = [round(_RNG.uniform(lo, hi), 2) for lo, hi in ((0.5, 1.5), (1.5, 3.0), (3.0, 5.0))]
SIGNALS = [signal.SIGINT, signal.SIGKILL, signal.SIGTERM]


def _axsim(args: list[str], **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "simulator", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        **kw,  # type: ignore[arg-type]
    )


def _kill_after(proc: subprocess.Popen[str], seconds: float, sig: int) -> str:
    """Send `sig` after `seconds` (unless it ended); its standard error."""
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(sig)
    return proc.communicate(timeout=600)[1]  # a guard against a hang, not a speed assertion


def _complete_simulate_output(out: Path) -> bool:
    """Every file of a finished `simulate --out` is there and whole."""
    import gzip

    names = {p.name for p in out.iterdir()}
    need = {MARKER, "report.json", "config.resolved.yaml", "timeline.csv", "links.csv",
            "rank_map.json", "trace.json.gz", "kineto"}  # fmt: skip
    assert need <= names, sorted(need - names)
    json.loads((out / "report.json").read_text())
    with gzip.open(out / "trace.json.gz", "rt") as fh:
        json.load(fh)
    ranks = json.loads((out / "rank_map.json").read_text())["written"]
    assert len(list((out / "kineto").iterdir())) == len(ranks)
    return True


def _no_staging_left(parent: Path) -> None:
    """Staging folders of processes that ended other than by SIGKILL are gone (a SIGKILLed
    one's is removed by the next run: tested below)."""
    assert not [p.name for p in parent.iterdir() if ".axsim-" in p.name]


@pytest.mark.parametrize("point,sig", list(zip(KILL_POINTS, SIGNALS, strict=True)))
def test_a_killed_simulate_leaves_the_previous_output_or_the_new_one(
    point: float, sig: int, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert main([*WRITE_HEAVY[:-2], "--gpus", "16", "--out", str(out), "--no-pictures"]) == 0
    before = (out / "config.resolved.yaml").read_text()
    proc = _axsim([*WRITE_HEAVY, "--out", str(out), "--overwrite"])
    err = _kill_after(proc, point, sig)
    assert "Traceback" not in err
    if out.exists():
        assert _complete_simulate_output(out)
        after = (out / "config.resolved.yaml").read_text()
        assert after == before or "gpus: 64" in after  # the previous run, or the new one
    if sig != signal.SIGKILL:
        _no_staging_left(tmp_path)


def test_a_sigkilled_run_leaves_only_a_hidden_staging_folder_the_next_run_removes(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    proc = _axsim([*WRITE_HEAVY, "--out", str(out)])
    deadline = time.monotonic() + 600
    while not [p for p in tmp_path.iterdir() if ".axsim-partial-" in p.name]:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert not out.exists()
    assert main(["simulate", *SMALL, "--out", str(out), "--no-pictures"]) == 0
    assert _complete_simulate_output(out)
    _no_staging_left(tmp_path)


def _limited(limit_bytes: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))


def test_a_full_disk_during_outputs_leaves_the_previous_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["simulate", *SMALL, "--out", str(out), "--no-pictures"]) == 0
    before = {p.name: p.stat().st_size for p in out.rglob("*")}
    proc = _axsim(
        [*WRITE_HEAVY, "--out", str(out), "--overwrite"], preexec_fn=lambda: _limited(1 << 16)
    )
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 2
    line = err.strip()
    assert line.startswith("axsim: error: --out") and "nothing was written" in line, err
    assert line.count("\n") == 0
    assert {p.name: p.stat().st_size for p in out.rglob("*")} == before
    _no_staging_left(tmp_path)


def test_a_failed_write_in_process_is_one_line_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same with the write failure injected where the links table is written."""
    import errno

    from simulator.outputs import files

    def full(*args: object, **kwargs: object) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device", "links.csv")

    monkeypatch.setattr(files, "write_links_csv", full)
    out = tmp_path / "out"
    err = one_line_error(["simulate", *SMALL, "--out", str(out), "--no-pictures"], capsys)
    assert "No space left on device" in err and "nothing was written" in err
    assert not out.exists()
    _no_staging_left(tmp_path)


def test_a_killed_figures_run_leaves_complete_figures_or_none(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "figs"
    for point, sig in zip(KILL_POINTS[1:], (signal.SIGTERM, signal.SIGINT), strict=True):
        proc = _axsim(["figures", "--reduced", "--only", "nccl-busbw", "-j", "1", "--out",
                       str(out), "--overwrite", "--no-progress"])  # fmt: skip
        assert "Traceback" not in _kill_after(proc, point, sig)
        if out.exists():
            summary = json.loads((out / "summary.json").read_text())
            for fig in summary["figures"]:
                assert all(Path(f).exists() for f in fig["files"]), fig
        _no_staging_left(tmp_path)


def test_calibrate_keeps_the_previous_file_on_a_full_disk(tmp_path: Path) -> None:
    traces = tmp_path / "t"
    synth.write_run(traces)
    cal = tmp_path / "cal.yaml"
    assert main(["calibrate", str(traces), "-o", str(cal)]) == 0
    before = cal.read_bytes()
    proc = _axsim(["calibrate", str(traces), "-o", str(cal), "--gpu", "h200"],
                  preexec_fn=lambda: _limited(256))  # fmt: skip
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 2 and "cannot write" in err, err
    assert cal.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".cal")] == []


def test_a_killed_calibrate_leaves_the_previous_file_or_the_new_one(tmp_path: Path) -> None:
    from simulator.cost.calibration import load_calibration

    traces = tmp_path / "t"
    synth.write_run(traces)
    cal = tmp_path / "cal.yaml"
    assert main(["calibrate", str(traces), "-o", str(cal)]) == 0
    before = cal.read_bytes()
    for point, sig in zip(KILL_POINTS[:2], (signal.SIGTERM, signal.SIGKILL), strict=True):
        proc = _axsim(["calibrate", str(traces), "-o", str(cal), "--gpu", "h200"])
        assert "Traceback" not in _kill_after(proc, point, sig)
        after = cal.read_bytes()
        assert after == before or "h200" in load_calibration(cal).gpus  # whole, old or new
        before = after


def test_calibrate_never_overwrites_an_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`calibrate d/ -o d/m.csv` and a hard link to an input replaced the measurement."""
    src = Path(__file__).parent / "data" / "vidur_network" / "h100_dgx__all_reduce.csv"
    d = tmp_path / "d"
    d.mkdir()
    shutil.copy(src, d / "h100_m.csv")
    original = (d / "h100_m.csv").read_bytes()
    err = one_line_error(["calibrate", str(d), "-o", str(d / "h100_m.csv")], capsys)
    assert "is the input" in err
    os.link(d / "h100_m.csv", tmp_path / "link.csv")
    err = one_line_error(["calibrate", str(d), "-o", str(tmp_path / "link.csv")], capsys)
    assert "is the input" in err
    assert (d / "h100_m.csv").read_bytes() == original


SWEEP = (
    "set: {cluster.machine: dgx-h100, cluster.gpus: 16, model.name: gpt-5b, "
    "training.batch_tokens: 131072}\naxes: {cluster.nic_bandwidth_GBps: [4, 5, 6, 7]}\n"
)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is dead, only not yet reaped
        return fh.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_jobs_sweep_leaves_no_workers_and_whole_rows(sig: int, tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SWEEP)
    out = tmp_path / "out"
    proc = _axsim(["sweep", str(spec), "--out", str(out), "-j", "2", "--no-progress"])
    deadline = time.monotonic() + 600
    while len(_children(proc.pid)) < 2:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    workers = _children(proc.pid)
    time.sleep(random.Random(sig).uniform(0.5, 3.0))
    proc.send_signal(sig)
    proc.communicate(timeout=600)
    deadline = time.monotonic() + 60
    while any(_alive(w) for w in workers):  # the kernel's parent-death signal is prompt
        assert time.monotonic() < deadline, [w for w in workers if _alive(w)]
        time.sleep(0.05)
    journal = out / "rows.jsonl"
    rows = journal.read_text().splitlines() if journal.exists() else []
    assert all(json.loads(r)["status"] == "ok" for r in rows)
    # the lock died with the process (a rerun resumes: tests/test_sweep.py)
    if out.exists():
        from simulator.sweep.store import sweep_lock

        with sweep_lock(out):
            pass


def test_a_killed_worker_is_one_line(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SWEEP)
    proc = _axsim(["sweep", str(spec), "--out", str(tmp_path / "o"), "-j", "2", "--no-progress"])
    deadline = time.monotonic() + 600
    while not _children(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(_children(proc.pid)[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 2, err
    assert err.strip().splitlines()[-1].startswith("axsim: error: a worker process of the sweep")
    assert "Traceback" not in err and "BrokenProcessPool" not in err


def test_two_sweeps_on_one_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Both computed everything; a `--retry-failed` rewriting a running sweep's journal
    dropped 8 of its 20 finished rows. The folder's lock refuses the second."""
    from simulator.sweep.store import sweep_lock

    spec = tmp_path / "s.yaml"
    spec.write_text(SWEEP)
    out = tmp_path / "out"
    out.mkdir()
    with sweep_lock(out):  # a sweep running on the folder
        for extra in ([], ["--retry-failed"]):
            err = one_line_error(["sweep", str(spec), "--out", str(out), *extra], capsys)
            assert f"another sweep (pid {os.getpid()}) is writing this folder" in err
    assert not (out / "rows.jsonl").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["presets"],
        ["topology", "--machine", "dgx-h100", "--nodes", "2", "--json"],
        ["simulate", *SMALL],
    ],
)
def test_standard_output_closed_or_full(args: list[str]) -> None:
    """A closed stdout exited 0 with no output; a full device was a traceback."""
    base = [sys.executable, "-m", "simulator", *args]
    with open("/dev/full", "w") as full:
        proc = subprocess.run(base, cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 2 and "No space left on device" in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1
    closed = subprocess.run(base, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: os.close(1))  # fmt: skip
    assert closed.returncode == 2 and "standard output" in closed.stderr, closed.stderr
