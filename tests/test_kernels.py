"""Kernel model: closed-form roofline cases, quantisation, and monotonicity properties."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import cost
from simulator.cost import Interference, KernelModel, best_tile, kernel_params
from simulator.errors import CostModelError
from topologies.hardware import gpu_spec
from workloads.ops import ComputeKind, ComputeOp

H100 = KernelModel("h100")


def gemm(m: int, n: int, k: int, batch: int = 1, dtype: int = 2) -> ComputeOp:
    """A GEMM op with the FLOPs and bytes a workload would give it."""
    return ComputeOp(
        name="gemm",
        kind=ComputeKind.GEMM,
        flops=2.0 * m * n * k * batch,
        bytes=float(dtype * (m * k + k * n + m * n) * batch),
        shape=(m, n, k) if batch == 1 else (m, n, k, batch),
        dtype_bytes=dtype,
    )


def op(kind: ComputeKind, flops: float, nbytes: float, phase: str = "") -> ComputeOp:
    return ComputeOp(name=str(kind), kind=kind, flops=flops, bytes=nbytes, phase=phase)


def single_tile_model(gpu: str = "h100") -> KernelModel:
    """One 128x128 tile, no split-K, no fixed costs, no k ramp: quantisation in its pure
    form."""
    spec = gpu_spec(gpu)
    p = dataclasses.replace(
        kernel_params(spec),
        gemm_tiles=((128, 128),),
        gemm_split_k=(1,),
        gemm_k_ramp=0.0,
        gemm_fixed_s=0.0,
        launch_overhead_s=0.0,
        min_kernel_s=0.0,
    )
    return KernelModel(spec, params=p)


# --------------------------------------------------------------------- closed forms
@pytest.mark.parametrize(
    "kind",
    [ComputeKind.ELEMENTWISE, ComputeKind.OPTIMIZER, ComputeKind.MEMCPY, ComputeKind.QUANTIZE],
)
def test_memory_bound_op_is_bytes_over_bandwidth_plus_overheads(kind: ComputeKind) -> None:
    nbytes = 1e9
    p = H100.params
    expected = nbytes / (p.hbm_efficiency * 3350e9) + p.min_kernel_s + p.launch_overhead_s
    assert H100.duration_s(op(kind, 0.0, nbytes)) == pytest.approx(expected, rel=1e-12)
    assert H100.kernel_time_s(op(kind, 0.0, nbytes)) == pytest.approx(
        expected - p.launch_overhead_s
    )


def test_memory_bound_flops_only_matter_beyond_the_vector_roofline() -> None:
    p = H100.params
    few = op(ComputeKind.OPTIMIZER, 1e6, 1e9)
    assert H100.duration_s(few) == H100.duration_s(op(ComputeKind.OPTIMIZER, 0.0, 1e9))
    many = op(ComputeKind.OPTIMIZER, 1e13, 1e3)
    expected = 1e13 / (p.vector_peak_fraction * 989e12) + p.min_kernel_s + p.launch_overhead_s
    assert H100.duration_s(many) == pytest.approx(expected)


def test_huge_square_gemm_approaches_flops_over_effective_peak() -> None:
    g = gemm(32768, 32768, 32768)
    ideal = g.flops / H100.gemm_peak_flops
    assert H100.gemm_efficiency(32768, 32768, 32768) > 0.98
    assert H100.kernel_time_s(g) == pytest.approx(ideal + H100.params.gemm_fixed_s, rel=0.02)


def test_one_gemm_peak_rule_for_every_gpu() -> None:
    """P comes from one rule (kernel_defaults.yaml): the silicon's profiled fraction, else
    its micro-benchmark fraction x the profiled / micro-benchmark ratio measured where both
    exist (GA100), else the vendor's mean profiled fraction. No GPU has a value of its own."""
    a100_40, a100_80 = KernelModel("a100-40gb"), KernelModel("a100-80gb")
    # the same silicon (GA100, 400 W): one profiled fraction, whatever the HBM size
    assert a100_40.gemm_peak_flops == pytest.approx(0.81 * 312e12)
    assert a100_80.gemm_peak_flops == a100_40.gemm_peak_flops
    assert "profiled ga100" in a100_40.params.gemm_peak_rule
    # the ratio profiled / micro-benchmark on GA100 transfers to the micro-benchmarked rest
    ratio = 0.81 / (280 / 312)
    assert KernelModel("mi250x-gcd").gemm_peak_flops == pytest.approx(125e12 * ratio)
    assert KernelModel("gh200").gemm_peak_flops == pytest.approx(813e12 * ratio)
    # MI250 shares MI250X's CDNA2 silicon: its micro-benchmark fraction, its own peak
    assert KernelModel("mi250-gcd").gemm_peak_flops == pytest.approx(
        125 / 191.5 * ratio * 181.05e12
    )
    assert KernelModel("h200").gemm_peak_flops == H100.gemm_peak_flops  # GH100 at 700 W
    # nothing measured on Volta: the mean of NVIDIA's profiled silicons
    assert KernelModel("v100-32gb").params.gemm_peak_fraction == pytest.approx((0.81 + 0.758) / 2)
    for gpu in ("a100-40gb", "mi250x-gcd", "gh200", "h100", "v100-16gb", "mi300x"):
        spec = gpu_spec(gpu)
        assert kernel_params(spec).gemm_peak_rule
        assert 0.3 < KernelModel(gpu).gemm_peak_flops / spec.peak_flops < 0.9
    assert gpu_spec("a100-40gb").empirical_gemm_flops == pytest.approx(280e12)


