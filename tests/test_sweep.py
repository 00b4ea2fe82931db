"""`axsim sweep`: rows, resume after a kill, executors that agree, and bad input.

Points are GPT-tiny on 16 DGX H100 GPUs (each a fraction of a second), so the whole file
stays fast; the kill test runs the CLI in a subprocess and SIGKILLs it mid-sweep.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.cli import main
from simulator.sweep import (
    VOLATILE_COLUMNS,
    SweepError,
    check_key,
    parse_spec,
    points,
    read_journal,
    run_sweep,
)

ROOT = Path(__file__).resolve().parents[1]
BASE_SET = {
    "cluster.machine": "dgx-h100",
    "cluster.gpus": 16,
    "model.name": "gpt-tiny",
    "training.batch_tokens": 4096,
    "parallel.grid": {"x": 2, "y": 2, "z": 2, "data": 2},
}
SPEC = {
    "set": BASE_SET,
    "axes": {
        "cluster.nic_bandwidth_GBps": [12.5, 50],
        "parallel.overlap": [[], ["oar", "ors", "oag"]],
        "parallel.grid": [{"x": 2, "y": 2, "z": 2, "data": 2}, {"x": 3, "y": 1, "z": 1, "data": 1}],
    },
}


def stable(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Rows by hash without the columns that legitimately vary between runs."""
    return {
        r["config_hash"]: {k: v for k, v in r.items() if k not in VOLATILE_COLUMNS} for r in rows
    }


@pytest.fixture(scope="module")
def inline_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("inline")
    res = run_sweep(parse_spec(SPEC), out)
    assert (res.points, res.distinct, res.ran, res.failed) == (8, 8, 8, 4)
    return out


@pytest.fixture(scope="module")
def inline_rows(inline_dir: Path) -> list[dict[str, Any]]:
    return read_journal(inline_dir / "rows.jsonl")


def test_rows_have_axes_hash_status_and_flat_report(inline_rows: list[dict[str, Any]]) -> None:
    ok = [r for r in inline_rows if r["status"] == "ok"]
    bad = [r for r in inline_rows if r["status"] == "error"]
    assert len(ok) == 4 and len(bad) == 4
    for r in ok:
        assert r["error"] == "" and len(r["config_hash"]) == 16
        assert r["cluster.nic_bandwidth_GBps"] in (12.5, 50)
        assert r["parallel.overlap"] in ("[]", '["oar","ors","oag"]')  # lists as JSON
        assert r["iteration_time_s"] > 0 and "comm_time_by_group_s.x" in r
        assert "grid.z" in r and "busiest_links" not in r  # lists of the report dropped
    for r in bad:  # a failed point is a row with its error, not a crash
        assert "does not equal the 16 GPUs" in r["error"] and "iteration_time_s" not in r
    slow = {r["parallel.overlap"]: r for r in ok if r["cluster.nic_bandwidth_GBps"] == 12.5}
    assert slow["[]"]["iteration_time_s"] >= slow['["oar","ors","oag"]']["iteration_time_s"]


