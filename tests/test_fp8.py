"""FP8 training (Transformer Engine, delayed scaling): GEMM rates against the data sheets
and Transformer Engine's own GEMM benchmark, what the program emits, and memory.

Reference: TransformerEngine docs/examples/gemm_profiling/gemm_profiling.rst ("Worked
Example: 5B Model on H200"): the 12 GEMMs of one layer of a 5B model (hidden 4096,
intermediate 16384, 31 x 512 tokens) on an H200 NVL, timed with CUDA events: BF16
32.014 ms; FP8 raw kernels (CurrentScaling, pre-quantized) 16.785 ms; FP8
DelayedScaling through te.Linear (each call casts and transposes its input and weight)
18.978 ms. Nothing here is fitted to them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.cost.kernels import KernelModel
from tests.cli_helpers import one_line_error
from tests.strategy_helpers import hybrid
from topologies.hardware import gpu_catalogue, gpu_spec
from workloads.activations import ActivationShape, block_activation_terms
from workloads.fp8 import CAST_TRANSPOSE_BYTES, QUANTIZE_FLOPS, fp8_gemm_bytes
from workloads.hybrid.memory import hybrid_memory
from workloads.hybrid.params import MegatronParallel
from workloads.models import TransformerSpec
from workloads.ops import CollectiveOp, ComputeKind, ComputeOp


def _gemm(km: KernelModel, m: int, k: int, n: int, fp8: bool) -> float:
    nbytes = fp8_gemm_bytes(m, n, k) if fp8 else 2.0 * (m * k + k * n + m * n)
    op = ComputeOp("g", ComputeKind.GEMM, 2.0 * m * n * k, nbytes, shape=(m, n, k),
                   dtype_bytes=1 if fp8 else 2)  # fmt: skip
    return km.kernel_time_s(op)


def _cast(km: KernelModel, elems: float) -> float:
    op = ComputeOp("q", ComputeKind.QUANTIZE, QUANTIZE_FLOPS * elems,
                   CAST_TRANSPOSE_BYTES * elems, dtype_bytes=1)  # fmt: skip
    return km.kernel_time_s(op)


@pytest.mark.parametrize("gpu", [n for n, g in gpu_catalogue().items() if g.has_fp8])
def test_fp8_scale_is_the_data_sheet_ratio(gpu: str) -> None:
    """The kernel model's 1-byte tensor-core scale is the data sheets' FP8 / bf16 ratio
    (H100/H200/GH200 1,979 / 989; MI300X 2,614.9 / 1,307)."""
    spec = gpu_spec(gpu)
    assert spec.fp8_peak_flops is not None
    km = KernelModel(spec)
    assert km.peak_for_dtype(1) / km.peak_for_dtype(2) == pytest.approx(
        spec.fp8_peak_flops / spec.peak_flops, rel=0.01
    )


def test_large_fp8_gemm_runs_at_the_data_sheet_ratio() -> None:
    """A 16384^3 GEMM fills every SM with full tiles and amortises every fixed cost: its
    FP8 time is its bf16 time over 1,979 / 989."""
    km = KernelModel("h100")
    s = 16384
    ratio = _gemm(km, s, s, s, fp8=False) / _gemm(km, s, s, s, fp8=True)
    assert ratio == pytest.approx(1979 / 989, rel=0.01)


def test_fp8_gains_less_on_small_gemms() -> None:
    """The same fixed time per tile is twice as many FP8 k elements (the k ramp) and the
    bf16 output does not shrink: the FP8 speed-up falls with the shape."""
    km = KernelModel("h100")
    assert km.k_ramp(1) == 2 * km.k_ramp(2)
    ratios = [_gemm(km, s, s, s, False) / _gemm(km, s, s, s, True) for s in (512, 2048, 8192)]
    assert ratios[0] < ratios[1] < ratios[2] < 2.0


def _te_layer_gemms() -> list[tuple[int, int, int]]:
    """The TE tutorial's 12 shapes (M x K x N): Fprop, Dgrad (K and N swapped), Wgrad."""
    m, h, f = 31 * 512, 4096, 16384
    fprop = [(m, h, 3 * h), (m, h, h), (m, h, f), (m, f, h)]
    dgrad = [(m, n, k) for m, k, n in fprop]
    wgrad = [(h, m, 3 * h), (h, m, h), (h, m, f), (f, m, h)]
    return fprop + dgrad + wgrad


