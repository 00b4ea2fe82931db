"""The kernel model: how long a compute op runs on one GPU type.

Why a model rather than a table: the simulator must price shapes nobody has measured (new
models, other parallel splits), so durations come from a roofline with a fitted GEMM
efficiency curve; where a calibration file has measured GEMMs, those win (exactly at
their shapes, by measured/curve ratio in a neighbourhood around them).

Pricing (constants in data/kernel_defaults.yaml, documented there with their sources):

- GEMM: max(FLOPs / (P · s_dtype · eff(m, n, k, batch)), bytes / B) + gemm fixed time,
  P = the rate a large GEMM sustains (`gemm_peak_fraction` · peak · sustained clock
  fraction, the fraction resolved by one rule for every GPU, kernel_params.py); eff from
  gemm.py (tile and wave quantisation, tile efficiency, k ramp); B = achievable HBM
  bandwidth (`hbm_efficiency` · spec). A GEMM without a shape runs at P.
- attention (flash-attention style, FLOPs supplied by the workload, backward already
  ~2.5x forward): max(FLOPs / (P · s_dtype · f), bytes / B) + gemm fixed time, with f the
  forward or backward fraction (`op.phase == "bwd"` selects backward; recompute is a
  forward).
- elementwise, optimizer, memcpy, quantize: memory-bound,
  max(FLOPs / (vector_peak_fraction · peak), bytes / B) + min kernel time.
- every op: + launch overhead (the gap between back-to-back kernels on a stream).
- interference (`interference`, applied by the engine to the part of an op that overlaps
  a collective of the same GPU): the compute-bound or the memory-bound factor.

Fitted rates (`GpuCalibration.rates`, optional) replace these constants one by one: a
GEMM peak replaces P (the curve stays), a GEMM rate (+ overhead) replaces P·s_dtype·eff
for GEMMs off the table (a CPU host has no meaningful efficiency curve), a memory
bandwidth replaces B, an attention rate replaces P·f, and the fixed, launch and
host-issue times replace their defaults; a calibration's interference factors replace
the defaults'.

`kernel_time_s` is what a profiler reports as the kernel duration; `duration_s` adds the
launch overhead and is what the engine uses. Results are cached per distinct op.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

from simulator.cost.calibration import Calibration, GemmIndex, GemmMatch, KernelRates
from simulator.cost.gemm import best_tile, gemm_efficiency
from simulator.cost.kernel_params import KernelParams, kernel_params
from simulator.cost.sm_share import sms_for_gemm
from simulator.cost.terms import Interference
from simulator.errors import CostModelError
from topologies.hardware import GpuSpec, gpu_spec
from workloads.ops import USERBUFFERS_STREAM_PREFIX, ComputeKind, ComputeOp, Op

OpKey = tuple[ComputeKind, tuple[int, ...], float, float, int, bool, int]
ATTENTION_KERNELS = ("fa2", "fa1")
MEMORY_BOUND = frozenset(
    {ComputeKind.ELEMENTWISE, ComputeKind.OPTIMIZER, ComputeKind.MEMCPY, ComputeKind.QUANTIZE}
)


def _op_key(op: ComputeOp) -> OpKey:
    """What determines an op's duration (the cache key)."""
    bwd = op.kind is ComputeKind.ATTENTION and op.phase == "bwd"
    shape, dtype, margin = tuple(op.shape), int(op.dtype_bytes), int(op.sm_margin)
    return (op.kind, shape, float(op.flops), float(op.bytes), dtype, bwd, margin)


def _fitted(value: float | None, default: float) -> float:
    """A calibrated rate or overhead when the calibration has it, else the default."""
    return default if value is None else value


def _valid_amounts(op: ComputeOp) -> bool:
    """FLOPs and bytes are finite and non-negative."""
    return all(math.isfinite(x) and x >= 0 for x in (op.flops, op.bytes))


def _gemm_dims(op: ComputeOp) -> tuple[int, int, int, int] | None:
    """(m, n, k, batch) of a GEMM op, None when it has no shape; validates the shape."""
    shape = tuple(op.shape)
    if not shape:
        return None
    if len(shape) not in (3, 4) or any(int(x) != x or x < 0 for x in shape):
        raise CostModelError(
            f"GEMM op '{op.name}': shape must be (m, n, k[, batch]) of non-negative "
            f"integers, got {shape}"
        )
    m, n, k = (int(x) for x in shape[:3])
    return m, n, k, int(shape[3]) if len(shape) == 4 else 1