def test_no_gpu_sets_its_own_gemm_peak(tmp_path: Path) -> None:
    packaged = Path(cost.__path__[0]) / "data" / "kernel_defaults.yaml"
    bad = tmp_path / "k.yaml"
    bad.write_text(
        packaged.read_text().replace(
            "  a100-40gb:\n    hbm_efficiency: 0.82", "  a100-40gb:\n    gemm_peak_fraction: 0.9"
        )
    )
    with pytest.raises(CostModelError, match=r"gpus\.a100-40gb\.gemm_peak_fraction"):
        kernel_params(gpu_spec("a100-40gb"), bad)


def test_memory_bound_gemv_is_priced_by_its_bytes() -> None:
    g = gemm(1, 28672, 8192)  # streaming the weights of a decode step
    p = H100.params
    assert H100.kernel_time_s(g) == pytest.approx(g.bytes / H100.hbm_Bps + p.gemm_fixed_s)


def test_gemm_without_shape_runs_at_the_effective_peak() -> None:
    g = ComputeOp(name="g", kind=ComputeKind.GEMM, flops=1e12, bytes=1e6)
    assert H100.kernel_time_s(g) == pytest.approx(
        1e12 / H100.gemm_peak_flops + H100.params.gemm_fixed_s
    )


# --------------------------------------------------------------------- quantisation
def test_split_k_fills_the_sms_of_a_gemm_with_few_tiles() -> None:
    """One 128x128 tile and a long k: split 16 ways it occupies 16 SMs, not one."""
    km = single_tile_model()
    split = KernelModel(km.spec, params=dataclasses.replace(km.params, gemm_split_k=(1, 16)))
    g = gemm(128, 128, 65536)
    assert km.kernel_time_s(g) / split.kernel_time_s(g) == pytest.approx(16.0, rel=1e-9)
    # a GEMM that fills every SM already gains nothing
    full = gemm(128 * 12, 128 * 11, 8192)
    assert split.kernel_time_s(full) == pytest.approx(km.kernel_time_s(full))


def test_wave_quantisation_one_extra_tile_costs_a_second_wave() -> None:
    km = single_tile_model()
    sms = km.spec.sm_count  # 132 = 12 x 11 tiles of 128 x 128
    full = gemm(128 * 12, 128 * 11, 8192)
    one_more = gemm(128 * 12 + 1, 128 * 11, 8192)  # 13 x 11 = 143 tiles = 2 waves
    assert sms == 12 * 11
    assert km.kernel_time_s(one_more) / km.kernel_time_s(full) == pytest.approx(2.0, rel=1e-9)
    assert km.gemm_efficiency(128 * 12, 128 * 11, 8192) == pytest.approx(1.0)


