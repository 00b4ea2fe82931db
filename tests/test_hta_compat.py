"""`axsim simulate --out` writes per-rank Kineto traces that Holistic Trace Analysis reads
like real ones: HTA's overlap and temporal breakdown equal axsim's own numbers, every
analysis runs, and its critical path splits the step as the report does (stragglers:
tests/test_hta_stragglers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.api import simulate
from simulator.config import load_config
from simulator.outputs.files import write_outputs
from simulator.outputs.trace_io import read_trace_json
from validation.references.hta_summary import (
    KEYS,
    axsim_summary,
    critical_path_shares,
    report_shares,
    written_rank,
)

# a host-bound step (the host dispatches for ~97% of it, the GPU mostly waits for
# launches) of a 2x2x2x2 grid; compute-bound ones are below
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
    from validation.references.hta_summary import hta_summary

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


def test_every_hta_analysis_runs_on_simulated_traces(simulated: tuple[Path, list]) -> None:  # type: ignore[type-arg]
    pytest.importorskip("hta")
    from validation.references.hta_summary import run_every_analysis

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


def test_critical_path_of_a_host_bound_step_is_the_host(simulated: tuple[Path, list]) -> None:  # type: ignore[type-arg]
    """At gpt-tiny's width the host dispatches for ~97% of the step (8 µs per kernel, 20 µs
    per collective) and the GPU waits for it: HTA's path is the CPU's dispatch share."""
    pytest.importorskip("hta")
    out, timelines = simulated
    host = float(timelines[0].issue_s[-1]) / float(timelines[0].end_s.max())
    assert host > 0.8  # the premise: a host-bound step
    cp = critical_path_shares(out / "kineto", 0)
    assert abs(cp["cpu"] + cp["launch"] - 100 * host) <= 10, (cp, host)


# compute-bound at this width: GEMMs of 4,096 columns, collectives of megabytes
COMPUTE_BOUND = ["cluster.machine=dgx-h100", "cluster.gpus=16", "model.name=gpt-tiny",
                 "model.hidden=4096", "model.heads=32", "training.batch_tokens=65536",
                 "engine.virtual_microbatches=false"]  # fmt: skip


@pytest.mark.parametrize(
    "grid", ["{x: 2, y: 2, z: 2, data: 2}", "{x: 1, y: 1, z: 16, data: 1}"], ids=["2x2x2x2", "z16"]
)
def test_critical_path_splits_the_step_as_the_report_does(grid: str, tmp_path: Path) -> None:
    """HTA's critical path through the default output (symmetric mode: one file for the one
    rank class) covers the step, and its compute and communication shares are the
    report's within 10 points (they differ by design: the path charges a collective that
    gates compute from its start, the report only its exposed part)."""
    pytest.importorskip("hta")
    from validation.references.hta_summary import potential_stragglers

    result = simulate(load_config(None, [*COMPUTE_BOUND, f"parallel.grid={grid}"]))
    write_outputs(result, tmp_path, pictures=False)
    rank = written_rank(tmp_path, result.report.critical_rank)
    cp = critical_path_shares(tmp_path / "kineto", rank)
    report = report_shares(result.report)
    assert cp["length_us"] >= 0.95 * result.report.iteration_time_s * 1e6
    assert abs(cp["compute"] - report["compute"]) <= 10, (cp, report)
    assert abs(cp["communication"] - report["communication"]) <= 10, (cp, report)
    assert cp["launch"] + cp["cpu"] < 5  # not the launch-delay edge of issue 34
    # one file standing for all 16 ranks: the straggler analysis still answers
    assert potential_stragglers(tmp_path / "kineto") == [rank]
