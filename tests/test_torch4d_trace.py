"""`axsim trace-torch` / run_trace: Kineto traces per rank, run.json, and CLI errors."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from simulator.cli import main

pytestmark = pytest.mark.torch


def _load(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as f:
        return json.load(f)  # type: ignore[no-any-return]


def _collectives(trace: dict[str, Any]) -> list[tuple[str, str]]:
    """c10d ops (name, input shapes) of the first profiled step, in issue order."""
    events = trace["traceEvents"]
    step = min(
        (e for e in events if e.get("name", "").startswith("ProfilerStep#")), key=lambda e: e["ts"]
    )
    ops = [
        e
        for e in events
        if e.get("cat") == "cpu_op"
        and e["name"].startswith("c10d::")
        and step["ts"] <= e["ts"] <= step["ts"] + step["dur"]
    ]
    return [
        (e["name"], json.dumps(e["args"]["Input Dims"])) for e in sorted(ops, key=lambda e: e["ts"])
    ]


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("torch")
    from validation.torch4d import Grid, run_trace

    impls = ["axsim"]
    try:
        import axonn.intra_layer  # noqa: F401

        impls.append("axonn")
    except ImportError:
        pass
    out = {}
    for impl in impls:
        folder = tmp_path_factory.mktemp(impl)
        paths = run_trace(
            Grid(1, 1, 2, 1),
            "tiny",
            steps=2,
            out_dir=folder,
            overlap="all",
            impl=impl,
            layers=1,
            warmup=0,
            timing_steps=1,
            checkpoint=True,
        )
        assert paths == [folder / "rank0.trace.json.gz", folder / "rank1.trace.json.gz"]
        out[impl] = folder
    return out


def test_traces_have_steps_shapes_and_gloo_collectives(traced: dict[str, Path]) -> None:
    for folder in traced.values():
        for rank in (0, 1):
            trace = _load(folder / f"rank{rank}.trace.json.gz")
            events = trace["traceEvents"]
            assert trace["distributedInfo"]["rank"] == rank
            steps = [e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")]
            assert len(steps) == 2
            gloo = Counter(e["name"] for e in events if e.get("name", "").startswith("gloo:"))
            assert gloo["gloo:all_gather"] > 0 and gloo["gloo:all_reduce"] > 0
            ops = Counter(name for name, _ in _collectives(trace))
            # Z = 2: AG fwd (prefetched), AG bwd, RS per linear; 1 layer = 4 linears, recompute
            assert ops["c10d::_reduce_scatter_base_"] == 4
            assert ops["c10d::_allgather_base_"] == 8  # OAG fwd + recompute
            assert ops["c10d::allgather_"] == 4  # backward re-gather
            assert any(
                "Input Dims" in e.get("args", {}) for e in events if e.get("cat") == "cpu_op"
            )


def test_both_implementations_issue_the_same_collectives(traced: dict[str, Path]) -> None:
    if "axonn" not in traced:
        pytest.skip("axonn not installed")
    ours = _collectives(_load(traced["axsim"] / "rank0.trace.json.gz"))
    theirs = _collectives(_load(traced["axonn"] / "rank0.trace.json.gz"))
    assert ours == theirs


def test_run_json_describes_the_run(traced: dict[str, Path]) -> None:
    for impl, folder in traced.items():
        run = json.loads((folder / "run.json").read_text())
        assert run["config"]["grid"] == {"x": 1, "y": 1, "z": 2, "data": 1}
        assert run["config"]["impl"] == impl and run["config"]["dims"]["layers"] == 1
        assert run["config"]["overlap"] == {"oar": True, "ors": True, "oag": True}
        assert run["world_size"] == 2 and run["backend"] == "gloo"
        assert run["groups"]["Z"] == [[0, 1]]
        assert run["wall_s_per_step"] > 0 and len(run["step_wall_s"]) == 4
        assert run["torch_version"].startswith("2.")
        assert (impl == "axonn") == (run["axonn_version"] is not None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--grid", "2,1,1,1", "--world-size", "4"], "world size"),
        (["--grid", "2,x,1,1"], "four integers"),
        (["--grid", "2,1,1,1", "--model", "gpt-7"], "unknown model"),
        (["--grid", "2,1,1,1", "--model", "gpt-80b"], "at most"),
        (["--grid", "1,8,1,1"], "heads"),
        (["--grid", "2,1,1,1", "--overlap", "fast"], "unknown flag"),
        (["--grid", "2,1,1,1", "--impl", "megatron"], "megatron"),
    ],
)
def test_cli_bad_input(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["trace-torch", "--out", str(tmp_path / "t"), *args])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("axsim: error:") and message in err