def test_wave_quantisation_visible_with_default_tiles() -> None:
    """Just past a full wave of the best tile, the time jumps (smaller tiles help a bit);
    splitting k softens the jump (the partial second wave is shared out), never removes it."""
    n = 128 * 11
    at, past = (H100.kernel_time_s(gemm(m, n, 8192)) for m in (256 * 12, 256 * 12 + 64))
    assert past / at > 1.3
    split = KernelModel("h100", params=dataclasses.replace(H100.params, gemm_split_k=(1, 2, 4)))
    at, past = (split.kernel_time_s(gemm(m, n, 8192)) for m in (256 * 12, 256 * 12 + 64))
    assert 1.05 < past / at < 1.3


def test_tile_quantisation_padding_costs_a_whole_tile() -> None:
    km = single_tile_model()
    assert km.kernel_time_s(gemm(129, 128, 8192)) == pytest.approx(
        km.kernel_time_s(gemm(256, 128, 8192))
    )


def test_k_ramp_short_k_runs_below_peak() -> None:
    assert H100.gemm_efficiency(8192, 8192, 64) < H100.gemm_efficiency(8192, 8192, 8192)


def test_best_tile_reports_a_candidate() -> None:
    p = H100.params
    tile = best_tile(
        4096,
        4096,
        4096,
        1,
        sm_count=132,
        tiles=p.gemm_tiles,
        tile_intensity_knee=p.gemm_tile_intensity_knee,
        k_ramp=p.gemm_k_ramp,
    )
    assert tile in p.gemm_tiles


def test_batched_gemm_is_batch_times_the_tiles() -> None:
    km = single_tile_model()
    one = km.kernel_time_s(gemm(128 * 12, 128 * 11, 4096))
    assert km.kernel_time_s(gemm(128 * 12, 128 * 11, 4096, batch=3)) == pytest.approx(3 * one)


# --------------------------------------------------------------------- attention, dtype
def test_attention_closed_form_and_backward_slower() -> None:
    p = H100.params
    fwd = op(ComputeKind.ATTENTION, 1e12, 1e6, phase="fwd")
    bwd = op(ComputeKind.ATTENTION, 1e12, 1e6, phase="bwd")
    rec = op(ComputeKind.ATTENTION, 1e12, 1e6, phase="recompute")
    peak = H100.gemm_peak_flops
    assert H100.kernel_time_s(fwd) == pytest.approx(
        1e12 / (peak * p.attention_fwd_fraction) + p.gemm_fixed_s
    )
    assert H100.kernel_time_s(bwd) == pytest.approx(
        1e12 / (peak * p.attention_bwd_fraction) + p.gemm_fixed_s
    )
    assert H100.duration_s(rec) == H100.duration_s(fwd)
    assert H100.duration_s(bwd) > H100.duration_s(fwd)


def test_dtype_scales_the_tensor_rate() -> None:
    big = 16384
    t2 = H100.kernel_time_s(gemm(big, big, big, dtype=2))
    t1 = H100.kernel_time_s(gemm(big, big, big, dtype=1))
    t4 = H100.kernel_time_s(gemm(big, big, big, dtype=4))
    assert t1 < t2 < t4
    with pytest.raises(CostModelError, match="3-byte"):
        H100.kernel_time_s(gemm(64, 64, 64, dtype=3))


# --------------------------------------------------------------------- errors, cache
def test_bad_ops_raise_cost_model_error() -> None:
    with pytest.raises(CostModelError, match="shape"):
        H100.duration_s(
            ComputeOp(name="g", kind=ComputeKind.GEMM, flops=1.0, bytes=1.0, shape=(1, 2))
        )
    with pytest.raises(CostModelError, match="'neg'"):
        H100.duration_s(ComputeOp(name="neg", kind=ComputeKind.ELEMENTWISE, flops=-1.0, bytes=1.0))


def test_duration_is_cached_per_distinct_op() -> None:
    km = KernelModel("a100-40gb")
    a, b = gemm(1024, 1024, 1024), gemm(1024, 1024, 1024)
    assert km.duration_s(a) == km.duration_s(b)
    km.duration_s(op(ComputeKind.ATTENTION, 1e9, 1e6, "bwd"))
    km.duration_s(op(ComputeKind.ATTENTION, 1e9, 1e6, "fwd"))
    assert km.cache_size() == 3


