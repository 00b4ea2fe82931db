"""Virtual microbatches (one emitted body standing for the identical middle microbatches)
give the same iteration and the same report as emitting every microbatch."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.api import simulate
from simulator.config import (
    ExperimentConfig,
    apply_overrides,
    default_config_mapping,
    validate_config,
)
from workloads.builder import microbatch_copies

# 16 Perlmutter GPUs, GPT-5B, 2^19 tokens = 256 sequences: several microbatches each
CASES: dict[str, dict[str, Any]] = {
    "axonn": {"strategy": "axonn", "grid": {"x": 2, "y": 2, "z": 2, "data": 2}},
    "megatron": {"strategy": "megatron", "tp": 4, "pp": 1},
    "fsdp": {"strategy": "fsdp"},
    "fsdp-tp": {"strategy": "fsdp-tp", "tp": 4},
    "optimus": {"strategy": "optimus", "q": 2, "data": 4},
}


def _config(parallel: dict[str, Any], *extra: str) -> ExperimentConfig:
    data = default_config_mapping()
    data["parallel"] = parallel
    base = [
        "cluster.gpus=16",
        "model.name=gpt-5b",
        "training.batch_tokens=524288",
        "training.microbatch_sequences=2",
    ]
    return validate_config(apply_overrides(data, [*base, *extra]))


def test_microbatch_copies_cover_every_microbatch() -> None:
    for m in range(1, 40):
        copies = microbatch_copies(m, compress=True)
        assert sum(copies) == m
        assert len(copies) <= 3
        assert microbatch_copies(m, compress=False) == [1] * m


@pytest.mark.parametrize("strategy", sorted(CASES))
def test_virtual_microbatches_match_expanded(strategy: str) -> None:
    sets = CASES[strategy]
    virtual = simulate(_config(sets))
    expanded = simulate(_config(sets, "engine.virtual_microbatches=false"))
    rv, re = virtual.report, expanded.report
    assert virtual.plan.graph.programs[0].compressed, "this case must exercise compression"
    assert not expanded.plan.graph.programs[0].compressed
    assert rv.ops_represented == re.ops_represented
    assert len(virtual.plan.graph.programs[0]) < len(expanded.plan.graph.programs[0])
    assert rv.iteration_time_s == pytest.approx(re.iteration_time_s, rel=1e-9)
    assert rv.compute_time_s == pytest.approx(re.compute_time_s, rel=1e-6)
    assert rv.exposed_comm_time_s == pytest.approx(re.exposed_comm_time_s, rel=1e-3, abs=1e-6)
    for group, value in re.comm_total_by_group_s.items():
        assert rv.comm_total_by_group_s[group] == pytest.approx(value, rel=1e-6, abs=1e-9)
    for kind, value in re.compute_by_kind_s.items():
        assert rv.compute_by_kind_s[kind] == pytest.approx(value, rel=1e-6)
    assert virtual.engine.link_bytes == pytest.approx(expanded.engine.link_bytes, rel=1e-9)


def test_virtual_microbatches_with_a_straggler_stay_compressed_and_exact() -> None:
    """A straggler puts ranks apart in time: the microbatches still repeat (offset), so the
    compressed program is kept and the run equals simulating every op."""
    sets = CASES["axonn"]
    slow = [
        "cluster.stragglers=[{rank: 3, slowdown: 1.5}]",
        "engine.mode=full",
        # 16 microbatches per rank of a 4-layer stack: still several repeated bodies to
        # compress, at a fraction of the cost of every op of 64 microbatches of 24 layers
        "training.batch_tokens=131072",
        "model.layers=4",
    ]
    virtual = simulate(_config(sets, *slow))
    expanded = simulate(_config(sets, *slow, "engine.virtual_microbatches=false"))
    every_op = simulate(_config(sets, *slow, "engine.steady_state=false"))
    assert virtual.report.iteration_time_s == pytest.approx(
        every_op.report.iteration_time_s, rel=1e-12
    )
    assert expanded.report.iteration_time_s == pytest.approx(
        every_op.report.iteration_time_s, rel=1e-12
    )
    assert virtual.plan.graph.programs[0].compressed  # decided up front: never rebuilt
    assert virtual.report.compute_time_s == pytest.approx(every_op.report.compute_time_s, rel=1e-12)
