"""The kernel model's terms from traces: evidence, fits, leave-one-trace-out, report rows.

The leave-one-out runs on the committed real-trace fixtures (tests/data/traces: HTA,
PARAM and TraceLens traces trimmed to one step, see that README for their sources), so it
needs no shared/ directory. Its bounds are the model's own results on them (the table in
docs/guide/calibration.md): they guard what the model predicts for traces it never saw.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.api import simulate
from simulator.config import load_config
from simulator.cost import INTERFERENCE, LAUNCH_GAPS, Interference
from tests import calibrate_synth as synth
from validation.calibration.calibrate import calibrate
from validation.calibration.kernels.evidence import KernelSample, launch_gaps
from validation.calibration.kernels.leave_one_out import (
    TraceCase,
    leave_one_out,
    load_case,
    self_check,
)
from validation.trace.traffic import op_traffic

DATA = Path(__file__).parent / "data" / "traces"
CASES = (
    "hta/amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/trace_diff__control__control__step1009.json.gz",
    "hta/trace_diff__test__test__step1009.json.gz",
    "param",
    "tracelens/h100__Qwen_Qwen1.5-0.5B-Chat__1016005__step6.json.gz",
    "tracelens/mi300x__Qwen_Qwen1.5-0.5B-Chat__1016005__step6.json.gz",
)


# ------------------------------------------------------------------ traffic and evidence
def test_op_traffic_follows_what_the_kernels_move() -> None:
    bf16 = ["c10::BFloat16", "c10::BFloat16", "Scalar"]
    t, h = 80 * 96, 96
    # out of place: inputs read once, the (broadcast) output written once
    assert op_traffic("aten::add", [[80, 96], [96], []], bf16) == 2 * (t + h + t)
    # in place: the modified input is written back
    assert op_traffic("aten::add_", [[80, 96], [80, 96], []], bf16) == 2 * 3 * t
    # a reduction writes (almost) nothing; a gather moves the selected rows only
    assert op_traffic("aten::sum", [[80, 96]], bf16[:1]) == 2 * t
    rows = op_traffic("aten::embedding", [[50000, 96], [80]], ["c10::BFloat16", "long int"])
    assert rows == 2 * 80 * 96 * 2 + 80 * 8
    assert op_traffic("aten::add", None, None) is None and op_traffic("Foo", [[4]], []) is None


def _sample(start: float, end: float, launch: float, stream: str = "7") -> KernelSample:
    return KernelSample(
        "elementwise", "other", "k", stream, start, end, 1, 0, "aten::add", 0.0, 1e6, None, 2,
        0.0, launch, ("k", "", ""),
    )  # fmt: skip


def test_launch_gaps_are_device_gaps_of_kernels_already_issued() -> None:
    s = [
        _sample(0.0, 10e-6, -1e-6),
        _sample(12e-6, 20e-6, 1e-6),  # queued before the first ended: a 2 µs launch gap
        _sample(50e-6, 60e-6, 49e-6),  # issued late by the host: not a launch gap
        _sample(61e-6, 70e-6, 40e-6),  # queued: 1 µs
        _sample(200e-6, 210e-6, 50e-6),  # queued but 130 µs idle: a wait on another stream
    ]
    assert launch_gaps(s) == pytest.approx([2e-6, 1e-6])


def test_interference_recovered_from_synthetic_overlap(tmp_path: Path) -> None:
    synth.write_run(tmp_path)
    h100 = calibrate([tmp_path]).gpus["h100"]
    assert h100.interference is not None
    assert h100.interference.compute == pytest.approx(synth.SLOWDOWN, rel=1e-6)


# ------------------------------------------------------------------ leave one trace out
@pytest.fixture(scope="module")
def cases() -> list[TraceCase]:
    return [load_case(DATA / c) for c in CASES]


def test_generic_rocm_name_is_recognised_from_device_properties(cases: list[TraceCase]) -> None:
    assert cases[0].gpu == "mi250-gcd"  # "AMD Radeon Graphics", 104 CUs, 64 GiB
    assert cases[1].gpu == "a100-40gb"  # "A100-PG509-200" with 40 GiB


def test_leave_one_out_predicts_held_out_traces(cases: list[TraceCase]) -> None:
    rows = {r.label: r for r in leave_one_out(cases)}
    h100 = rows["h100__Qwen_Qwen1.5-0.5B-Chat__1016005__step6"]
    mi300x = rows["mi300x__Qwen_Qwen1.5-0.5B-Chat__1016005__step6"]
    control = rows["trace_diff__control__control__step1009"]
    # a GPU type no other trace shows: transferred terms, the presets' GEMM peak
    assert not h100.own_gpu_evidence and h100.coverage > 0.99
    for row, tol in (("gemm", 0.10), ("elementwise", 0.10), ("compute", 0.10)):
        assert abs(h100.error(row)) < tol, row  # type: ignore[arg-type]
    assert abs(mi300x.error("compute")) < 0.10  # type: ignore[arg-type]
    assert abs(control.error("gemm")) < 0.10  # type: ignore[arg-type]
    # the MI300X silicon profile was fitted on this very trace: it must not be used
    assert "tracelens" not in mi300x.gemm_peak_rule.lower()
    assert "profiled cdna3" not in mi300x.gemm_peak_rule
    # measured rows come from the trace, never from the model
    assert control.measured["comm_overlapped"] > 0 and control.measured["launch_gaps"] > 0


def test_a_case_calibrated_on_itself_reproduces_its_gemm_time(cases: list[TraceCase]) -> None:
    h100 = cases[4]
    own = self_check(h100)
    measured = sum(u.time_s for u in h100.evidence.units if u.kind == "gemm" and u.known)
    assert own["gemm"] == pytest.approx(measured, rel=0.05)


# ------------------------------------------------------------------ report rows
def test_report_splits_launch_gaps_and_interference() -> None:
    cfg = load_config(
        None,
        ["cluster.machine=perlmutter", "cluster.gpus=8", "model.name=gpt-tiny",
         "training.batch_tokens=65536", "parallel.grid={x: 1, y: 2, z: 2, data: 2}"],
    )  # fmt: skip
    report = simulate(cfg).report
    rows = report.compute_by_kind_s
    assert rows[LAUNCH_GAPS] > 0 and INTERFERENCE in rows
    terms = report.kernel_terms
    assert terms["gpu"] == "a100-40gb" and terms["gemm_peak_tflops"] == pytest.approx(0.81 * 312)
    # no fixed factor: the mechanism (Perlmutter's NCCL: 8 ring blocks of 108 SMs)
    assert (terms["interference_compute"], terms["interference_memory"]) == (None, None)
    assert terms["interference"] == {
        "mechanism": {
            "library": "nccl",
            "ring_channels": {"intra_node": 8, "inter_node": 8},
            "sm_count": 108,
        }
    }
    assert rows[INTERFERENCE] > 0
    assert Interference(1.03, 1.03).active
