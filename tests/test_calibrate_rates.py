"""Fitted kernel rates in the kernel model, size-1 collective tables, the CPU host."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.cost.calibration import (
    AlphaBetaSegment,
    Calibration,
    CollectiveTable,
    GemmPoint,
    GemmTable,
    GpuCalibration,
    KernelRates,
    calibration_from_mapping,
)
from simulator.cost.kernels import KernelModel
from simulator.network.params import default_network_params
from simulator.network.pricing import CollectivePricer
from topologies.hardware import gpu_spec
from topologies.machines import build_machine
from validation.runs.measured import catalogue_gpu
from workloads.ops import CollectiveKind, CollectiveOp, ComputeKind, ComputeOp

RATES = KernelRates(
    gemm_flops_per_s=50e9, gemm_overhead_s=20e-6, attention_flops_per_s=10e9,
    memory_bandwidth_Bps=20e9, min_kernel_s=3e-6, launch_overhead_s=100e-6,
    issue_compute_s=0.0, issue_collective_s=1e-6,
)  # fmt: skip


def _gemm(m: int, n: int, k: int) -> ComputeOp:
    return ComputeOp("g", ComputeKind.GEMM, 2.0 * m * n * k, 4.0 * (m * k + k * n + m * n),
                     shape=(m, n, k), dtype_bytes=4)  # fmt: skip


def _cal(**gpu: object) -> Calibration:
    return Calibration(gpus={"cpu": GpuCalibration(**gpu)})  # type: ignore[arg-type]


def test_fitted_rates_replace_the_curve() -> None:
    km = KernelModel("cpu", calibration=_cal(rates=RATES))
    op = _gemm(512, 256, 128)
    assert km.kernel_time_s(op) == pytest.approx(20e-6 + op.flops / 50e9)
    assert km.duration_s(op) == pytest.approx(km.kernel_time_s(op) + 100e-6)
    ew = ComputeOp("e", ComputeKind.ELEMENTWISE, 0.0, 4e6, dtype_bytes=4)
    assert km.kernel_time_s(ew) == pytest.approx(3e-6 + 4e6 / 20e9)
    attn = ComputeOp("a", ComputeKind.ATTENTION, 1e9, 0.0, shape=(128, 128, 4, 32), dtype_bytes=4)
    assert km.kernel_time_s(attn) == pytest.approx(20e-6 + 1e9 / 10e9)
    coll = CollectiveOp("c", CollectiveKind.ALL_REDUCE, "x", 1e6, "t", "comm:x")
    assert km.issue_s(op) == 0.0 and km.issue_s(coll) == 1e-6
    batch = km.durations_s([_gemm(512, 256, 128), _gemm(300, 200, 100)])
    assert batch[0] == pytest.approx(km.duration_s(op))
    assert batch[1] == pytest.approx(20e-6 + 2 * 300 * 200 * 100 / 50e9 + 100e-6)


def test_table_wins_over_the_rate_and_no_rates_change_nothing() -> None:
    table = GemmTable(points=(GemmPoint(m=512, n=256, k=128, dtype_bytes=4, time_s=1e-3),))
    km = KernelModel("cpu", calibration=_cal(gemm=table, rates=RATES))
    assert km.kernel_time_s(_gemm(512, 256, 128)) == pytest.approx(1e-3)
    near = km.kernel_time_s(_gemm(512, 256, 256))  # a neighbour: ratio x fitted rate
    ratio = 1e-3 / (20e-6 + 2 * 512 * 256 * 128 / 50e9)
    assert near == pytest.approx(ratio * (20e-6 + 2 * 512 * 256 * 256 / 50e9))
    for gpu in ("h100", "cpu"):
        plain = KernelModel(gpu)
        empty = KernelModel(gpu, calibration=Calibration(gpus={gpu: GpuCalibration()}))
        op = _gemm(1024, 1024, 1024)
        assert plain.duration_s(op) == empty.duration_s(op)
        assert plain.launch_overhead_s == empty.launch_overhead_s


def test_rates_round_trip_and_validate() -> None:
    cal = _cal(rates=RATES)
    assert calibration_from_mapping(cal.model_dump(mode="json")) == cal
    with pytest.raises(Exception, match="rates"):
        calibration_from_mapping({"gpus": {"cpu": {"rates": {"gemm_flops_per_s": -1}}}})


def test_size_one_group_pays_its_table() -> None:
    """A size-1 group has no phases; its calibrated time is all overhead."""
    table = CollectiveTable(
        collective="all-reduce", tier="intra_node", group_size=1,
        segments=(AlphaBetaSegment(min_bytes=0, max_bytes=1e9, alpha_s=150e-6, beta_s_per_byte=0),),
    )  # fmt: skip
    topo = build_machine("cpu-host", 1)
    pricer = CollectivePricer(
        topo, default_network_params(), calibration=_cal(collectives=(table,))
    )
    (bundle,) = pricer.bundles(CollectiveKind.ALL_REDUCE, np.array([[0]]), 4096.0)
    assert not bundle.phases
    assert pricer.alpha_beta_time_s(bundle, 4096.0, CollectiveKind.ALL_REDUCE) == pytest.approx(
        150e-6
    )
    plain = CollectivePricer(topo, default_network_params())
    (b2,) = plain.bundles(CollectiveKind.ALL_REDUCE, np.array([[0]]), 4096.0)
    assert plain.alpha_beta_time_s(b2, 4096.0, CollectiveKind.ALL_REDUCE) == pytest.approx(
        default_network_params().collective_overhead_s
    )


def test_cpu_host_and_catalogue() -> None:
    topo = build_machine("cpu-host", 1)
    assert topo.gpu_type == "cpu" and topo.num_gpus == 32 and topo.num_nodes == 1
    assert gpu_spec("cpu").vendor == "cpu"
    for name, key in [
        ("Tesla V100-SXM2-32GB", "v100-32gb"), ("Tesla V100-SXM2-16GB", "v100-16gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("NVIDIA A100-PG509-200", "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA GH200 480GB", "gh200"), ("AMD Instinct MI300X VF", "mi300x"), ("", "cpu"),
    ]:  # fmt: skip
        vendor = "cpu" if not name else "nvidia"
        assert catalogue_gpu(name, vendor) == key
        gpu_spec(key)
    assert catalogue_gpu("AMD Radeon Graphics", "amd") is None
    # device properties resolve generic names and the memory of ambiguous ones
    gib = 2**30
    assert catalogue_gpu("AMD Radeon Graphics", "amd", 104, 64 * gib) == "mi250-gcd"
    assert catalogue_gpu("AMD Radeon Graphics", "amd", 110, 64 * gib) == "mi250x-gcd"
    assert catalogue_gpu("AMD Radeon Graphics", "amd", 120, 64 * gib) is None
    assert catalogue_gpu("NVIDIA A100-PG509-200", "nvidia", 108, 39.4 * gib) == "a100-40gb"
    assert catalogue_gpu("NVIDIA A100-PG509-200", "nvidia", 108, 79.2 * gib) == "a100-80gb"