def test_te_5b_layer_on_h200_nvl() -> None:
    """Transformer Engine's measured per-layer GEMM times on an H200 NVL (GH100 at 600 W:
    835 bf16 / 1,670.5 FP8 dense TFLOP/s, 4.8 TB/s), predicted with the H200 kernel
    constants. Predicted (this model): bf16 31.66 ms (-1.1%), FP8 raw 15.93 ms (-5.1%),
    FP8 with TE's per-call cast+transpose of input and weight 18.27 ms (-3.7%)."""
    nvl = replace(gpu_spec("h200"), peak_flops=835e12, fp8_peak_flops=1670.5e12)
    km = KernelModel(nvl)
    shapes = _te_layer_gemms()
    bf16 = sum(_gemm(km, *s, fp8=False) for s in shapes)
    fp8 = sum(_gemm(km, *s, fp8=True) for s in shapes)
    autocast = fp8 + sum(_cast(km, m * k) + _cast(km, k * n) for m, k, n in shapes)
    assert bf16 == pytest.approx(32.014e-3, rel=0.05)
    assert fp8 == pytest.approx(16.785e-3, rel=0.10)
    assert autocast == pytest.approx(18.978e-3, rel=0.10)
    assert bf16 / fp8 == pytest.approx(1.90, rel=0.06)
    assert bf16 / autocast == pytest.approx(1.69, rel=0.06)


SPEC = TransformerSpec(name="f", layers=2, hidden=64, heads=8, seq_len=32, vocab=128)


def _program(dtype: str, sp: bool = True, mbs: int = 1, sequences: int = 1) -> list[object]:
    spec = replace(SPEC, dtype=dtype)
    params = MegatronParallel(tp=2, sequence_parallel=sp)
    _, g = hybrid(params, 2, tp=2, spec=spec, sequences=sequences, mbs=mbs)
    return list(g.programs[0].ops)


def test_fp8_block_gemms_and_their_casts() -> None:
    """FP8: the block's 12 GEMMs per layer take 1-byte inputs, the output layer's stay
    bf16; the weights are cast once per iteration, the row-parallel inputs and every
    output gradient per microbatch."""
    ops = _program("fp8", sequences=2)  # two microbatches of one sequence
    gemms = [op for op in ops if isinstance(op, ComputeOp) and op.kind is ComputeKind.GEMM]
    block = [op for op in gemms if op.name.startswith("L")]
    assert block and all(op.dtype_bytes == 1 for op in block)
    assert all(op.dtype_bytes == 2 for op in gemms if op.name.startswith("logits"))
    names = [op.name for op in ops if isinstance(op, ComputeOp)]
    for lin in ("qkv", "attn_out", "mlp_up", "mlp_down"):
        assert names.count(f"L0.{lin}.fp8_weight_cast") == 1  # cached for microbatch 2
        assert names.count(f"L0.{lin}.fp8_grad_cast") == 2
    assert names.count("L0.attn_out.fp8_input_cast") == 4  # 2 forwards + 2 recomputes
    assert "L0.qkv.fp8_input_cast" not in names  # quantised by the fused LayerNorm
    bf16 = _program("bf16", sequences=2)
    assert not any(getattr(op, "kind", None) is ComputeKind.QUANTIZE for op in bf16)


def test_fp8_gathers_and_amax_reductions() -> None:
    """Sequence parallelism gathers FP8 inputs and output gradients (half the bf16
    bytes), reduce-scatters bf16; each forward and backward pass ends with one amax
    all-reduce over the stage's GPUs of 4 bytes per quantised tensor."""
    fp8 = {op.name: op for op in _program("fp8") if isinstance(op, CollectiveOp)}
    bf16 = {op.name: op for op in _program("bf16") if isinstance(op, CollectiveOp)}
    for name in ("L0.qkv.ag_tp.fwd", "L0.mlp_down.ag_tp.bwd", "L0.qkv.ag_tp.input"):
        assert fp8[name].bytes == bf16[name].bytes / 2
    assert fp8["L0.attn_out.rs_tp.fwd"].bytes == bf16["L0.attn_out.rs_tp.fwd"].bytes
    assert fp8["fp8.amax.fwd.ar"].group == "amax"
    assert fp8["fp8.amax.fwd.ar"].bytes == 4 * 3 * 4 * SPEC.layers  # input, weight, output
    assert fp8["fp8.amax.bwd.ar"].bytes == 4 * 2 * 4 * SPEC.layers  # grad out, grad in
    assert "fp8.amax.fwd.ar" not in bf16


