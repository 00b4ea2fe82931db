"""Calibration hook: table overrides, interpolation rules, collective lookups, file I/O."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from simulator.cost import (
    Calibration,
    CollectiveTable,
    KernelModel,
    calibration_from_mapping,
    load_calibration,
    save_calibration,
)
from simulator.errors import CostModelError
from workloads.ops import CollectiveKind, ComputeKind, ComputeOp


def gemm(m: int, n: int, k: int, batch: int = 1, dtype: int = 2) -> ComputeOp:
    return ComputeOp(
        name="gemm",
        kind=ComputeKind.GEMM,
        flops=2.0 * m * n * k * batch,
        bytes=float(dtype * (m * k + k * n + m * n) * batch),
        shape=(m, n, k) if batch == 1 else (m, n, k, batch),
        dtype_bytes=dtype,
    )


def cal_with(points: list[dict[str, Any]], **table: Any) -> Calibration:
    return calibration_from_mapping({"gpus": {"h100": {"gemm": {"points": points, **table}}}})


RAW: dict[str, Any] = {
    "version": 1,
    "provenance": {
        "created": "2025-01-01T00:00:00Z",
        "tool": "axsim calibrate",
        "traces": [{"path": "rank0.json.gz", "sha256": "ab" * 32, "samples": 120}],
        "residuals": {"gemm_median_rel": 0.031, "all_reduce_p90_rel": 0.08},
        "notes": "synthetic",
        "calibrator_version": "0.1",  # unknown provenance keys are kept
    },
    "gpus": {
        "h100": {
            "overlap_slowdown": 1.07,
            "gemm": {
                "points": [
                    {"m": 4096, "n": 4096, "k": 4096, "time_s": 2.0e-4, "samples": 11},
                    {"m": 8192, "n": 4096, "k": 4096, "flops_per_s": 6.0e14},
                ]
            },
            "collectives": [
                {
                    "collective": "all-reduce",
                    "tier": "nvlink",
                    "group_size": 8,
                    "segments": [
                        {
                            "min_bytes": 0,
                            "max_bytes": 65536,
                            "alpha_s": 2e-5,
                            "beta_s_per_byte": 1e-11,
                        },
                        {
                            "min_bytes": 65536,
                            "max_bytes": 1e12,
                            "alpha_s": 3e-5,
                            "beta_s_per_byte": 2.6e-12,
                        },
                    ],
                },
                {
                    "collective": "all-reduce",
                    "tier": "nvlink",
                    "points": [
                        {"bytes": 1e6, "busbw_Bps": 1e10},
                        {"bytes": 1e8, "busbw_Bps": 1e12},
                    ],
                },
            ],
        }
    },
}


# --------------------------------------------------------------------- GEMM overrides
def test_table_overrides_the_curve_exactly_at_its_points() -> None:
    km = KernelModel("h100", calibration=calibration_from_mapping(RAW))
    assert km.kernel_time_s(gemm(4096, 4096, 4096)) == 2.0e-4
    assert km.duration_s(gemm(4096, 4096, 4096)) == 2.0e-4 + km.launch_overhead_s
    assert km.kernel_time_s(gemm(8192, 4096, 4096)) == pytest.approx(
        2 * 8192 * 4096 * 4096 / 6.0e14
    )
    assert km.overlap_slowdown == 1.07


def test_idw_transfers_the_measured_over_curve_ratio() -> None:
    plain = KernelModel("h100")
    pts = [(4096, 4096, 4096), (4096, 4096, 8192)]
    points = [
        {"m": m, "n": n, "k": k, "time_s": 1.5 * plain.kernel_time_s(gemm(m, n, k))}
        for m, n, k in pts
    ]
    km = KernelModel("h100", calibration=cal_with(points))
    between = gemm(4096, 4096, 6144)
    assert km.kernel_time_s(between) == pytest.approx(1.5 * plain.kernel_time_s(between), rel=1e-12)
    far = gemm(4096, 4096, 32768)  # k more than a factor 2 from every point
    assert km.kernel_time_s(far) == plain.kernel_time_s(far)
    other_dtype = gemm(4096, 4096, 6144, dtype=1)
    assert km.kernel_time_s(other_dtype) == plain.kernel_time_s(other_dtype)
    batched = gemm(4096, 4096, 4096, batch=2)
    assert km.kernel_time_s(batched) == plain.kernel_time_s(batched)


def test_idw_weights_the_nearer_point_more() -> None:
    plain = KernelModel("h100")
    points = [
        {
            "m": 4096,
            "n": 4096,
            "k": 4096,
            "time_s": 2 * plain.kernel_time_s(gemm(4096, 4096, 4096)),
        },
        {"m": 4096, "n": 4096, "k": 8192, "time_s": plain.kernel_time_s(gemm(4096, 4096, 8192))},
    ]
    km = KernelModel("h100", calibration=cal_with(points))
    q = gemm(4096, 4096, 4608)
    ratio = km.kernel_time_s(q) / plain.kernel_time_s(q)
    d1, d2 = math.log2(4608 / 4096), math.log2(8192 / 4608)
    w1, w2 = 1 / d1**2, 1 / d2**2
    assert ratio == pytest.approx(2 ** (w1 / (w1 + w2)), rel=1e-9)


@pytest.mark.parametrize(("mode", "expected_ratio"), [("nearest", 2.0), ("exact", 1.0)])
def test_nearest_and_exact_modes(mode: str, expected_ratio: float) -> None:
    plain = KernelModel("h100")
    points = [
        {
            "m": 4096,
            "n": 4096,
            "k": 4096,
            "time_s": 2 * plain.kernel_time_s(gemm(4096, 4096, 4096)),
        },
        {"m": 4096, "n": 4096, "k": 8192, "time_s": plain.kernel_time_s(gemm(4096, 4096, 8192))},
    ]
    km = KernelModel("h100", calibration=cal_with(points, interpolation=mode))
    q = gemm(4096, 4096, 4608)
    assert km.kernel_time_s(q) / plain.kernel_time_s(q) == pytest.approx(expected_ratio)


def test_calibration_of_another_gpu_is_ignored() -> None:
    km = KernelModel("a100-40gb", calibration=calibration_from_mapping(RAW))
    assert km.kernel_time_s(gemm(4096, 4096, 4096)) == KernelModel("a100-40gb").kernel_time_s(
        gemm(4096, 4096, 4096)
    )
    assert km.overlap_slowdown is None  # the mechanism (no fixed factor), not the other GPU's 1.07


def test_vectorised_path_respects_the_table() -> None:
    cal = calibration_from_mapping(RAW)
    ops = [
        gemm(4096, 4096, 4096),
        gemm(4096, 4096, 5000),
        gemm(100, 100, 100),
        gemm(8192, 4096, 4096),
    ]
    vec = KernelModel("h100", calibration=cal).durations_s(ops)
    scalar = KernelModel("h100", calibration=cal)
    assert list(vec) == pytest.approx([scalar.duration_s(o) for o in ops], rel=1e-12)


# --------------------------------------------------------------------- collectives
def test_collective_segments_and_busbw_points() -> None:
    cal = calibration_from_mapping(RAW)
    exact = cal.collective("h100", "nvlink", CollectiveKind.ALL_REDUCE, group_size=8)
    assert exact is not None and exact.group_size == 8
    assert exact.time_s(1000) == pytest.approx(2e-5 + 1e-11 * 1000)
    assert exact.time_s(1e9) == pytest.approx(3e-5 + 2.6e-12 * 1e9)
    assert exact.busbw_Bps(1e6) is None
    anysize = cal.collective("h100", "nvlink", "all-reduce", group_size=4)
    assert anysize is not None and anysize.group_size is None and anysize.time_s(1.0) is None
    assert anysize.busbw_Bps(1e7) == pytest.approx(1e11)  # geometric midpoint
    assert anysize.busbw_Bps(1e3) == pytest.approx(1e10)  # clamped below
    assert anysize.busbw_Bps(1e12) == pytest.approx(1e12)  # and above
    assert cal.collective("h100", "nic", "all-reduce") is None
    assert cal.collective("a100-40gb", "nvlink", "all-reduce") is None


def test_collective_table_rejects_overlaps_and_empty() -> None:
    seg = {"alpha_s": 1e-5, "beta_s_per_byte": 1e-11}
    with pytest.raises(ValueError, match="overlap"):
        CollectiveTable.model_validate(
            {
                "collective": "all-gather",
                "tier": "nic",
                "segments": [
                    {"min_bytes": 0, "max_bytes": 100, **seg},
                    {"min_bytes": 50, "max_bytes": 200, **seg},
                ],
            }
        )
    with pytest.raises(ValueError, match="segments or points"):
        CollectiveTable(collective=CollectiveKind.ALL_GATHER, tier="nic")


# --------------------------------------------------------------------- files
@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_save_load_round_trip_preserves_everything(tmp_path: Path, suffix: str) -> None:
    cal = calibration_from_mapping(RAW)
    path = tmp_path / f"cal{suffix}"
    save_calibration(cal, path)
    back = load_calibration(path)
    assert back == cal
    assert back.provenance.traces[0].sha256 == "ab" * 32
    assert back.provenance.residuals["gemm_median_rel"] == 0.031
    assert back.provenance.model_extra == {"calibrator_version": "0.1"}


BAD_CASES: list[tuple[str, str]] = [
    ("gpus:\n  h200x: {}\n", "gpus.h200x"),
    (
        "gpus:\n  h100:\n    gemm:\n      points:\n        - {m: 1, n: 2, k: 3, time_s: 1.0, flops_per_s: 2.0}\n",
        "gpus.h100.gemm.points.0",
    ),
    (
        "gpus:\n  h100:\n    gemm:\n      points:\n        - {m: -1, n: 2, k: 3, time_s: 1.0}\n",
        "gpus.h100.gemm.points.0.m",
    ),
    (
        "gpus:\n  h100:\n    collectives:\n      - {collective: all-reduce, tier: infiniband, "
        "points: [{bytes: 1, busbw_Bps: 1}]}\n",
        "gpus.h100.collectives.0.tier",
    ),
    (
        "gpus:\n  h100:\n    collectives:\n      - {collective: allreduce, tier: nic, "
        "points: [{bytes: 1, busbw_Bps: 1}]}\n",
        "gpus.h100.collectives.0.collective",
    ),
    ("gpus:\n  h100:\n    overlap_slowdown: 0\n", "gpus.h100.overlap_slowdown"),
    # read as 1.0 before calibration models moved onto UserModel: a boolean is no number
    ("gpus:\n  h100:\n    overlap_slowdown: true\n", "gpus.h100.overlap_slowdown"),
    ("version: 2\n", "version"),
    ("gpus:\n  h100:\n    gemm_table: {}\n", "gpus.h100.gemm_table"),
    ("- just\n- a list\n", "top level"),
]


@pytest.mark.parametrize(("text", "field"), BAD_CASES)
def test_bad_calibration_file_names_file_and_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "bad_cal.yaml"
    path.write_text(text)
    with pytest.raises(CostModelError) as info:
        load_calibration(path)
    msg = str(info.value)
    # the one user-file shape: "calibration file FILE: dotted.field: message"
    if field == "top level":
        named = "bad_cal.yaml: expected a mapping at the top level" in msg
    else:
        named = f"bad_cal.yaml: {field}: " in msg
    assert named and "\n" not in msg, msg


def test_unreadable_or_unparsable_file(tmp_path: Path) -> None:
    with pytest.raises(CostModelError, match=r"missing\.yaml.*cannot read"):
        load_calibration(tmp_path / "missing.yaml")
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    with pytest.raises(CostModelError, match=r"broken\.json.*not valid"):
        load_calibration(bad)