class KernelModel:
    """Prices compute ops on one GPU type; satisfies the engine's `KernelTimer` protocol.

    `calibration` (optional) overrides the GEMM curve where it has data for this GPU and
    supplies the overlap slowdown; `params` replaces the packaged defaults (tests, what-ifs);
    `attention_kernel` is the fused attention the run's software calls (`fa2`: the
    FlashAttention-2 class the fractions describe; `fa1`: the first generation, at the
    defaults' `fa1_rate_ratio`; a calibration's fitted attention rate stands as fitted).
    """

    def __init__(
        self,
        gpu: GpuSpec | str,
        *,
        calibration: Calibration | None = None,
        params: KernelParams | None = None,
        defaults_path: str | Path | None = None,
        attention_kernel: str = "fa2",
    ) -> None:
        if attention_kernel not in ATTENTION_KERNELS:
            raise CostModelError(
                f"attention kernel '{attention_kernel}': expected one of {ATTENTION_KERNELS}"
            )
        self.attention_kernel = attention_kernel
        self.spec = gpu_spec(gpu) if isinstance(gpu, str) else gpu
        self.params = params if params is not None else kernel_params(self.spec, defaults_path)
        self.calibration = calibration
        gcal = calibration.for_gpu(self.spec.name) if calibration is not None else None
        table = gcal.gemm if gcal is not None else None
        self._gemm_index = GemmIndex(table) if table is not None and table.points else None
        self.rates = gcal.rates if gcal is not None and gcal.rates else KernelRates()
        self._cache: dict[OpKey, float] = {}

    # ----------------------------------------------------------------- rates
    @property
    def gemm_peak_flops(self) -> float:
        """P: the rate a large GEMM sustains on this GPU (bf16/fp16): fitted on this GPU's
        traces when the calibration has it, else the preset's one rule (kernel_params)."""
        p = self.params
        preset = p.gemm_peak_fraction * self.spec.peak_flops * p.sustained_clock_fraction
        return _fitted(self.rates.gemm_peak_flops, preset)

    @property
    def hbm_Bps(self) -> float:
        """Achievable HBM bandwidth (bytes/s) of streaming kernels (fitted, else spec)."""
        spec = self.params.hbm_efficiency * self.spec.hbm_bandwidth_Bps
        return _fitted(self.rates.memory_bandwidth_Bps, spec)

    @property
    def launch_overhead_s(self) -> float:
        """Gap between back-to-back kernels on one stream, added to every op."""
        return _fitted(self.rates.launch_overhead_s, self.params.launch_overhead_s)

    @property
    def gemm_fixed_s(self) -> float:
        """Fixed time of a GEMM kernel (the fitted overhead with a fitted GEMM rate)."""
        return _fitted(self.rates.gemm_overhead_s, self.params.gemm_fixed_s)

    @property
    def min_kernel_s(self) -> float:
        """Fixed time of a memory-bound kernel."""
        return _fitted(self.rates.min_kernel_s, self.params.min_kernel_s)

    def issue_s(self, op: Op) -> float:
        """Host time to dispatch an op (eager PyTorch: dispatcher, autograd, launch; for
        collectives also ProcessGroupNCCL's work and stream-sync bookkeeping; userbuffers
        collectives, launched from Transformer Engine's C++, cost a kernel launch)."""
        r, p = self.rates, self.params
        if isinstance(op, ComputeOp) or op.stream.startswith(USERBUFFERS_STREAM_PREFIX):
            return _fitted(r.issue_compute_s, p.cpu_issue_compute_s)
        return _fitted(r.issue_collective_s, p.cpu_issue_collective_s)

    @property
    def interference(self) -> Interference | None:
        """Fixed stretch factors of compute-bound and memory-bound kernels under
        overlapping communication: the calibration's (fitted on this GPU's traces), else
        the preset's where it fixes them; None: the mechanism (simulator/cost/
        interference.py) prices it. A file with only the single factor of older versions
        (`overlap_slowdown`) meant "compute stretches by this much", and it still
        applies to every kernel."""
        p = self.params
        preset = (
            None
            if p.interference_compute is None or p.interference_memory is None
            else Interference(p.interference_compute, p.interference_memory)
        )
        gcal = self.calibration.for_gpu(self.spec.name) if self.calibration else None
        if gcal is None:
            return preset
        fitted = gcal.interference
        if fitted is None:
            if gcal.overlap_slowdown is not None:
                return Interference.uniform(gcal.overlap_slowdown)
            return preset
        base = preset or Interference()
        return Interference(
            _fitted(fitted.compute, base.compute), _fitted(fitted.memory, base.memory)
        )

    @property
    def overlap_slowdown(self) -> float | None:
        """The compute-bound interference factor (older single-factor interface); None
        where the mechanism prices interference."""
        i = self.interference
        return None if i is None else i.compute

    def efficiency_on(self, m: int, n: int, k: int, batch: int, sm_count: int) -> float:
        """The GEMM curve's efficiency of a shape on `sm_count` SMs/CUs (the ones a
        collective beside it leaves; simulator/cost/interference.py)."""
        p = self.params
        return float(
            gemm_efficiency(
                m,
                n,
                k,
                batch,
                sm_count=sm_count,
                tiles=p.gemm_tiles,
                tile_intensity_knee=p.gemm_tile_intensity_knee,
                k_ramp=p.gemm_k_ramp,
                splits=p.gemm_split_k,
            )
        )

    def gemm_tiles(self, m: int, n: int, k: int, batch: int = 1) -> int:
        """Output tiles of the tile the GEMM curve picks for this shape (a persistent
        kernel's grid is min(tiles, SMs); simulator/cost/interference.py)."""
        p = self.params
        tm, tn = best_tile(
            m,
            n,
            k,
            batch,
            sm_count=self.spec.sm_count,
            tiles=p.gemm_tiles,
            tile_intensity_knee=p.gemm_tile_intensity_knee,
            k_ramp=p.gemm_k_ramp,
        )
        return max(1, math.ceil(m / tm) * math.ceil(n / tn) * max(batch, 1))

    def peak_for_dtype(self, dtype_bytes: int) -> float:
        """P scaled to a dtype's tensor-core rate (fp8/int8, bf16/fp16, fp32/TF32)."""
        scale = self.params.dtype_peak_scale.get(int(dtype_bytes))
        if scale is None:
            raise CostModelError(
                f"no GEMM rate for {dtype_bytes}-byte elements on {self.spec.name} "
                f"(dtype_peak_scale has {sorted(self.params.dtype_peak_scale)})"
            )
        return self.gemm_peak_flops * scale

    # ----------------------------------------------------------------- GEMM curve
    def gemm_efficiency(
        self, m: int, n: int, k: int, batch: int = 1, dtype_bytes: int = 2, sm_margin: int = 0
    ) -> float:
        """Fraction of the dtype's peak a GEMM of this shape achieves on the compute side
        (0..1]; `sm_margin` SMs left to a concurrent communication kernel."""
        sms, share = sms_for_gemm(self.spec.sm_count, sm_margin)
        return share * float(self._efficiency(m, n, k, batch, dtype_bytes, sms))

    def k_ramp(self, dtype_bytes: int = 2) -> float:
        """The k ramp in elements of the GEMM's k loop. It stands for a tile's fixed
        prologue and epilogue time (kernel_defaults.yaml, fitted on 16-bit GEMMs); an
        FP8 tile runs its k loop at the FP8/16-bit tensor-core ratio, so the same time is
        that many more k elements (cuBLASLt's FP8 kernels write the same bf16 tiles)."""
        ramp = self.params.gemm_k_ramp
        if int(dtype_bytes) == 1:
            scale = self.params.dtype_peak_scale
            ramp *= scale.get(1, 1.0) / scale.get(2, 1.0)
        return ramp

    def _efficiency(
        self,
        m: ArrayLike,
        n: ArrayLike,
        k: ArrayLike,
        batch: ArrayLike,
        dtype_bytes: int = 2,
        sm_count: int | None = None,
    ) -> NDArray[np.float64]:
        p = self.params
        return gemm_efficiency(
            m,
            n,
            k,
            batch,
            sm_count=self.spec.sm_count if sm_count is None else sm_count,
            tiles=p.gemm_tiles,
            tile_intensity_knee=p.gemm_tile_intensity_knee,
            k_ramp=self.k_ramp(dtype_bytes),
            splits=p.gemm_split_k,
        )

    def gemm_curve_time_s(
        self,
        m: int,
        n: int,
        k: int,
        batch: int = 1,
        dtype_bytes: int = 2,
        flops: float | None = None,
        nbytes: float | None = None,
        sm_margin: int = 0,
    ) -> float:
        """Kernel time of a GEMM from the curve alone (no calibration, no launch gap).

        FLOPs and bytes default to 2·m·n·k·batch and dtype·(m·k + k·n + m·n)·batch.
        """
        f = 2.0 * m * n * k * batch if flops is None else flops
        b = dtype_bytes * (m * k + k * n + m * n) * batch if nbytes is None else nbytes
        rate = self.rates.gemm_flops_per_s
        if rate is None:
            eff = self.gemm_efficiency(m, n, k, batch, dtype_bytes, sm_margin)
            rate = self.peak_for_dtype(dtype_bytes) * eff
        elif sm_margin:
            rate *= sms_for_gemm(self.spec.sm_count, sm_margin)[1]
        compute = f / rate if f > 0 else 0.0
        return max(compute, b / self.hbm_Bps) + self.gemm_fixed_s

    def _gemm_kernel_s(self, op: ComputeOp) -> float:
        """A GEMM: the calibration table where it applies, else the curve. An SM margin
        stretches a calibrated time by the curve's ratio with and without it."""
        dims = _gemm_dims(op)
        if dims is None:
            rate = self.rates.gemm_flops_per_s or self.peak_for_dtype(op.dtype_bytes)
            rate *= sms_for_gemm(self.spec.sm_count, op.sm_margin)[1]
            return max(op.flops / rate, op.bytes / self.hbm_Bps) + self.gemm_fixed_s
        m, n, k, b = dims
        margin = int(op.sm_margin)
        curve = self.gemm_curve_time_s(m, n, k, b, op.dtype_bytes, op.flops, op.bytes, margin)
        match = self._gemm_index.match(m, n, k, b, op.dtype_bytes) if self._gemm_index else None
        if match is None:
            return curve
        if margin:
            full = self.gemm_curve_time_s(m, n, k, b, op.dtype_bytes, op.flops, op.bytes)
            return self._calibrated_gemm_s(match, full) * curve / full
        return self._calibrated_gemm_s(match, curve)

    def _calibrated_gemm_s(self, match: GemmMatch, curve: float) -> float:
        """The calibration table's time for a GEMM it matches (exact, or the curve
        scaled by the neighbours' measured/curve ratios)."""
        if match.exact_time_s is not None:
            return match.exact_time_s
        log_ratio = sum(
            w
            * math.log(
                p.kernel_time_s / self.gemm_curve_time_s(p.m, p.n, p.k, p.batch, p.dtype_bytes)
            )
            for p, w in match.neighbours
        )
        return curve * math.exp(log_ratio)

    # ----------------------------------------------------------------- other kinds
    def _attention_kernel_s(self, op: ComputeOp) -> float:
        p = self.params
        rate = self.rates.attention_flops_per_s
        if rate is None:
            frac = p.attention_bwd_fraction if op.phase == "bwd" else p.attention_fwd_fraction
            if self.attention_kernel == "fa1":
                frac *= p.attention_fa1_ratio
            rate = self.peak_for_dtype(op.dtype_bytes) * frac
        return max(op.flops / rate, op.bytes / self.hbm_Bps) + self.gemm_fixed_s

    def _memory_bound_kernel_s(self, op: ComputeOp) -> float:
        compute = op.flops / (self.params.vector_peak_fraction * self.spec.peak_flops)
        return max(compute, op.bytes / self.hbm_Bps) + self.min_kernel_s

    # ----------------------------------------------------------------- public API
    def kernel_time_s(self, op: ComputeOp) -> float:
        """The kernel's own duration (what a profiler shows), without the launch gap."""
        if not _valid_amounts(op):
            raise CostModelError(
                f"compute op '{op.name}': flops and bytes must be finite and >= 0 "
                f"(got {op.flops}, {op.bytes})"
            )
        if op.kind is ComputeKind.GEMM:
            return self._gemm_kernel_s(op)
        if op.kind is ComputeKind.ATTENTION:
            return self._attention_kernel_s(op)
        if op.kind in MEMORY_BOUND:
            return self._memory_bound_kernel_s(op)
        raise CostModelError(f"compute op '{op.name}': no kernel model for kind '{op.kind}'")

    def duration_s(self, op: ComputeOp) -> float:
        """Seconds the op occupies its stream: kernel time + launch overhead (cached)."""
        key = _op_key(op)
        hit = self._cache.get(key)
        if hit is None:
            hit = self.kernel_time_s(op) + self.launch_overhead_s
            self._cache[key] = hit
        return hit

    def durations_s(self, ops: Sequence[ComputeOp]) -> NDArray[np.float64]:
        """`duration_s` of many ops at once; uncached GEMMs on the curve are vectorised."""
        out = np.empty(len(ops), dtype=np.float64)
        todo: dict[OpKey, list[int]] = {}
        for i, op in enumerate(ops):
            key = _op_key(op)
            hit = self._cache.get(key)
            if hit is not None:
                out[i] = hit
            else:
                todo.setdefault(key, []).append(i)
        curve_keys: list[OpKey] = []
        for key, idx in todo.items():
            op = ops[idx[0]]
            if self._vectorisable(op):
                curve_keys.append(key)
            else:
                self._cache[key] = self.duration_s(op)
        if curve_keys:
            self._price_gemm_batch([ops[todo[key][0]] for key in curve_keys], curve_keys)
        for key, idx in todo.items():
            out[idx] = self._cache[key]
        return out

    def _vectorisable(self, op: ComputeOp) -> bool:
        """A shaped, valid 16-bit GEMM on all SMs that the calibration table does not
        touch (FP8 GEMMs and SM margins take the scalar path)."""
        if op.kind is not ComputeKind.GEMM or not op.shape:
            return False
        if op.sm_margin or int(op.dtype_bytes) == 1:
            return False
        if not _valid_amounts(op):
            return False
        m, n, k, b = _gemm_dims(op) or (0, 0, 0, 1)
        return (
            self._gemm_index is None or self._gemm_index.match(m, n, k, b, op.dtype_bytes) is None
        )

    def _price_gemm_batch(self, ops: list[ComputeOp], keys: list[OpKey]) -> None:
        """Curve durations of many GEMMs in one numpy pass, stored in the cache."""
        dims = np.array([_gemm_dims(op) for op in ops], dtype=np.float64)
        flops = np.array([op.flops for op in ops], dtype=np.float64)
        nbytes = np.array([op.bytes for op in ops], dtype=np.float64)
        fitted = self.rates.gemm_flops_per_s
        if fitted is not None:
            rate = np.full(len(ops), fitted)
        else:
            peak = np.array([self.peak_for_dtype(op.dtype_bytes) for op in ops], dtype=np.float64)
            rate = peak * self._efficiency(dims[:, 0], dims[:, 1], dims[:, 2], dims[:, 3])
        with np.errstate(divide="ignore", invalid="ignore"):
            compute = np.where(flops > 0, flops / rate, 0.0)
        t = np.maximum(compute, nbytes / self.hbm_Bps) + self.gemm_fixed_s
        t += self.launch_overhead_s
        for key, value in zip(keys, t.tolist(), strict=True):
            self._cache[key] = value

    def describe(self) -> dict[str, object]:
        """The terms this model prices with and where they come from (for reports)."""
        p, r, i = self.params, self.rates, self.interference
        fitted = r.gemm_peak_flops is not None
        return {
            "gpu": self.spec.name,
            "gemm_peak_tflops": self.gemm_peak_flops / 1e12,
            "gemm_peak_source": "fitted on this GPU's traces (calibration)"
            if fitted
            else p.gemm_peak_rule,
            "sustained_clock_fraction": p.sustained_clock_fraction,
            "hbm_GBps": self.hbm_Bps / 1e9,
            "hbm_source": "calibration"
            if r.memory_bandwidth_Bps is not None
            else f"{p.hbm_efficiency:g} x {self.spec.hbm_bandwidth_Bps / 1e9:g} GB/s spec",
            "attention_kernel": self.attention_kernel,
            "launch_gap_us": self.launch_overhead_s * 1e6,
            "min_kernel_us": self.min_kernel_s * 1e6,
            "interference_compute": None if i is None else i.compute,
            "interference_memory": None if i is None else i.memory,
            "calibrated": self.calibration is not None,
        }

    def cache_size(self) -> int:
        """Number of distinct ops priced so far."""
        return len(self._cache)
