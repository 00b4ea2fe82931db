"""Uneven pipeline stages: Megatron's embedding/loss-as-a-layer rule, explicit layer lists,
their chunks, the schedule they produce (closed forms on two stages, a lower bound on any)
and the report's per-stage rows."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.api import simulate
from simulator.config import load_config
from simulator.outputs.render import stage_table
from tests.cli_helpers import one_line_error
from tests.strategy_helpers import SPEC, BlockOnlyKernels, hybrid, run
from workloads.errors import WorkloadError
from workloads.graph import executed_ops
from workloads.hybrid.params import MegatronParallel
from workloads.hybrid.setup import stage_chunks
from workloads.hybrid.stages import stage_layers_for
from workloads.models import model_preset
from workloads.ops import ComputeOp


def test_llama3_405b_drops_a_layer_from_the_first_and_last_stage() -> None:
    """126 layers + embedding + loss = 128 = 16 stages of 8 (Dubey et al. 2024, 3.3.2)."""
    spec = model_preset("llama3-405b")
    params = MegatronParallel(tp=8, pp=16, account_for_embedding=True, account_for_loss=True)
    assert stage_layers_for(spec, params, 16) == (7, *([8] * 14), 7)
    only_loss = MegatronParallel(pp=2, account_for_loss=True)
    assert stage_layers_for(replace(spec, layers=5), only_loss, 2) == (3, 2)
    assert stage_layers_for(spec, MegatronParallel(pp=16), 16) == ()  # even split asked for


@pytest.mark.parametrize(
    "params,message",
    [
        (MegatronParallel(pp=5, account_for_embedding=True), "does not divide"),
        (MegatronParallel(layers_per_stage=(3, 3)), "puts 6 layers"),
        (MegatronParallel(pp=4, account_for_embedding=True, account_for_loss=True), "without"),
    ],
)
def test_impossible_splits_name_the_field(params: MegatronParallel, message: str) -> None:
    spec = replace(SPEC, layers=2)
    with pytest.raises(WorkloadError, match=message):
        stage_layers_for(spec, params, params.pipeline_size or 1)


@pytest.mark.parametrize(
    "stages,v", [((2, 4, 4, 2), 2), ((1, 2, 3), 1), ((3, 3, 6), 3), ((2, 2, 2, 2), 2)]
)
def test_chunks_cover_every_layer_once_in_virtual_stage_order(
    stages: tuple[int, ...], v: int
) -> None:
    spec = replace(SPEC, layers=sum(stages))
    p = len(stages)
    setup, _ = hybrid(
        MegatronParallel(layers_per_stage=stages, virtual_stages=v), p, pp=p, sequences=p, spec=spec
    )
    by_virtual = sorted(
        (c.index * p + s, c) for s in range(p) for c in stage_chunks(spec, setup, s)
    )
    bounds = [(c.start, c.stop) for _, c in by_virtual]
    assert bounds[0][0] == 0 and bounds[-1][1] == spec.layers
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    for s in range(p):
        assert sum(c.stop - c.start for c in stage_chunks(spec, setup, s)) == stages[s]
    assert by_virtual[0][1].first and by_virtual[-1][1].last


def test_an_even_list_is_the_even_split() -> None:
    spec = replace(SPEC, layers=8)
    _, even = hybrid(MegatronParallel(pp=4), 4, pp=4, sequences=8, spec=spec)
    _, listed = hybrid(
        MegatronParallel(layers_per_stage=(2, 2, 2, 2)), 4, pp=4, sequences=8, spec=spec
    )
    assert [p.ops for p in even.programs] == [p.ops for p in listed.programs]


def _stage_times(stages: tuple[int, ...], m: int) -> tuple[float, list[tuple[float, float]]]:
    """Iteration time with only block kernels priced and an infinitely fast network, and
    the (forward, backward) time of every stage."""
    spec = replace(SPEC, layers=sum(stages))
    p = len(stages)
    _, g = hybrid(MegatronParallel(layers_per_stage=stages), p, pp=p, sequences=m, spec=spec)
    res, _ = run(
        g, mode="full", network="alpha-beta", bandwidth=1e30, latency=0.0,
        kernels=BlockOnlyKernels(),
    )  # fmt: skip
    k = BlockOnlyKernels()
    run_ops = executed_ops(g.programs[0])  # the text may hold a run of passes once
    ops = [o for o in run_ops if isinstance(o, ComputeOp) and o.name.startswith("L0.")]
    f = sum(k.duration_s(o) for o in ops if o.phase == "fwd") / m
    b = sum(k.duration_s(o) for o in ops if o.phase != "fwd") / m  # recompute + backward
    return res.iteration_time_s, [(n * f, n * b) for n in stages]


@pytest.mark.parametrize("stages", [(1, 3), (3, 1), (2, 1), (1, 1), (4, 1), (2, 5)])
@pytest.mark.parametrize("m", [1, 2, 5])
def test_two_uneven_stages_closed_form(stages: tuple[int, int], m: int) -> None:
    """1F1B on two stages: the second stage runs back to back once filled
    (f0 + m (f1 + b1) + b0), or the first does, idling once while the first microbatch
    goes through the second stage (m (f0 + b0) + max(0, f1 + b1 - f0))."""
    t, ((f0, b0), (f1, b1)) = _stage_times(stages, m)
    second_bound = f0 + m * (f1 + b1) + b0
    first_bound = m * (f0 + b0) + max(0.0, f1 + b1 - f0)
    assert t == pytest.approx(max(second_bound, first_bound), rel=1e-9)


@settings(max_examples=12, deadline=None)
@given(
    stages=st.lists(st.integers(1, 3), min_size=2, max_size=4).map(tuple),
    m=st.integers(1, 6),
)
def test_the_slowest_stage_bounds_the_iteration(stages: tuple[int, ...], m: int) -> None:
    """No schedule beats the busiest stage: it cannot start before the stages in front of
    it have run the first forward, runs all its m passes, and its last backward must
    still go back through them."""
    t, times = _stage_times(stages, m)
    k = max(range(len(times)), key=lambda s: sum(times[s]))
    before = sum(f + b for f, b in times[:k])
    assert t >= before + m * sum(times[k]) - 1e-12


def _small_uneven(tmp_path, extra: str = "") -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / "uneven.yaml"
    path.write_text(
        "cluster: {machine: dgx-h100, gpus: 8}\n"
        "model: {name: llama3-8b, layers: 6, seq_len: 1024}\n"
        "parallel: {strategy: megatron, tp: 2, pp: 4, account_for_embedding: true, "
        f"account_for_loss: true{extra}}}\n"
        "training: {batch_tokens: 8192, microbatch_sequences: 1}\n"
    )
    return str(path)


def test_report_shows_every_stage(tmp_path) -> None:  # type: ignore[no-untyped-def]
    res = simulate(load_config(_small_uneven(tmp_path)))
    rows = res.report.stages
    assert [r.layers for r in rows] == [1, 2, 2, 1]
    assert [(r.embedding, r.head) for r in rows] == [(True, False), (False, False),
                                                    (False, False), (False, True)]  # fmt: skip
    assert max(r.load for r in rows) == 1.0
    assert rows[1].compute_s == pytest.approx(rows[2].compute_s)  # identical middle stages
    t = res.report.iteration_time_s
    for r in rows:
        assert 0 <= r.pipeline_wait_s <= t and r.compute_s + r.exposed_comm_s <= t * (1 + 1e-9)
        assert r.memory_bytes <= res.report.memory_per_gpu_bytes
    assert max(r.memory_bytes for r in rows) == res.report.memory_per_gpu_bytes
    assert res.report.parameters["layers_per_stage"] == [1, 2, 2, 1]
    assert stage_table(res.report).row_count == 4
    assert res.report.to_json()["stages"][0]["layers"] == 1  # type: ignore[index]


def test_bad_stage_lists_are_one_line_errors(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    cfg = _small_uneven(tmp_path)
    cases = [
        (["--set", "parallel.layers_per_stage=[2, 2, 2]", "--set",
          "parallel.account_for_embedding=false", "--set", "parallel.account_for_loss=false"],
         "lists 3 stages but parallel.pp=4"),
        (["--set", "parallel.pp=null", "--set", "parallel.layers_per_stage=[2, 2, 1, 2]",
          "--set", "parallel.account_for_embedding=false", "--set",
          "parallel.account_for_loss=false"], "puts 7 layers"),
        (["--set", "parallel.layers_per_stage=[2, 2, 1, 1]"], "cannot be combined"),
        (["--set", "parallel.pp=null", "--set", "parallel.layers_per_stage=[6, 0]",
          "--set", "parallel.account_for_embedding=false", "--set",
          "parallel.account_for_loss=false"], "at least one layer"),
        (["--set", "model.layers=7"], "does not divide"),
        (["--set", "parallel.virtual_stages=2", "--set", "training.batch_tokens=16384"],
         "a pipeline stage of 1 layers does not split into 2 chunks"),
    ]  # fmt: skip
    for args, message in cases:
        err = one_line_error(["simulate", cfg, *args], capsys)
        assert message in err, err
