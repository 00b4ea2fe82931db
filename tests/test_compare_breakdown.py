"""The simulated side of `axsim compare`: per-kind busy time without the launch overhead.

Traces show the host time between ops as gaps, so the kernel model's per-op launch
overhead (which the simulator adds to every compute op) must not count as GEMM or
elementwise time; it is its own `overhead` kind. Runs without torch: a torch4d spec is
replayed on the CPU host preset.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.cost.calibration import Calibration, GpuCalibration, KernelRates
from simulator.engine.timeline import COMPUTE_KINDS
from validation.compare import simulated_breakdown
from validation.runs.simulate import SimRun, simulate_torch4d
from validation.torch4d.config import PRESETS, Grid, RunSpec

OVERHEAD = 2e-4


@pytest.fixture(scope="module")
def runs() -> tuple[SimRun, SimRun]:
    spec = RunSpec(Grid(2, 1, 1, 1), PRESETS["tiny"])
    with_overhead = Calibration(
        gpus={"cpu": GpuCalibration(rates=KernelRates(launch_overhead_s=OVERHEAD))}
    )
    return simulate_torch4d(spec), simulate_torch4d(spec, with_overhead)


def test_overhead_is_reported_apart(runs: tuple[SimRun, SimRun]) -> None:
    plain, loaded = runs
    assert loaded.op_overhead_s == pytest.approx(OVERHEAD)
    kinds0, groups0 = simulated_breakdown(plain.timeline, plain.op_overhead_s)
    kinds1, groups1 = simulated_breakdown(loaded.timeline, loaded.op_overhead_s)
    tl = loaded.timeline
    ops = sum(
        int(np.isin(tl.rank(r).kind, list(COMPUTE_KINDS)).sum()) for r in range(tl.world_size)
    )
    assert ops > 0
    assert kinds1["overhead"] == pytest.approx(ops * OVERHEAD / tl.world_size)
    for kind in set(kinds0) & COMPUTE_KINDS:  # the kernels themselves are unchanged
        assert kinds1[kind] == pytest.approx(kinds0[kind], rel=1e-9, abs=1e-12)
    assert kinds0.get("overhead", 0.0) == pytest.approx(plain.op_overhead_s * ops / tl.world_size)
    assert set(groups1) == set(groups0)


def test_without_overhead_kinds_are_raw_busy_time(runs: tuple[SimRun, SimRun]) -> None:
    _, loaded = runs
    tl = loaded.timeline
    kinds, _ = simulated_breakdown(tl)
    raw = sum(
        float((t.end_s - t.start_s)[t.kind == "gemm"].sum())
        for t in (tl.rank(r) for r in range(tl.world_size))
    )
    assert "overhead" not in kinds and kinds["gemm"] == pytest.approx(raw / tl.world_size)
