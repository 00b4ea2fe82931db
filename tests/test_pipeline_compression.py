"""Pipelines at the cost of their distinct work: a stage's program holds each distinct
warm-up, steady and cool-down pass once and stands for the copies (Segment.repeat); the
engine proves the copies periodic and skips them. The result must equal simulating the
expanded programs op by op: iteration time, per-group and per-kind times, host-bound
time, per-stage rows and per-link bytes (1F1B, interleaved, uneven stages)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

from simulator.api import Result, simulate
from simulator.config import load_config
from workloads.graph import Program, Segment, executed_ops
from workloads.ops import Op, WaitOp

# DGX H100 (8 GPUs): a 6-layer Llama-3 8B at 1,024 tokens, TP 2 x PP 4, 16 microbatches of
# one sequence (32 for the interleaved schedule, whose steady unit is p·v = 8 pairs): long
# enough for steady units to repeat, small enough for seconds.
BASE = (
    "cluster: {machine: dgx-h100, gpus: 8}\n"
    "model: {name: llama3-8b, layers: LAYERS, seq_len: 1024}\n"
    "parallel: {strategy: megatron, tp: 2, pp: 4PARALLEL}\n"
    "training: {batch_tokens: TOKENS, microbatch_sequences: 1}\n"
)
CASES = {
    "1f1b": (8, "", 16384),
    "interleaved": (8, ", virtual_stages: 2", 32768),
    "uneven": (6, ", account_for_embedding: true, account_for_loss: true", 16384),
}


def _run(tmp_path: Path, case: str, *engine: str) -> Result:
    layers, parallel, tokens = CASES[case]
    text = BASE.replace("LAYERS", str(layers)).replace("PARALLEL", parallel)
    text = text.replace("TOKENS", str(tokens))
    if engine:
        text += "engine: {" + ", ".join(engine) + "}\n"
    path = tmp_path / f"{case}-{len(engine)}.yaml"
    path.write_text(text)
    return simulate(load_config(str(path)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_compressed_pipeline_equals_every_op_simulated(tmp_path: Path, case: str) -> None:
    fast = _run(tmp_path, case)
    slow = _run(tmp_path, case, "virtual_microbatches: false", "steady_state: false")
    programs = fast.plan.graph.programs
    assert any(p.compressed for p in programs), "the case must exercise compression"
    assert not any(p.compressed for p in slow.plan.graph.programs)
    # the texts stand for exactly the expanded programs' ops, stage by stage
    for a, b in zip(programs, slow.plan.graph.programs, strict=True):
        assert [o.name for o in executed_ops(a)] == [o.name for o in b.ops]
    assert fast.engine.ops_processed < slow.engine.ops_processed
    rf, rs = fast.report, slow.report
    assert rf.ops_represented == rs.ops_represented
    assert rf.iteration_time_s == rs.iteration_time_s
    assert rf.compute_time_s == pytest.approx(rs.compute_time_s, rel=1e-9)
    assert rf.exposed_comm_time_s == pytest.approx(rs.exposed_comm_time_s, rel=1e-9, abs=1e-12)
    assert rf.host_bound_s == pytest.approx(rs.host_bound_s, rel=1e-9, abs=1e-12)
    for name in ("comm_total_by_group_s", "comm_time_by_group_s", "compute_by_kind_s"):
        got, want = getattr(rf, name), getattr(rs, name)
        assert got.keys() == want.keys(), name
        for k, v in want.items():
            assert got[k] == pytest.approx(v, rel=1e-9, abs=1e-12), (name, k)
    for a, b in zip(rf.stages, rs.stages, strict=True):
        assert a.compute_s == pytest.approx(b.compute_s, rel=1e-9)
        assert a.exposed_comm_s == pytest.approx(b.exposed_comm_s, rel=1e-9, abs=1e-12)
    assert fast.engine.link_bytes == pytest.approx(slow.engine.link_bytes, rel=1e-12)


def _expanded_text(program: Program) -> list[Op]:
    """The ops a compressed text stands for, dependencies included: copy j of a repeated
    segment [s, s + L) shifts what lies inside it and in the copy before it by j·L; later
    ops that name the segment's text depend on its last copy."""
    where: list[int] = []  # text index -> index of its (last) copy in the expansion
    out: list[Op] = []
    repeated = {s.start: s for s in program.segments if s.repeat > 1}
    ops = program.ops
    i = 0
    while i < len(ops):
        seg = repeated.get(i)
        if seg is None:
            out.append(_moved(ops[i], where.__getitem__))
            where.append(len(out) - 1)
            i += 1
            continue
        for j in range(seg.repeat):
            dep = partial(_copy_dep, seg, j, len(out), where)
            out.extend(_moved(ops[x], dep) for x in range(seg.start, seg.stop))
        length = seg.stop - seg.start
        where.extend(range(len(out) - length, len(out)))
        i = seg.stop
    return out


def _copy_dep(seg: Segment, j: int, base: int, where: list[int], d: int) -> int:
    """Where dependency d (text index) of copy j of `seg`, expanded at `base`, lands."""
    length = seg.stop - seg.start
    if d >= seg.start:
        return base + d - seg.start
    if j and d >= seg.start - length:
        return base - length + d - (seg.start - length)
    return where[d]


