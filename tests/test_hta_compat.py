"""`axsim simulate --out` writes per-rank Kineto traces that Holistic Trace Analysis reads
like real ones, and HTA's overlap and temporal breakdown equal axsim's own numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.api import simulate
from simulator.config import load_config
from simulator.export import write_outputs
from validation.hta_compat import KEYS, axsim_summary

OVERRIDES = [
    "cluster.machine=dgx-h100", "cluster.gpus=16", "model.name=gpt-tiny",
    "training.batch_tokens=262144", "parallel.grid={x: 2, y: 2, z: 2, data: 2}",
]  # fmt: skip


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:  # type: ignore[type-arg]
    result = simulate(load_config(None, OVERRIDES))
    out = tmp_path_factory.mktemp("sim")
    write_outputs(result, out, [0, 1, 2])
    return out, [result.engine.timeline.rank(r) for r in (0, 1, 2)]


def test_kineto_files_have_what_hta_needs(simulated: tuple[Path, list]) -> None:  # type: ignore[type-arg]
    out, timelines = simulated
    files = sorted((out / "kineto").glob("rank-*.json"))
    assert [f.name for f in files] == ["rank-0.json", "rank-1.json", "rank-2.json"]
    doc = json.loads(files[1].read_text())
    assert doc["distributedInfo"]["rank"] == 1 and doc["distributedInfo"]["world_size"] == 16
    assert doc["deviceProperties"][0]["name"] == "h100"
    events = doc["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    launches = {e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime"}
    assert kernels and all(k["args"]["correlation"] in launches for k in kernels)
    assert sum(1 for e in events if e.get("name") == "ProfilerStep#0") == 1
    assert len(kernels) == sum(1 for k in timelines[1].kind if k != "wait")
    assert any(k["name"].startswith("ncclDevKernel_") for k in kernels)
    assert json.loads((out / "trace.json").read_text())["traceEvents"]  # the Perfetto trace stays


def test_hta_agrees_with_axsim(simulated: tuple[Path, list]) -> None:  # type: ignore[type-arg]
    pytest.importorskip("hta")
    from validation.hta_compat import hta_summary

    out, timelines = simulated
    hta = hta_summary(out / "kineto")
    rounded = axsim_summary(timelines, hta_rounding=True)
    exact = axsim_summary(timelines)
    assert set(hta) == {0, 1, 2}
    for rank in hta:
        for key in KEYS:
            assert hta[rank][key] == pytest.approx(rounded[rank][key], abs=0.01), (rank, key)
        # HTA's whole-µs event times cost at most about 1 µs per kernel
        n = sum(1 for k in timelines[rank].kind if k != "wait")
        assert abs(hta[rank]["compute_time_us"] - exact[rank]["compute_time_us"]) <= n
        assert hta[rank]["kernel_time_us"] == pytest.approx(exact[rank]["kernel_time_us"], abs=2)
        assert 0 < hta[rank]["overlap_pctg"] < 100