def test_csv_table_in_spec_order(inline_dir: Path, inline_rows: list[dict[str, Any]]) -> None:
    spec = parse_spec(SPEC)
    with (inline_dir / "rows.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [r["config_hash"] for r in table] == [p.config_hash for p in points(spec)]
    assert list(table[0])[:4] == ["config_hash", "status", "error", "cluster.nic_bandwidth_GBps"]
    assert stable(inline_rows).keys() == {r["config_hash"] for r in table}


def test_local_processes_and_dask_local_cluster_give_identical_rows(
    inline_rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    pytest.importorskip("distributed")
    spec = parse_spec(SPEC)
    run_sweep(spec, tmp_path / "procs", jobs=2)
    run_sweep(spec, tmp_path / "dask", dask_local=2, dask_processes=False)
    ref = stable(inline_rows)
    assert stable(read_journal(tmp_path / "procs" / "rows.jsonl")) == ref
    assert stable(read_journal(tmp_path / "dask" / "rows.jsonl")) == ref


def test_parquet_table(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    spec = parse_spec({"set": BASE_SET, "axes": {"cluster.nic_bandwidth_GBps": [25, 50]}})
    run_sweep(spec, tmp_path, fmt="parquet")
    table = pq.read_table(tmp_path / "rows.parquet").to_pylist()
    assert [r["cluster.nic_bandwidth_GBps"] for r in table] == [25, 50]
    assert all(r["status"] == "ok" for r in table)


def test_killed_sweep_loses_no_row_and_resumes_without_recomputing(tmp_path: Path) -> None:
    spec = {"set": BASE_SET, "axes": {"cluster.nic_bandwidth_GBps": [5, 10, 20, 40, 80, 160]}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    journal = out / "rows.jsonl"
    cmd = [sys.executable, "-m", "simulator", "sweep", "spec.yaml", "--out", "out"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.is_file() and len(journal.read_text().splitlines()) >= 2:
            break
        time.sleep(0.02)
    if proc.poll() is not None:  # ended before the kill: say why, not ProcessLookupError
        pytest.fail(f"the sweep ended before it could be killed: {proc.stderr.read()}")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = journal.read_bytes()
    kept = read_journal(journal)
    assert 2 <= len(kept) < 6 and all(r["status"] == "ok" for r in kept)  # killed mid-sweep
    again = subprocess.run(
        [*cmd, "--no-progress"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert f"{len(kept)} already done, {6 - len(kept)} run (0 failed)" in again.stderr
    after = read_journal(journal)
    assert journal.read_bytes().startswith(before)  # finished rows untouched
    assert len(after) == 6 and len({r["config_hash"] for r in after}) == 6  # none twice
    fresh = tmp_path / "fresh"
    run_sweep(parse_spec(spec), fresh)
    assert stable(after) == stable(read_journal(fresh / "rows.jsonl"))
    with (out / "rows.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 6


def test_torn_last_line_is_dropped_and_retry_failed(tmp_path: Path) -> None:
    spec = parse_spec({"set": BASE_SET, "axes": {"parallel.grid.x": [2, 3]}})
    run_sweep(spec, tmp_path)
    journal = tmp_path / "rows.jsonl"
    assert sorted(r["status"] for r in read_journal(journal)) == ["error", "ok"]
    with journal.open("a") as f:
        f.write('{"config_hash": "abc", "sta')  # a write cut short by a kill
    assert len(read_journal(journal)) == 2
    assert journal.read_text().endswith("}\n")
    res = run_sweep(spec, tmp_path)
    assert (res.already_done, res.ran) == (2, 0)
    res = run_sweep(spec, tmp_path, retry_failed=True)
    assert (res.already_done, res.ran, res.failed) == (1, 1, 1)


def test_axis_keys_linked_axes_and_conveniences() -> None:
    for key in ("parallel.tp", "parallel.grid.z", "cluster.stragglers", "engine.mode"):
        check_key(key)  # any strategy's parallel fields are known
    spec = parse_spec(
        {
            "set": BASE_SET,
            "axes": {
                "cluster.gpus,parallel.grid": [[8, {"x": 2, "y": 2, "z": 2, "data": 1}]],
                "cluster.stragglers": [1.5],
                "parallel.strategy": ["axonn", "fsdp"],
            },
        }
    )
    pts = points(spec)
    assert len(pts) == 2 and pts[0].error is None
    assert pts[0].data["cluster"]["stragglers"] == [{"rank": 0, "slowdown": 1.5}]
    # a new strategy resets its section, then the other axes apply: grid is not fsdp's
    assert pts[1].data["parallel"] == {
        "strategy": "fsdp",
        "grid": {"x": 2, "y": 2, "z": 2, "data": 1},
    }
    assert pts[1].error is not None and "parallel.grid: unknown field" in pts[1].error
    later = parse_spec(
        {"set": BASE_SET, "axes": {"parallel.tp": [2], "parallel.strategy": ["megatron"]}}
    )
    assert points(later)[0].data["parallel"] == {"strategy": "megatron", "tp": 2}  # reset first
    # the hash is of the resolved config: a default written out changes nothing
    explicit = parse_spec({"set": BASE_SET, "axes": {"engine.mode": ["auto"]}})
    implicit = parse_spec({"set": BASE_SET, "axes": {"engine.steady_state": [True]}})
    assert points(explicit)[0].config_hash == points(implicit)[0].config_hash


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"axes": {"cluster.nic_speed": [1, 2]}},
            "bad.yaml: axis 'cluster.nic_speed': unknown field 'nic_speed' in cluster",
        ),
        (
            {"axes": {"cluster.gpus": []}},
            "bad.yaml: axes.cluster.gpus: List should have at least 1",
        ),
        ({"axes": {}}, "bad.yaml: axes: Dictionary should have at least 1 item"),
        ({"set": {"model.name": "gpt-tiny"}}, "bad.yaml: axes: Field required"),
        ({"axes": {"gpus": [1]}}, "bad.yaml: axis 'gpus': name a section and a field"),
        (
            {"axes": {"cluster.gpus": 4}},
            "bad.yaml: axes.cluster.gpus: Input should be a valid list",
        ),
        ({"axes": {"cluster.gpus,model.name": [[8]]}}, "must list 2 values"),
        ({"base": 3, "axes": {"cluster.gpus": [8]}}, "bad.yaml: base: give 'default', a config"),
        ({"base": {"clustr": {}}, "axes": {"cluster.gpus": [8]}}, "bad.yaml: base: 'clustr'"),
        ({"set": [1], "axes": {"cluster.gpus": [8]}}, "bad.yaml: set: Input should be a valid"),
        ({"set": {"cluster.gpu_s": 8}, "axes": {"cluster.gpus": [8]}}, "bad.yaml: set: 'cluster"),
        ({"sets": {}, "axes": {"cluster.gpus": [8]}}, "bad.yaml: sets: unknown field"),
        (
            {"axes": {"cluster.gpus": [8], "cluster.gpus,model.name": [[8, "gpt-tiny"]]}},
            "bad.yaml: axes: a key appears on two axes",
        ),
    ],
)
def test_bad_specs_fail_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: dict[str, Any], message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["sweep", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("axsim: error:") and message in err and "\n" not in err


def test_unreachable_dask_scheduler(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("distributed")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"set": BASE_SET, "axes": {"engine.mode": ["auto"]}}))
    args = ["sweep", str(path), "--out", str(tmp_path / "o"), "--dask-timeout", "1"]
    assert main([*args, "--dask-scheduler", "tcp://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("axsim: error: --dask-scheduler tcp://127.0.0.1:9: cannot reach it")
    assert "\n" not in err


def test_missing_optional_dependencies_are_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails as if not installed
    spec = parse_spec({"set": BASE_SET, "axes": {"engine.mode": ["auto"]}})
    with pytest.raises(
        SweepError,
        match=r"dask is not installed \(in the axsim checkout: pip install -e '\.\[dask\]'\)",
    ):
        run_sweep(spec, tmp_path, dask_local=1)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(SweepError, match="--format parquet needs pyarrow"):
        run_sweep(spec, tmp_path, fmt="parquet")
    with pytest.raises(SweepError, match="not both"):
        run_sweep(spec, tmp_path, dask_local=1, dask_scheduler="tcp://x:1")


def test_spec_file_with_base_path(tmp_path: Path) -> None:
    cfg = {
        "cluster": {"machine": "dgx-h100", "gpus": 16},
        "model": {"name": "gpt-tiny"},
        "parallel": {"strategy": "axonn", "grid": {"x": 2, "y": 2, "z": 2, "data": 2}},
        "training": {"batch_tokens": 4096},
    }
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "s.yaml").write_text(
        yaml.safe_dump({"base": "cfg.yaml", "axes": {"engine.network": ["alpha-beta"]}})
    )
    assert (
        main(["sweep", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"), "--no-progress"])
        == 0
    )
    rows = [json.loads(line) for line in (tmp_path / "o" / "rows.jsonl").read_text().splitlines()]
    assert rows[0]["status"] == "ok" and rows[0]["network_model"] == "alpha-beta"


def test_ctrl_c_while_dask_workers_start_is_one_line(tmp_path: Path) -> None:
    """Ctrl-C reaches the whole foreground process group: before issue 34 each starting
    Dask worker printed a KeyboardInterrupt traceback and the half-built cluster another
    at exit (125 lines for 2 workers). Now the workers ignore it and the sweep takes it
    once the cluster is whole: one line, exit 130."""
    pytest.importorskip("distributed")
    spec = {"set": BASE_SET, "axes": {"cluster.nic_bandwidth_GBps": [5, 10, 20, 40]}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    cmd = [sys.executable, "-m", "simulator", "sweep", "spec.yaml", "--out", "out"]
    cmd += ["--dask-local", "1", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's job
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if children.is_file() and children.read_text().split():  # workers starting
            break
        time.sleep(0.01)
    if proc.poll() is not None:
        pytest.fail(f"the sweep ended before Ctrl-C: {proc.stderr.read()}")  # type: ignore[union-attr]
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err.strip() == "axsim: aborted", err
    assert len(read_journal(tmp_path / "out" / "rows.jsonl")) < 4  # stopped, rows kept