def test_fp8_memory() -> None:
    """FP8 keeps a 2-byte FP8 copy (rows + transpose) of every block linear weight, and
    the linears' inputs in FP8."""
    spec = replace(SPEC, dtype="fp8")
    setup, _ = hybrid(MegatronParallel(tp=2, sequence_parallel=True), 2, tp=2, spec=spec)
    bf16_setup, _ = hybrid(MegatronParallel(tp=2, sequence_parallel=True), 2, tp=2, spec=SPEC)
    m8, m16 = hybrid_memory(spec, setup), hybrid_memory(SPEC, bf16_setup)
    linear = SPEC.layers * (64 * 192 + 64 * 64 + 64 * 256 + 256 * 64) / 2
    assert m8.weights - m16.weights == pytest.approx(2 * linear)
    a = ActivationShape(tokens=4096, seq_len=4096, hidden=4096, heads=32, kv_dim=4096,
                        mlp_up=16384, ffn=16384)  # fmt: skip
    t16 = block_activation_terms(a, "selective")
    t8 = block_activation_terms(replace(a, fp8_linear_inputs=True), "selective")
    halved = {"qkv_input", "attn_out_input", "mlp_up_input", "mlp_down_input"}
    for name, value in t16.items():
        assert t8[name] == (value / 2 if name in halved else value)


def test_fp8_needs_fp8_tensor_cores(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_error(
        ["simulate", "--machine", "dgx-a100", "--gpus", "8", "--model", "gpt-tiny",
         "--strategy", "megatron", "--batch-tokens", "4096", "--set", "model.dtype=fp8"],
        capsys,
    )  # fmt: skip
    assert "model.dtype fp8" in line and "a100" in line


def test_fp8_runs_faster_end_to_end() -> None:
    """Through the API on H100s: FP8 shortens the GEMMs, adds quantisation kernels and
    the amax all-reduces."""
    from simulator.api import simulate
    from simulator.config import validate_config

    def run(dtype: str) -> object:
        cfg = {
            "cluster": {"machine": "dgx-h100", "gpus": 8},
            "model": {"name": "gpt-5b", "layers": 2, "dtype": dtype},
            "parallel": {"strategy": "megatron", "tp": 8, "sequence_parallel": True},
            "training": {"batch_tokens": 4 * 2048, "microbatch_sequences": 2},
        }
        return simulate(validate_config(cfg)).report

    r16, r8 = run("bf16"), run("fp8")
    kinds16, kinds8 = r16.compute_by_kind_s, r8.compute_by_kind_s  # type: ignore[attr-defined]
    assert kinds8["gemm"] < 0.75 * kinds16["gemm"]
    assert kinds8["quantize"] > 0 and "quantize" not in kinds16
    assert r8.iteration_time_s < r16.iteration_time_s  # type: ignore[attr-defined]


def test_current_scaling_scans_each_tensor() -> None:
    """Float8CurrentScaling: no amax histories or per-pass reductions; every cast first
    reads its input for the amax (2 more bytes per element), the LayerNorm outputs are
    cast by a kernel of their own, their amax all-reduced over the tensor-parallel group
    under sequence parallelism."""
    spec = replace(SPEC, dtype="fp8", fp8_recipe="current")
    _, g = hybrid(MegatronParallel(tp=2, sequence_parallel=True), 2, tp=2, spec=spec)
    ops = {op.name: op for op in g.programs[0].ops}
    delayed = {op.name: op for op in _program("fp8")}
    assert "fp8.amax.fwd.ar" not in ops and "fp8.scale_update.fwd" not in ops
    assert ops["L0.qkv.fp8_amax.ar"].group == "tp"  # type: ignore[attr-defined]
    assert "L0.qkv.fp8_input_cast" in ops and "L0.qkv.fp8_input_cast" not in delayed
    cur, old = ops["L0.attn_out.fp8_input_cast"], delayed["L0.attn_out.fp8_input_cast"]
    assert cur.bytes == old.bytes * (CAST_TRANSPOSE_BYTES + 2) / CAST_TRANSPOSE_BYTES  # type: ignore[attr-defined]
