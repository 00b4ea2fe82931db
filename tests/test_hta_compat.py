"""`axsim simulate --out` writes per-rank Kineto traces that Holistic Trace Analysis reads
like real ones, and HTA's overlap and temporal breakdown equal axsim's own numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.api import simulate
from simulator.config import load_config
from simulator.outputs.files import write_outputs
from simulator.outputs.trace_io import read_trace_json
from validation.hta_compat import KEYS, axsim_summary

# a model wide enough that its collectives outlast HTA's 1%-of-iteration filter (with
# gpt-tiny's microsecond kernels the step is launch-bound and HTA's straggler metric
# finds no communication kernel to rank)
OVERRIDES = [
    "cluster.machine=dgx-h100", "cluster.gpus=16", "model.name=gpt-tiny",
    "model.hidden=1024", "model.heads=16", "training.batch_tokens=65536",
    "parallel.grid={x: 2, y: 2, z: 2, data: 2}",
]  # fmt: skip


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:  # type: ignore[type-arg]
    result = simulate(load_config(None, OVERRIDES))
    out = tmp_path_factory.mktemp("sim")
    write_outputs(result, out, [0, 1, 2], pictures=False)
    return out, [result.engine.timeline.rank(r) for r in (0, 1, 2)]


def test_kineto_files_have_what_hta_needs(simulated: tuple[Path, list]) -> None:  # type: ignore[type-arg]
    out, timelines = simulated
    files = sorted((out / "kineto").glob("rank-*.json.gz"))
    assert [f.name for f in files] == ["rank-0.json.gz", "rank-1.json.gz", "rank-2.json.gz"]
    doc = read_trace_json(files[1])
    assert doc["distributedInfo"]["rank"] == 1 and doc["distributedInfo"]["world_size"] == 16
    assert doc["deviceProperties"][0]["name"] == "h100"
    events = doc["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    launches = {e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime"}
    assert doc["distributedInfo"]["pg_config"][0]["pg_name"] == "0"
    assert kernels and all(k["args"]["correlation"] in launches for k in kernels)
    assert sum(1 for e in events if e.get("name") == "ProfilerStep#1") == 1
    assert len(kernels) == sum(1 for k in timelines[1].kind if k != "wait")
    assert any(k["name"].startswith("ncclDevKernel_") for k in kernels)
    assert read_trace_json(out / "trace.json.gz")["traceEvents"]  # the Perfetto trace stays


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


STRAGGLER = 12
# HTA's straggler metric (analyzers/straggler.py) keeps communication kernels longer than
# 1% of the iteration, picks the stream whose last such kernel varies most in duration
# across ranks and flags the rank that starts it last. The model must be compute-bound
# (at gpt-tiny's width the step is launch-bound: a slower GPU finishes its kernels before
# the host issues the next ones, so nothing straggles). On this 2x2x2x2 grid a 1.5x slower
# rank 2 or 12 is flagged itself, while for ranks 5 or 9 HTA flags their Z partner (1,
# 13), which waits on them in every Z collective and starts its last one as late.
STRAGGLING = ["cluster.machine=dgx-h100", "cluster.gpus=16", "model.name=gpt-tiny",
              "model.hidden=4096", "model.heads=32", "training.batch_tokens=65536",
              "parallel.grid={x: 2, y: 2, z: 2, data: 2}"]  # fmt: skip


@pytest.fixture(scope="module")
def straggling(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every rank of a full-mode run with one 50% slower GPU, as Kineto traces."""
    overrides = [*STRAGGLING, "engine.mode=full", "engine.virtual_microbatches=false",
                 f"cluster.stragglers=[{{rank: {STRAGGLER}, slowdown: 1.5}}]"]  # fmt: skip
    result = simulate(load_config(None, overrides))
    out = tmp_path_factory.mktemp("straggler")
    write_outputs(result, out, "all", pictures=False)
    return out / "kineto"


def test_every_hta_analysis_runs_on_simulated_traces(simulated: tuple[Path, list]) -> None:  # type: ignore[type-arg]
    pytest.importorskip("hta")
    from validation.hta_compat import run_every_analysis

    results = run_every_analysis(simulated[0] / "kineto", rank=1)
    failed = {k: v for k, v in results.items() if isinstance(v, Exception)}
    assert not failed, failed
    assert results["profiler_steps"] == [1]
    graph, ok = results["critical_path"]
    assert ok and graph.critical_path_edges_set  # a path was found
    idle = results["idle_time_breakdown"][0]
    assert set(idle["idle_category"]) >= {"host_wait", "kernel_wait", "other"}
    assert (idle.groupby("idle_category")["idle_time"].sum() > 0).sum() >= 2
    queue = results["queue_length_summary"]
    assert (queue[("queue_length", "min")] >= 0).all()  # no kernel runs before its launch


def test_hta_finds_the_injected_straggler(straggling: Path) -> None:
    pytest.importorskip("hta")
    from validation.hta_compat import potential_stragglers

    assert potential_stragglers(straggling, num_candidates=1) == [STRAGGLER]