def test_defaults_merge_vendor_and_gpu_overrides() -> None:
    h100, rtx = kernel_params(gpu_spec("h100")), kernel_params(gpu_spec("rtx5000"))
    assert h100.hbm_efficiency == 0.90 and rtx.hbm_efficiency == 0.85  # override vs vendor
    assert h100.gemm_tiles == rtx.gemm_tiles
    # interference: no fixed factor for a GPU (the mechanism of simulator/cost/
    # interference.py prices it); the CPU host fixes 1.0
    assert KernelModel("h100").interference is None
    assert KernelModel("a100-40gb").overlap_slowdown is None
    assert KernelModel("cpu").interference == Interference(1.0, 1.0)


def test_malformed_defaults_file_names_file_and_field(tmp_path: Path) -> None:
    packaged = Path(cost.__file__).parent / "data" / "kernel_defaults.yaml"
    bad = tmp_path / "defaults.yaml"
    bad.write_text(packaged.read_text().replace("hbm_efficiency: 0.85", "hbm_efficiency: fast"))
    with pytest.raises(CostModelError, match=r"defaults\.yaml.*'hbm_efficiency' is not a number"):
        KernelModel("rtx5000", defaults_path=bad)
    with pytest.raises(CostModelError, match="cannot read"):
        KernelModel("h100", defaults_path=tmp_path / "missing.yaml")


# --------------------------------------------------------------------- properties
dims = st.integers(min_value=1, max_value=20000)
gpus = st.sampled_from(["h100", "a100-40gb", "mi250x-gcd", "mi300x", "h100-split-k"])
MODELS = {g: KernelModel(g) for g in ["h100", "a100-40gb", "mi250x-gcd", "mi300x"]}
MODELS["h100-split-k"] = KernelModel(
    "h100", params=dataclasses.replace(H100.params, gemm_split_k=(1, 2, 4, 8, 16))
)


@settings(max_examples=150, deadline=None)
@given(
    gpus,
    dims,
    dims,
    dims,
    st.integers(1, 8),
    st.sampled_from(["m", "n", "k", "batch"]),
    st.integers(1, 5000),
)
def test_growing_any_gemm_dimension_is_never_faster(
    g: str, m: int, n: int, k: int, b: int, which: str, grow: int
) -> None:
    km = MODELS[g]
    base = {"m": m, "n": n, "k": k, "batch": b}
    bigger = dict(base, **{which: base[which] + grow})
    assert km.kernel_time_s(gemm(**bigger)) >= km.kernel_time_s(gemm(**base)) * (1 - 1e-12)


@settings(max_examples=100, deadline=None)
@given(gpus, dims, dims, dims)
def test_doubling_all_dimensions_is_never_faster(g: str, m: int, n: int, k: int) -> None:
    km = MODELS[g]
    assert km.kernel_time_s(gemm(2 * m, 2 * n, 2 * k)) >= km.kernel_time_s(gemm(m, n, k))


@settings(max_examples=100, deadline=None)
@given(
    gpus,
    st.sampled_from(list(ComputeKind)),
    st.floats(0, 1e15),
    st.floats(0, 1e10),
    st.floats(1.0, 10.0),
)
def test_more_flops_or_bytes_are_never_faster(
    g: str, kind: ComputeKind, flops: float, nbytes: float, factor: float
) -> None:
    km = MODELS[g]
    shape = (4096, 4096, 4096) if kind is ComputeKind.GEMM else ()
    base = ComputeOp(name="x", kind=kind, flops=flops, bytes=nbytes, shape=shape)
    more_f = dataclasses.replace(base, flops=flops * factor)
    more_b = dataclasses.replace(base, bytes=nbytes * factor)
    t = km.duration_s(base)
    assert km.duration_s(more_f) >= t and km.duration_s(more_b) >= t
    assert t >= km.launch_overhead_s and np.isfinite(t)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(dims, dims, dims, st.integers(1, 4)), min_size=1, max_size=20))
def test_vectorised_durations_equal_scalar_ones(shapes: list[tuple[int, int, int, int]]) -> None:
    ops = [gemm(*s) for s in shapes] + [op(ComputeKind.ELEMENTWISE, 0.0, 1e6)]
    vec = KernelModel("h100").durations_s(ops)
    scalar = KernelModel("h100")
    np.testing.assert_allclose(vec, [scalar.duration_s(o) for o in ops], rtol=1e-12)