def _moved(op: Op, dep: Callable[[int], int]) -> Op:
    if isinstance(op, WaitOp):
        return replace(op, target=dep(op.target), deps=tuple(dep(d) for d in op.deps))
    return replace(op, deps=tuple(dep(d) for d in op.deps))


# Emitters with more state across passes than CASES: sequence parallelism with the
# distributed optimizer (on 16 GPUs: data parallel 2) and FSDP with pipelining (sharded
# gathers and prefetches), interleaved.
BUILD_ONLY = {
    "sp-distopt": (
        "cluster: {machine: dgx-h100, gpus: 16}\n"
        "model: {name: llama3-8b, layers: 8, seq_len: 1024}\n"
        "parallel: {strategy: megatron, tp: 2, pp: 4, virtual_stages: 2,"
        " sequence_parallel: true, distributed_optimizer: true}\n"
        "training: {batch_tokens: 65536, microbatch_sequences: 1}\n"
    ),
    "fsdp-pp": (
        "cluster: {machine: dgx-h100, gpus: 16}\n"
        "model: {name: llama3-8b, layers: 8, seq_len: 1024}\n"
        "parallel: {strategy: fsdp-pp, pp: 4, virtual_stages: 2}\n"
        "training: {batch_tokens: 65536, microbatch_sequences: 1}\n"
    ),
}


def _programs(tmp_path: Path, text: str, expanded: bool) -> tuple[Program, ...]:
    from simulator.build import build_topology
    from simulator.workload import build_plan
    from topologies.hardware import gpu_spec

    if expanded:
        text += "engine: {virtual_microbatches: false, steady_state: false}\n"
    path = tmp_path / f"build-{expanded}.yaml"
    path.write_text(text)
    config = load_config(str(path))
    topology = build_topology(config.cluster)
    gpu = gpu_spec(config.cluster.gpu or topology.gpu_type)
    return build_plan(config, topology, gpu).graph.programs


def _case_text(case: str) -> str:
    if case in BUILD_ONLY:
        return BUILD_ONLY[case]
    layers, parallel, tokens = CASES[case]
    text = BASE.replace("LAYERS", str(layers)).replace("PARALLEL", parallel)
    return text.replace("TOKENS", str(tokens))


@pytest.mark.parametrize("case", sorted(CASES) + sorted(BUILD_ONLY))
def test_compressed_text_expands_to_the_emitted_program(tmp_path: Path, case: str) -> None:
    """Build-level exactness: a compressed stage text (a repeated item marked, not emitted
    again) stands for exactly the ops, dependencies included, that emitting every pass
    gives."""
    text = _case_text(case)
    fast = _programs(tmp_path, text, expanded=False)
    slow = _programs(tmp_path, text, expanded=True)
    for a, b in zip(fast, slow, strict=True):
        assert a.compressed and not b.compressed
        assert _expanded_text(a) == list(b.ops)


@pytest.mark.parametrize("expanded", [False, True])
@pytest.mark.parametrize("case", sorted(CASES) + sorted(BUILD_ONLY))
def test_pass_templates_copy_exactly_what_emitting_gives(
    tmp_path: Path, case: str, expanded: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copied passes (workloads/hybrid/templates.py) equal emitted ones, op by op, with
    their segments."""
    from workloads.hybrid import templates

    text = _case_text(case)
    copies: list[object] = []
    copy = templates.PassTemplates._copy
    monkeypatch.setattr(
        templates.PassTemplates, "_copy", lambda self, t: (copies.append(t), copy(self, t))
    )
    fast = _programs(tmp_path, text, expanded)
    assert copies or case == "fsdp-pp"  # sharded: every pass emitted
    monkeypatch.setattr(templates, "USE_TEMPLATES", False)
    slow = _programs(tmp_path, text, expanded)
    for a, b in zip(fast, slow, strict=True):
        assert a.ops == b.ops
        assert a.segments == b.segments


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuts_inside_copies_prove_no_later_and_change_nothing(
    tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prover cuts at several points of every copy (engine/prover.py CUTS_PER_COPY):
    the same results as cutting at copy starts only, the proof never later (the
    interleaved schedule's long steady unit: strictly earlier)."""
    from simulator.engine import prover

    inside = _run(tmp_path, case)
    monkeypatch.setattr(prover, "CUTS_PER_COPY", 1)
    starts = _run(tmp_path, case)
    assert inside.engine.ops_processed <= starts.engine.ops_processed
    if case == "interleaved":
        assert inside.engine.ops_processed < starts.engine.ops_processed
    a, b = inside.report, starts.report
    assert a.iteration_time_s == b.iteration_time_s
    assert a.comm_time_by_group_s == pytest.approx(b.comm_time_by_group_s, rel=1e-9, abs=1e-12)
    assert a.compute_by_kind_s == pytest.approx(b.compute_by_kind_s, rel=1e-9, abs=1e-12)
    assert inside.engine.link_bytes == pytest.approx(starts.engine.link_bytes, rel=1e-12)
